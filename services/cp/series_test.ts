import assert from "node:assert/strict";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { EdgeStatusResponseSchema } from "../../proto/gen/iop/v1/control_pb.ts";
import { SeriesStore } from "./series.ts";

const BOUNDS = [10, 100, 1000];

type PoolInit = NonNullable<MessageInitShape<typeof EdgeStatusResponseSchema>["pools"]>;

function report(pools: PoolInit, options: { inFlight?: number; startedAtMs?: number } = {}) {
  return create(EdgeStatusResponseSchema, {
    edge: {
      edgeId: "e1",
      runsInFlight: options.inFlight ?? 0,
      startedAtMs: BigInt(options.startedAtMs ?? 1),
    },
    bucketBoundsMs: BOUNDS,
    pools,
  });
}

function pool(name: string, finished: number, tokens: number, latency: number[], extra = {}) {
  return {
    pool: name,
    runsStarted: BigInt(finished),
    runsFinished: BigInt(finished),
    tokensOut: BigInt(tokens),
    latencyBuckets: latency.map(BigInt),
    ttftBuckets: latency.map(BigInt),
    ...extra,
  };
}

Deno.test("record() derives rates and percentiles per pool and for the edge from two reports", () => {
  const store = new SeriesStore({ sampleIntervalMs: 5_000, windowMs: 60_000 });
  assert.equal(
    store.record("e1", report([pool("a", 10, 100, [10, 0, 0, 0])]), 1_000),
    undefined,
    "the first report is only a base",
  );
  const sample = store.record(
    "e1",
    report([
      pool("a", 20, 600, [20, 0, 0, 0], { queued: 3, inFlight: 1 }),
      pool("b", 10, 0, [0, 0, 10, 0], { runsFailed: 5n }),
    ], { inFlight: 4 }),
    6_000,
  );
  assert.ok(sample);
  assert.equal(sample.intervalMs, 5_000);
  assert.deepEqual(sample.pools["a"], {
    requestsPerS: 2,
    tokensPerS: 100,
    failedPerS: 0,
    queueDepth: 3,
    runsInFlight: 1,
    latencyP50Ms: 5,
    latencyP95Ms: 9.5,
    ttftP50Ms: 5,
    ttftP95Ms: 9.5,
  });
  // Pool b is new: everything it counted is in this interval.
  assert.equal(sample.pools["b"]?.requestsPerS, 2);
  assert.equal(sample.pools["b"]?.failedPerS, 1);
  assert.equal(sample.pools["b"]?.latencyP50Ms, 550);
  // The edge: 20 runs in 5 s; its median is in pool a's bucket, its p95 in pool b's.
  assert.equal(sample.edge.requestsPerS, 4);
  assert.equal(sample.edge.tokensPerS, 100);
  assert.equal(sample.edge.queueDepth, 3);
  assert.equal(sample.edge.runsInFlight, 4);
  assert.equal(sample.edge.latencyP50Ms, 10);
  assert.equal(sample.edge.latencyP95Ms, 910);
  assert.deepEqual(store.samples("e1"), [sample]);
});

Deno.test("record() gives null percentiles when no run ended, and skips reports closer than the interval", () => {
  const store = new SeriesStore({ sampleIntervalMs: 5_000, windowMs: 60_000 });
  store.record("e1", report([pool("a", 3, 0, [3, 0, 0, 0])]), 0);
  assert.equal(store.record("e1", report([pool("a", 4, 0, [4, 0, 0, 0])]), 3_000), undefined);
  const quiet = store.record("e1", report([pool("a", 4, 0, [4, 0, 0, 0])]), 5_000);
  assert.ok(quiet);
  // The skipped report's run still counts: the base stayed the report at 0.
  assert.equal(quiet.pools["a"]?.requestsPerS, 0.2);
  const idle = store.record("e1", report([pool("a", 4, 0, [4, 0, 0, 0])]), 10_000);
  assert.equal(idle?.pools["a"]?.requestsPerS, 0);
  assert.equal(idle?.pools["a"]?.latencyP95Ms, null);
  assert.equal(idle?.edge.ttftP50Ms, null);
});

Deno.test("record() counts from zero after the edge restarted", () => {
  const store = new SeriesStore({ sampleIntervalMs: 1_000, windowMs: 60_000 });
  store.record("e1", report([pool("a", 100, 0, [100, 0, 0, 0])], { startedAtMs: 1 }), 0);
  const restarted = store.record(
    "e1",
    report([pool("a", 5, 0, [5, 0, 0, 0])], { startedAtMs: 2 }),
    1_000,
  );
  assert.equal(restarted?.pools["a"]?.requestsPerS, 5);
  // Counters that went down under the same start time are taken as a restart too.
  const lower = store.record(
    "e1",
    report([pool("a", 2, 0, [2, 0, 0, 0])], { startedAtMs: 2 }),
    2_000,
  );
  assert.equal(lower?.pools["a"]?.requestsPerS, 2);
});

Deno.test("the ring keeps only the window and at most its capacity, per edge", () => {
  const store = new SeriesStore({ sampleIntervalMs: 1_000, windowMs: 10_000 });
  assert.equal(store.capacity, 11);
  for (let t = 0; t <= 30_000; t += 1_000) store.record("e1", report([]), t);
  store.record("e2", report([]), 0);
  store.record("e2", report([]), 1_000);
  const kept = store.samples("e1")!;
  assert.equal(kept.length, 11);
  assert.equal(kept[0]?.atMs, 20_000);
  assert.equal(kept.at(-1)!.atMs, 30_000);
  assert.deepEqual(store.samples("e1", 28_000)!.map((s) => s.atMs), [29_000, 30_000]);
  assert.equal(store.samples("e2")!.length, 1);
  assert.equal(store.samples("nope"), undefined);
  assert.deepEqual(store.edgeIds(), ["e1", "e2"]);
});

Deno.test("record() ignores a node query's answer and tells subscribers of each new sample", () => {
  const store = new SeriesStore({ sampleIntervalMs: 1_000, windowMs: 10_000 });
  const seen: string[] = [];
  store.subscribe((edgeId, s) => seen.push(`${edgeId}@${s.atMs}`));
  assert.equal(store.record("e1", create(EdgeStatusResponseSchema, {}), 0), undefined);
  store.record("e1", report([]), 0);
  store.record("e1", report([]), 1_000);
  assert.deepEqual(seen, ["e1@1000"]);
});

Deno.test("SeriesStore rejects a window shorter than its interval", () => {
  assert.throws(
    () => new SeriesStore({ sampleIntervalMs: 5_000, windowMs: 1_000 }),
    (err: unknown) =>
      err instanceof RangeError && /current values are 1000 and 5000/.test(err.message),
  );
});
