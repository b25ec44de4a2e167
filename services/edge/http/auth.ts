/**
 * Optional bearer API keys for the public surfaces: when the Edge config lists keys, every
 * request must carry `Authorization: Bearer <key>` with one of them; each surface answers a
 * missing or wrong key in its own error shape.
 * @module
 */
import type { Context, MiddlewareHandler } from "hono";

/** Options of {@linkcode apiKeyAuth}. */
export interface ApiKeyAuthOptions {
  /** The accepted keys, read per request so a config reload applies; empty = no key needed. */
  keys: () => readonly string[];
  /** Builds the surface's 401 response. */
  unauthorized: (c: Context, message: string) => Response;
}

/** Compares in time independent of where the strings differ. */
function sameKey(a: string, b: string): boolean {
  const x = new TextEncoder().encode(a);
  const y = new TextEncoder().encode(b);
  let diff = x.length ^ y.length;
  for (let i = 0; i < Math.max(x.length, y.length); i++) diff |= (x[i] ?? 0) ^ (y[i] ?? 0);
  return diff === 0;
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
    let ok = false;
    for (const key of keys) ok = sameKey(given, key) || ok;
    if (!ok) return options.unauthorized(c, "Incorrect API key provided.");
    await next();
  };
}
