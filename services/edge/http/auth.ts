/**
 * Optional bearer API keys for the public surfaces: when the Edge config lists keys, every
 * request must carry `Authorization: Bearer <key>` with one of them; each surface answers a
 * missing or wrong key in its own error shape. A configured key is plain or `sha256:<hex>`.
 * @module
 */
import type { Context, MiddlewareHandler } from "hono";
import { matchesAnySecret } from "../../../shared/secrets.ts";

/** Options of {@linkcode apiKeyAuth}. */
export interface ApiKeyAuthOptions {
  /**
   * The accepted keys (plain or `sha256:<hex>`), read per request so a config reload applies;
   * empty = no key needed.
   */
  keys: () => readonly string[];
  /** Builds the surface's 401 response. */
  unauthorized: (c: Context, message: string) => Response;
}

/** Middleware that rejects requests without an accepted bearer key. */
export function apiKeyAuth(options: ApiKeyAuthOptions): MiddlewareHandler {
  return async function apiKeyAuthMiddleware(c, next) {
    const keys = options.keys();
    if (keys.length === 0) return await next();
    const header = c.req.header("authorization") ?? "";
    const match = /^Bearer\s+(.+)$/i.exec(header);
    if (!match) {
      return options.unauthorized(
        c,
        "You didn't provide an API key. Provide it in the Authorization header as 'Bearer <key>'.",
      );
    }
    const given = match[1]!.trim();
    // Every key is compared (in constant time), so the time taken does not say which matched.
    if (!matchesAnySecret(given, keys)) {
      return options.unauthorized(c, "Incorrect API key provided.");
    }
    await next();
  };
}
