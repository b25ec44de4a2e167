/**
 * The provider pools' part of a run's trace, with tracing on in this process: a run that waits
 * gets an `iop.queue` span from enqueue to dispatch, child of the run's trace; one dispatched at
 * once gets none.
 */
import assert from "node:assert/strict";
import { flushTracing, initTracing, shutdownTracing } from "../../../shared/tracing.ts";
import { Fleet, fleetConfig, settle, sub } from "./fake_fleet.ts";

const FIRST = "00-11111111111111111111111111111111-1111111111111111-01";
const WAITER = "00-22222222222222222222222222222222-2222222222222222-01";

interface Exported {
  name: string;
  traceId: string;
  parentSpanId: string;
  attributes: { key: string; value: { stringValue?: string } }[];
}

Deno.test("a queued run's wait is an iop.queue span in its trace, ending when it is admitted", async () => {
  const spans: Exported[] = [];
  await using server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (r) => {
    const body = await r.json();
    for (const rs of body.resourceSpans) for (const ss of rs.scopeSpans) spans.push(...ss.spans);
    return Response.json({});
  });
  const env: Record<string, string> = {
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `http://127.0.0.1:${server.addr.port}/v1/traces`,
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "http/json",
  };
  try {
    assert.ok(await initTracing({ serviceName: "iop-edge", env: (n) => env[n] }));
    const fleet = new Fleet(fleetConfig([{ id: "node-a", providers: [{ id: "pa", max: 1 }] }]));
    await fleet.pools.submit("demo", { ...sub("r0"), traceParent: FIRST });
    const waiting = fleet.pools.submit("demo", { ...sub("r1"), traceParent: WAITER });
    await settle();
    await flushTracing();
    assert.equal(spans.length, 0, "the wait's span is still open");
    fleet.complete(0);
    await waiting;
    fleet.complete(1);
    await settle();
    await flushTracing();
    assert.equal(spans.length, 1, JSON.stringify(spans.map((s) => s.name)));
    const queue = spans[0]!;
    assert.equal(queue.name, "iop.queue");
    assert.equal(queue.traceId, "22222222222222222222222222222222");
    assert.equal(queue.parentSpanId, "2222222222222222");
    const attrs = Object.fromEntries(queue.attributes.map((a) => [a.key, a.value.stringValue]));
    // The Edge's own runs (no tenant) name no tenant.
    assert.deepEqual(attrs, {
      "iop.pool": "demo",
      "iop.provider": "pa",
      "iop.queue.outcome": "admitted",
    });
  } finally {
    await shutdownTracing();
  }
});
