/**
 * Who calls the public surfaces: with API keys configured (`tenants`, or the older
 * `http.api_keys`), every request must carry `Authorization: Bearer <key>`, and the key names
 * the tenant the request is served as; each surface answers a missing or wrong key in its own
 * error shape. Without any key, every request is the tenant `anonymous`.
 * @module
 */
import type { Context, MiddlewareHandler } from "hono";
import { tenantDirectory } from "../tenants/directory.ts";
import type { TenantRecord } from "../tenants/tenant.ts";

/** Options of {@linkcode apiKeyAuth}. */
export interface ApiKeyAuthOptions {
  /** The tenants of the config in force, read per request so a config reload applies. */
  tenants: () => readonly TenantRecord[];
  /** Builds the surface's 401 response. */
  unauthorized: (c: Context, message: string) => Response;
}

// Keyed by the request's context, not its Request: the body limit may replace `c.req.raw` (a
// body without content-length, a DELETE) after the caller was identified.
const callers = new WeakMap<Context, TenantRecord>();

/**
 * The tenant a request passed {@linkcode apiKeyAuth} as. Throws when the route has no such
 * middleware: serving a request without knowing whose it is would be a bug.
 */
export function callerOf(c: Context): TenantRecord {
  const tenant = callers.get(c);
  if (!tenant) throw new Error(`no caller identified for ${c.req.method} ${c.req.path}`);
  return tenant;
}

/** The name of the tenant a request passed {@linkcode apiKeyAuth} as; undefined before or without it. */
export function callerName(c: Context): string | undefined {
  return callers.get(c)?.name;
}

/** Middleware that identifies the caller's tenant, rejecting requests without an accepted key. */
export function apiKeyAuth(options: ApiKeyAuthOptions): MiddlewareHandler {
  return async function apiKeyAuthMiddleware(c, next) {
    const directory = tenantDirectory(options.tenants());
    let tenant = directory.keyless;
    if (!tenant) {
      const header = c.req.header("authorization") ?? "";
      const match = /^Bearer\s+(.+)$/i.exec(header);
      if (!match) {
        return options.unauthorized(
          c,
          "You didn't provide an API key. Provide it in the Authorization header as 'Bearer <key>'.",
        );
      }
      tenant = directory.identify(match[1]!.trim());
      if (!tenant) return options.unauthorized(c, "Incorrect API key provided.");
    }
    callers.set(c, tenant);
    await next();
  };
}

/**
 * Middleware, after {@linkcode apiKeyAuth}, that lets only operator tenants through
 * (`tenants[].operator`): the operator views show every tenant's nodes and runs.
 */
export function operatorOnly(
  refuse: (c: Context, message: string) => Response,
): MiddlewareHandler {
  return async function operatorOnlyMiddleware(c, next) {
    const tenant = callerOf(c);
    if (!tenant.operator) {
      return refuse(
        c,
        `The key of tenant '${tenant.name}' may not read operator views: ` +
          "set operator: true on the tenant to allow it",
      );
    }
    await next();
  };
}
