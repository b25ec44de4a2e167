import assert from "node:assert/strict";
import { ERROR_CODES, errorKind, httpStatusOf, IopError, toIopError } from "./errors.ts";

Deno.test("every error code maps to a status a client can act on and a retry rule", () => {
  const seen = ERROR_CODES.map((code) => [code, httpStatusOf(code), errorKind(code).retryable]);
  assert.deepEqual(seen, [
    ["INVALID_ARGUMENT", 400, false],
    ["NOT_FOUND", 404, false],
    ["UNAUTHENTICATED", 401, false],
    ["OVERLOADED", 429, true],
    ["UNAVAILABLE", 503, true],
    ["TIMEOUT", 504, false],
    ["CANCELLED", 499, false],
    ["BACKEND_ERROR", 500, false],
    ["NODE_LOST", 503, true],
    ["INTERNAL", 500, false],
  ]);
});

Deno.test("an IopError is retryable by its code's rule unless told otherwise", () => {
  assert.equal(new IopError("NODE_LOST", "gone").retryable, true);
  assert.equal(new IopError("TIMEOUT", "slow").retryable, false);
  assert.equal(new IopError("BACKEND_ERROR", "5xx", { retryable: true }).retryable, true);
});

Deno.test("a code this build does not know reads as INTERNAL, not as a success", () => {
  assert.equal(httpStatusOf("QUOTA_EXCEEDED"), 500);
  assert.equal(errorKind("QUOTA_EXCEEDED").retryable, false);
  assert.equal(toIopError(new DOMException("x", "TimeoutError")).code, "TIMEOUT");
});
