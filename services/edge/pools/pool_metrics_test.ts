/**
 * The pool metrics as recorded into a real prom-client Registry while the real pools admit,
 * queue, reject and retry runs of a fake fleet (fake_fleet.ts), with a fake clock for queue wait.
 */
import assert from "node:assert/strict";
import { Registry } from "prom-client";
import { Fleet, fleetConfig, settle, strict, sub } from "./fake_fleet.ts";
import { createPoolMetrics } from "./pool_metrics.ts";

// --- metrics ------------------------------------------------------------------------------------

async function metric(
  registry: Registry,
  name: string,
  labels: Record<string, string>,
  series = name,
): Promise<number | undefined> {
  const all = await registry.getMetricsAsJSON();
  const m = all.find((x) => x.name === name);
  const v = m?.values.find((v) =>
    ((v as { metricName?: string }).metricName ?? name) === series &&
    Object.entries(labels).every(([k, want]) => String(v.labels[k]) === want)
  );
  return v?.value;
}

Deno.test(
  "pool metrics record admissions, queue depth, wait and per-provider load",
  strict,
  async () => {
    const registry = new Registry();
    const fleet = new Fleet(
      fleetConfig(
        [
          { id: "node-a", providers: [{ id: "pa", max: 1 }] },
          { id: "node-b", providers: [{ id: "pb", max: 1 }] },
        ],
        { max_length: 1, max_wait_ms: 20_000 },
      ),
      { metrics: createPoolMetrics(registry) },
    );
    const m = (name: string, labels: Record<string, string>, series?: string) =>
      metric(registry, name, labels, series);

    await fleet.pools.submit("demo", sub("r0"));
    await fleet.pools.submit("demo", sub("r1"));
    const queued = fleet.pools.submit("demo", sub("q"));
    await assert.rejects(fleet.pools.submit("demo", sub("full")), { code: "OVERLOADED" });
    const admissions = "iop_edge_pool_admissions_total";
    assert.equal(await m(admissions, { pool: "demo", outcome: "dispatched" }), 2);
    assert.equal(await m(admissions, { pool: "demo", outcome: "queued" }), 1);
    assert.equal(await m(admissions, { pool: "demo", outcome: "rejected_full" }), 1);
    assert.equal(await m("iop_edge_pool_queue_depth", { pool: "demo" }), 1);
    assert.equal(await m("iop_edge_provider_in_flight", { provider: "pa" }), 1);
    assert.equal(await m("iop_edge_provider_queued", { provider: "pa" }), 1);

    fleet.nowMs += 2_500;
    fleet.complete(0);
    await queued;
    const wait = "iop_edge_pool_queue_wait_seconds";
    assert.equal(await m(wait, { pool: "demo" }, `${wait}_sum`), 2.5);
    assert.equal(await m(wait, { pool: "demo" }, `${wait}_count`), 1);
    assert.equal(await m("iop_edge_pool_queue_depth", { pool: "demo" }), 0);
    assert.equal(await m("iop_edge_provider_queued", { provider: "pa" }), 0);

    fleet.lose(1); // r1 on node-b, lost before output: retried on node-a once q finishes
    await settle();
    assert.equal(await m(admissions, { pool: "demo", outcome: "retried" }), 1);
    fleet.complete(2);
    await settle();
    assert.deepEqual(fleet.nodes, ["node-a", "node-b", "node-a", "node-a"]);
    fleet.complete(3);
    await settle();
    assert.equal(await m("iop_edge_provider_in_flight", { provider: "pa" }), 0);
    assert.equal(await m("iop_edge_provider_in_flight", { provider: "pb" }), 0);

    const slowRegistry = new Registry();
    const slow = new Fleet(
      fleetConfig([{ id: "node-a", providers: [{ id: "pa", max: 1 }] }], { max_wait_ms: 10 }),
      { metrics: createPoolMetrics(slowRegistry) },
    );
    await slow.pools.submit("demo", sub("r0"));
    await assert.rejects(slow.pools.submit("demo", sub("late")), { code: "OVERLOADED" });
    assert.equal(
      await metric(slowRegistry, admissions, { pool: "demo", outcome: "rejected_timeout" }),
      1,
    );
    slow.complete(0);
    await settle();
  },
);
