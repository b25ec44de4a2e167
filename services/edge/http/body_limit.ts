/**
 * Hono's body limit with the limit read at each request, so the limit of a reloaded config
 * applies at once, and the refusal names the limit that was applied.
 * @module
 */
import type { Context, MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";

/** Refuses bodies over `limit()` bytes with `refuse(c, limit)`, before reading them whole. */
export function currentBodyLimit(
  limit: () => number,
  refuse: (c: Context, limit: number) => Response,
): MiddlewareHandler {
  // Built again only when the limit changed, not for every request.
  let built: { maxSize: number; middleware: MiddlewareHandler } | undefined;
  return function currentBodyLimitMiddleware(c, next) {
    const maxSize = limit();
    if (built?.maxSize !== maxSize) {
      built = {
        maxSize,
        middleware: bodyLimit({ maxSize, onError: (ctx) => refuse(ctx, maxSize) }),
      };
    }
    return built.middleware(c, next);
  };
}
