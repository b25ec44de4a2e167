import assert from "node:assert/strict";
import {
  currentTrace,
  flushTracing,
  initTracing,
  resourceAttributes,
  shutdownTracing,
  startSpan,
  tracingEnabled,
  withTrace,
} from "./tracing.ts";

const PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

function envOf(vars: Record<string, string>) {
  return (name: string) => vars[name];
}

Deno.test("without an OTLP endpoint tracing stays off and startSpan makes nothing", async () => {
  const on = await initTracing({
    serviceName: "iop-test",
    env: envOf({ OTEL_SERVICE_NAME: "x", OTEL_EXPORTER_OTLP_PROTOCOL: "http/json" }),
  });
  assert.equal(on, false);
  assert.equal(tracingEnabled(), false);
  assert.equal(startSpan("a", { parent: PARENT }), undefined);
});

Deno.test("OTEL_SDK_DISABLED=true keeps tracing off even with an endpoint", async () => {
  const on = await initTracing({
    serviceName: "iop-test",
    env: envOf({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:1", OTEL_SDK_DISABLED: "true" }),
  });
  assert.equal(on, false);
  assert.equal(tracingEnabled(), false);
});

Deno.test("initTracing refuses a protocol it cannot speak with RangeError", async () => {
  await assert.rejects(
    initTracing({
      serviceName: "iop-test",
      env: envOf({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://x", OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" }),
    }),
    {
      name: "RangeError",
      message: "Cannot start tracing as OTEL_EXPORTER_OTLP_PROTOCOL must be http/protobuf or " +
        "http/json: current value is 'grpc'",
    },
  );
  assert.equal(tracingEnabled(), false);
});

Deno.test("resourceAttributes reads key=value pairs, decoding values and skipping bad members", () => {
  assert.deepEqual(resourceAttributes("a=1, b = two%20words,broken,=x,c=%zz,d="), {
    a: "1",
    b: "two words",
    d: "",
  });
  assert.deepEqual(resourceAttributes(undefined), {});
});

Deno.test("withTrace makes a trace current across awaits, and only inside", async () => {
  assert.equal(currentTrace(), undefined);
  const seen = await withTrace({ traceparent: PARENT }, async () => {
    await new Promise((r) => setTimeout(r, 1));
    return currentTrace()?.traceparent;
  });
  assert.equal(seen, PARENT);
  assert.equal(currentTrace(), undefined);
});

Deno.test("with an endpoint, spans go out over OTLP/HTTP protobuf to /v1/traces, child of their parent", async () => {
  const posts: { path: string; type: string; bytes: number }[] = [];
  await using _server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (r) => {
    const bytes = (await r.arrayBuffer()).byteLength;
    posts.push({ path: new URL(r.url).pathname, type: r.headers.get("content-type") ?? "", bytes });
    return new Response(new Uint8Array(), {
      headers: { "content-type": "application/x-protobuf" },
    });
  });
  const endpoint = `http://127.0.0.1:${_server.addr.port}/`;
  try {
    assert.equal(
      await initTracing({
        serviceName: "iop-test",
        env: envOf({ OTEL_EXPORTER_OTLP_ENDPOINT: endpoint }),
      }),
      true,
    );
    const span = startSpan("work", { role: "server", parent: PARENT, state: "k=v" });
    assert.ok(span);
    assert.equal(span.traceId, "0af7651916cd43dd8448eb211c80319c");
    assert.match(span.traceparent, /^00-0af7651916cd43dd8448eb211c80319c-[0-9a-f]{16}-01$/);
    assert.notEqual(span.traceparent, PARENT);
    assert.equal(span.tracestate, "k=v");
    const root = startSpan("root", { parent: "not a traceparent" });
    assert.notEqual(root?.traceId, span.traceId);
    span.end({ code: "X", message: "y" });
    span.end(); // a second end is ignored
    root?.end();
    await flushTracing();
    assert.equal(posts.length, 1);
    assert.equal(posts[0]!.path, "/v1/traces");
    assert.equal(posts[0]!.type, "application/x-protobuf");
    assert.ok(posts[0]!.bytes > 0);
  } finally {
    await shutdownTracing();
  }
  assert.equal(tracingEnabled(), false);
});
