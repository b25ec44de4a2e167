/**
 * OpenAI-shaped errors: `{"error":{"message","type","param","code"}}` with the status the
 * error code maps to, `Retry-After` on overload, and the in-stream `data: {"error":…}` frame.
 * @module
 */
import type { Context } from "hono";
import { ERROR_KINDS, OverloadedError, toIopError } from "../../../../shared/errors.ts";
import { FieldError } from "../json_fields.ts";

/** The body of an OpenAI error. */
export interface OpenAIErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

function typeOf(status: number): string {
  if (status === 401) return "invalid_request_error";
  if (status === 429) return "rate_limit_error";
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}

/** The OpenAI error body and HTTP status for anything thrown. */
export function openaiError(err: unknown): { status: number; body: OpenAIErrorBody } {
  const e = toIopError(err);
  const { httpStatus: status, openaiCode: code } = ERROR_KINDS[e.code];
  const param = e instanceof FieldError
    ? (e.param === "" ? null : e.param)
    : e.code === "NOT_FOUND"
    ? "model"
    : null;
  return { status, body: { error: { message: e.message, type: typeOf(status), param, code } } };
}

/** Answers with the OpenAI error for `err`. */
export function openaiErrorResponse(c: Context, err: unknown): Response {
  const { status, body } = openaiError(err);
  const headers: Record<string, string> = {};
  if (err instanceof OverloadedError) {
    headers["retry-after"] = String(err.retryAfterSeconds);
    headers["retry-after-ms"] = String(err.retryAfterSeconds * 1000);
  }
  return c.json(body, status as 400, headers);
}

/** Answers 401 in OpenAI's shape. */
export function openaiUnauthorized(c: Context, message: string): Response {
  return c.json({
    error: { message, type: "invalid_request_error", param: null, code: "invalid_api_key" },
  }, 401);
}

/** Answers an unknown `/v1` path with OpenAI's 404 error object. */
export function openaiNotFound(c: Context): Response {
  return c.json({
    error: {
      message: `Unknown request URL: ${c.req.method} ${new URL(c.req.url).pathname}`,
      type: "invalid_request_error",
      param: null,
      code: "unknown_url",
    },
  }, 404);
}

/** A handler answering 405 in OpenAI's shape for a known path asked with another method. */
export function openaiMethodNotAllowed(allow: string) {
  return function openaiMethodNotAllowedHandler(c: Context): Response {
    return c.json(
      {
        error: {
          message: `Method ${c.req.method} is not allowed on ${
            new URL(c.req.url).pathname
          }; use ${allow}`,
          type: "invalid_request_error",
          param: null,
          code: "method_not_allowed",
        },
      },
      405,
      { allow },
    );
  };
}
