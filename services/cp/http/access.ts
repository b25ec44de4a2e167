/**
 * The HTTP face of Control Plane access: a guard in front of every route that is not explicitly
 * open, which wants `Authorization: Bearer <token>` naming a configured token (401 otherwise)
 * and the operate role for anything but GET/HEAD (403 for a read token); the matched token is
 * the request's principal. Browser origins listed in `access.allowed_origins` get CORS answers;
 * the Control Plane's own origin needs none.
 * @module
 */
import type { Context, MiddlewareHandler } from "hono";
import { bearerToken, matchAccessToken, type Principal, roleAllows } from "../access.ts";
import type { AccessConfig } from "../access_config.ts";

/** The Hono environment of the Control Plane app: guarded routes carry their principal. */
export type CpEnv = { Variables: { principal: Principal } };

/** The `error.code` of a 403 answer: a valid token whose role does not allow the request. */
export const PERMISSION_DENIED = "PERMISSION_DENIED";

/** Options of {@linkcode accessGuard}. */
export interface AccessGuardOptions {
  access: AccessConfig;
  /** Paths served to anyone (health, metrics, dashboard files, the self-checking socket). */
  open: ReadonlySet<string>;
}

const READ_METHODS = new Set(["GET", "HEAD"]);

/** Guards every route not in `open`: token required, operate role for writes. */
export function accessGuard(options: AccessGuardOptions): MiddlewareHandler<CpEnv> {
  const { access, open } = options;
  return async function guardAccess(c, next) {
    const origin = c.req.header("origin");
    const corsOrigin = origin !== undefined && access.allowedOrigins.includes(origin)
      ? origin
      : undefined;
    if (corsOrigin) {
      c.header("Access-Control-Allow-Origin", corsOrigin);
      c.header("Vary", "Origin");
    }
    if (open.has(c.req.path)) return await next();
    if (c.req.method === "OPTIONS") {
      // A CORS preflight carries no credentials; it is answered, and only says yes to an
      // allowed origin.
      if (corsOrigin) {
        c.header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        c.header("Access-Control-Allow-Headers", "Authorization, Content-Type");
        c.header("Access-Control-Max-Age", "600");
      }
      return c.body(null, 204);
    }
    if (access.tokens.length === 0) {
      return unauthenticated(
        c,
        "Cannot serve fleet data as no access tokens are configured: add access.tokens " +
          "(name, token, role read or operate) to the Control Plane config",
      );
    }
    const presented = bearerToken(c.req.header("authorization"));
    if (presented === "") {
      return unauthenticated(
        c,
        "Cannot serve the request without a token: send 'Authorization: Bearer <token>' " +
          "with one of access.tokens",
      );
    }
    const principal = matchAccessToken(presented, access.tokens);
    if (!principal) {
      return unauthenticated(c, "Cannot serve the request as the bearer token is not valid");
    }
    if (!READ_METHODS.has(c.req.method) && !roleAllows(principal.role, "operate")) {
      return c.json({
        error: {
          code: PERMISSION_DENIED,
          message: `Cannot ${c.req.method} ${c.req.path} with token '${principal.name}' as its ` +
            "role is read: use a token with role operate",
        },
      }, 403);
    }
    c.set("principal", principal);
    await next();
  };
}

function unauthenticated(c: Context, message: string): Response {
  c.header("WWW-Authenticate", 'Bearer realm="iop-control-plane"');
  return c.json({ error: { code: "UNAUTHENTICATED", message } }, 401);
}

/**
 * True when a request may come from its `Origin`: none given (not a browser page), the
 * Control Plane's own origin (the scheme and host of the request itself), or one listed in
 * `allowed_origins`.
 */
export function originAllowed(request: Request, allowedOrigins: readonly string[]): boolean {
  const origin = request.headers.get("origin");
  if (origin === null) return true;
  if (allowedOrigins.includes(origin)) return true;
  let presented: string;
  try {
    presented = new URL(origin).origin;
  } catch {
    return false;
  }
  return presented !== "null" && presented === new URL(request.url).origin;
}
