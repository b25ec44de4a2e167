/**
 * Browser callers: a request carrying an `Origin` is served only when that origin is listed in
 * `http.cors.allowed_origins` (`*` = any), so a web page an operator happens to open cannot
 * drive the Edge; others are answered 403. For a listed origin the Edge speaks CORS: it answers
 * the preflight `OPTIONS` (204) and marks its responses readable by that origin. With the list
 * empty (the default) CORS is off and every browser origin is refused.
 * @module
 */
import type { MiddlewareHandler } from "hono";
import { refuse } from "./refusal.ts";

/** Headers a browser app may read from answers (retry hints of overload errors). */
const EXPOSED = "retry-after, retry-after-ms";
/** Every method a route here answers (DELETE: `DELETE /v1/responses/{id}`). */
const METHODS = "GET, POST, DELETE, OPTIONS";
const DEFAULT_HEADERS = "authorization, content-type, a2a-version";

/** Whether `origin` (an `Origin` header value) is in `allowed`. */
export function isOriginAllowed(origin: string, allowed: readonly string[]): boolean {
  if (allowed.includes("*")) return true;
  const url = URL.parse(origin);
  return url !== null && url.origin !== "null" && allowed.includes(url.origin);
}

/** Middleware refusing unlisted browser origins and answering CORS for listed ones. */
export function originGuard(allowedOrigins: () => readonly string[]): MiddlewareHandler {
  return async function originGuardMiddleware(c, next) {
    const origin = c.req.header("origin");
    if (origin === undefined) return await next();
    if (!isOriginAllowed(origin, allowedOrigins())) {
      return refuse(c, {
        status: 403,
        code: "origin_not_allowed",
        message: `Requests from the browser origin '${origin}' are not allowed; ` +
          "list it in http.cors.allowed_origins to let a web app call this Edge",
      });
    }
    c.header("access-control-allow-origin", origin);
    c.header("vary", "Origin");
    if (c.req.method === "OPTIONS" && c.req.header("access-control-request-method")) {
      c.header("access-control-allow-methods", METHODS);
      c.header(
        "access-control-allow-headers",
        c.req.header("access-control-request-headers") ?? DEFAULT_HEADERS,
      );
      c.header("access-control-max-age", "600");
      c.header("vary", "Origin, Access-Control-Request-Headers");
      return c.body(null, 204);
    }
    c.header("access-control-expose-headers", EXPOSED);
    await next();
  };
}
