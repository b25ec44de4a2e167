/**
 * JSON request bodies only as `application/json` (or a `+json` type), UTF-8: a browser sends a
 * "simple" cross-site POST only as `text/plain`, a form or without a type, so refusing those
 * (415, before the body is read) leaves a web page no way to reach the API without a CORS
 * preflight the Edge does not grant.
 * @module
 */
import type { MiddlewareHandler } from "hono";
import { refuse } from "./refusal.ts";

/** Whether a `Content-Type` value declares a UTF-8 JSON body. */
export function isJsonContentType(value: string | undefined): boolean {
  if (value === undefined) return false;
  const [type = "", ...params] = value.split(";").map((s) => s.trim().toLowerCase());
  const json = type === "application/json" ||
    /^[a-z0-9!#$&^_.-]+\/[a-z0-9!#$&^_.+-]+\+json$/.test(type);
  if (!json) return false;
  return params.every((p) => {
    const [name, raw = ""] = p.split("=", 2).map((s) => s.trim());
    return name !== "charset" || raw.replace(/^"|"$/g, "") === "utf-8";
  });
}

/** Middleware answering 415 to a request whose body is not declared as JSON. */
export function requireJsonBody(): MiddlewareHandler {
  return async function requireJsonBodyMiddleware(c, next) {
    const type = c.req.header("content-type");
    if (isJsonContentType(type)) return await next();
    return refuse(c, {
      status: 415,
      code: "unsupported_media_type",
      message: `The request body must be sent as Content-Type: application/json (UTF-8): got ${
        type === undefined ? "no Content-Type" : `'${type}'`
      }`,
    });
  };
}
