/**
 * A refusal answered in the error shape of the surface a path belongs to, for guards that run
 * before any surface does (Host, Origin, content type, body size): OpenAI's error object on
 * `/v1`, a JSON-RPC error on the A2A endpoints, Ollama's `{"error": "…"}` everywhere else.
 * @module
 */
import type { Context } from "hono";

/** The public surface a path belongs to. */
export type Surface = "openai" | "a2a" | "ollama";

/** Which surface's error shape answers `path`. */
export function surfaceOf(path: string): Surface {
  if (path === "/v1" || path.startsWith("/v1/")) return "openai";
  if ((path === "/a2a" || path.startsWith("/a2a/")) && !path.endsWith("agent-card.json")) {
    return "a2a";
  }
  return "ollama";
}

/** What a guard refuses with. */
export interface Refusal {
  status: 403 | 413 | 415 | 421;
  message: string;
  /** OpenAI's `code` (e.g. `forbidden_origin`). */
  code: string;
}

/** JSON-RPC codes: a request the server will not take is an invalid request. */
const RPC_INVALID_REQUEST = -32600;

/** The body of a refusal in `surface`'s shape. */
export function refusalBody(surface: Surface, refusal: Refusal): Record<string, unknown> {
  switch (surface) {
    case "openai":
      return {
        error: {
          message: refusal.message,
          type: "invalid_request_error",
          param: null,
          code: refusal.code,
        },
      };
    case "a2a":
      return {
        jsonrpc: "2.0",
        id: null,
        error: { code: RPC_INVALID_REQUEST, message: `Invalid request: ${refusal.message}` },
      };
    case "ollama":
      return { error: refusal.message };
  }
}

/** Answers `refusal` in the shape of the surface of the request's path. */
export function refuse(c: Context, refusal: Refusal): Response {
  const surface = surfaceOf(new URL(c.req.url).pathname);
  return c.json(refusalBody(surface, refusal), refusal.status);
}
