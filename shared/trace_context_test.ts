import assert from "node:assert/strict";
import {
  cleanTracestate,
  formatTraceparent,
  freshTraceContext,
  parseTraceparent,
  traceIdOf,
} from "./trace_context.ts";

const VALID = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

Deno.test("parseTraceparent reads a valid header and formatTraceparent writes it back", () => {
  const ctx = parseTraceparent(VALID);
  assert.deepEqual(ctx, {
    traceId: "0af7651916cd43dd8448eb211c80319c",
    spanId: "b7ad6b7169203331",
    sampled: true,
  });
  assert.equal(formatTraceparent(ctx!), VALID);
  assert.equal(parseTraceparent(VALID.slice(0, -2) + "00")?.sampled, false);
});

Deno.test("parseTraceparent refuses every malformed header", () => {
  const bad = [
    undefined,
    null,
    "",
    "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", // unknown version
    "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", // forbidden version
    "00-00000000000000000000000000000000-b7ad6b7169203331-01", // zero trace id
    "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", // zero span id
    "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01", // uppercase
    "00-0af7651916cd43dd8448eb211c80319-b7ad6b7169203331-01", // short trace id
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01", // short span id
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-1", // short flags
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-zz", // flags not hex
    VALID + "-extra",
    ` ${VALID}`,
  ];
  for (const value of bad) assert.equal(parseTraceparent(value), undefined, String(value));
});

Deno.test("freshTraceContext makes valid, distinct, sampled contexts", () => {
  const a = freshTraceContext();
  const b = freshTraceContext();
  assert.notEqual(a.traceId, b.traceId);
  assert.deepEqual(parseTraceparent(formatTraceparent(a)), a);
  assert.equal(a.sampled, true);
});

Deno.test("traceIdOf reads the trace id, or '' for none or a malformed one", () => {
  assert.equal(traceIdOf(VALID), "0af7651916cd43dd8448eb211c80319c");
  assert.equal(traceIdOf(undefined), "");
  assert.equal(traceIdOf("garbage"), "");
});

Deno.test("cleanTracestate keeps a printable one and drops empty, oversized or binary ones", () => {
  assert.equal(cleanTracestate(" a=1,b=2 "), "a=1,b=2");
  assert.equal(cleanTracestate(""), undefined);
  assert.equal(cleanTracestate("a=" + "x".repeat(600)), undefined);
  assert.equal(cleanTracestate("a=\u0001"), undefined);
});
