import assert from "node:assert/strict";
import { Hono } from "hono";
import { parseTraceparent } from "../../../shared/trace_context.ts";
import { currentTrace } from "../../../shared/tracing.ts";
import { traceRequests } from "./trace_requests.ts";

const CLIENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/** An app whose routes answer with the request trace they saw. */
function app(): Hono {
  const a = new Hono();
  a.use("*", traceRequests());
  const seen = (c: { json: (v: unknown) => Response }) => c.json({ trace: currentTrace() ?? null });
  a.post("/v1/chat/completions", async (c) => {
    await new Promise((r) => setTimeout(r, 1));
    return seen(c);
  });
  a.get("/healthz", seen);
  return a;
}

async function traceOf(path: string, headers: Record<string, string> = {}, method = "POST") {
  const res = await app().request(path, { method, headers });
  return (await res.json()).trace;
}

Deno.test("traceRequests hands the client's traceparent and tracestate to the handler (tracing off)", async () => {
  const trace = await traceOf("/v1/chat/completions", {
    traceparent: CLIENT,
    tracestate: "vendor=1",
  });
  assert.deepEqual(trace, { traceparent: CLIENT, tracestate: "vendor=1" });
});

Deno.test("traceRequests starts a fresh trace for a missing or malformed traceparent, dropping its tracestate", async () => {
  for (
    const headers of [
      {},
      { traceparent: "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01" },
      { traceparent: "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" },
      { traceparent: "00-00000000000000000000000000000000-00f067aa0ba902b7-01" },
      { traceparent: CLIENT.replace("00f067aa0ba902b7", "0000000000000000"), tracestate: "a=b" },
    ]
  ) {
    const trace = await traceOf("/v1/chat/completions", headers);
    const parsed = parseTraceparent(trace.traceparent);
    assert.ok(parsed, `fresh traceparent expected for ${JSON.stringify(headers)}`);
    assert.notEqual(parsed.traceId, "4bf92f3577b34da6a3ce929d0e0e4736");
    assert.equal(trace.tracestate, undefined);
  }
  const a = await traceOf("/v1/chat/completions");
  const b = await traceOf("/v1/chat/completions");
  assert.notEqual(a.traceparent, b.traceparent);
});

Deno.test("traceRequests leaves probes and scrapes untraced", async () => {
  assert.equal(await traceOf("/healthz", { traceparent: CLIENT }, "GET"), null);
});
