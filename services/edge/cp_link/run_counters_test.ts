import assert from "node:assert/strict";
import type { TerminalRunEvent } from "../../../shared/run.ts";
import type { EdgeEvent } from "../ports.ts";
import type { EdgeService } from "../service.ts";
import { BUCKET_BOUNDS_MS, bucketOf, countRuns, poolOf, RunCounters } from "./run_counters.ts";

/** A service with node n1 (provider p1 of group chat on llm/m1) and a bus the test drives. */
function fakeService() {
  const listeners = new Set<(e: EdgeEvent) => void>();
  const runs = new Map<
    string,
    { startedAtMs: number; firstOutputAtMs: number; done: Promise<TerminalRunEvent> }
  >();
  const service = {
    config: {
      nodes: [{
        id: "n1",
        providers: [{ id: "p1", adapter: "llm", target: "m1", modelGroup: "chat" }, {
          id: "p2",
          adapter: "llm",
          target: "m2",
          modelGroup: "",
        }],
      }],
    },
    subscribe(listener: (e: EdgeEvent) => void) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    getRun: (runId: string) => runs.get(runId),
  } as unknown as Pick<EdgeService, "config" | "subscribe" | "getRun">;
  const publish = (e: EdgeEvent) => listeners.forEach((l) => l(e));
  return { service, runs, publish, listeners };
}

const run = { nodeId: "n1", adapter: "llm", target: "m1" };

Deno.test("poolOf() names a provider's model group, its id without one, else adapter/target", () => {
  const { service } = fakeService();
  assert.equal(poolOf(service, run), "chat");
  assert.equal(poolOf(service, { ...run, target: "m2" }), "p2");
  assert.equal(poolOf(service, { ...run, adapter: "cli", target: "build" }), "cli/build");
  assert.equal(poolOf(service, { nodeId: "other", adapter: "mock", target: "" }), "mock");
});

Deno.test("bucketOf() puts a duration in the first bucket whose bound holds it, past the last in the unbounded one", () => {
  assert.equal(bucketOf(0), 0);
  assert.equal(bucketOf(1), 0);
  assert.equal(bucketOf(1.5), 1);
  assert.equal(bucketOf(BUCKET_BOUNDS_MS.at(-1)!), BUCKET_BOUNDS_MS.length - 1);
  assert.equal(bucketOf(BUCKET_BOUNDS_MS.at(-1)! + 1), BUCKET_BOUNDS_MS.length);
});

Deno.test("countRuns() counts starts, ends, failures, output tokens and both histograms per pool from the bus", async () => {
  const { service, runs, publish, listeners } = fakeService();
  const counters = new RunCounters();
  const stop = countRuns(service, counters);
  const terminal: TerminalRunEvent = {
    type: "completed",
    runId: "r1",
    seq: 3,
    timestampMs: 1_300,
    finishReason: "stop",
    usage: { inputTokens: 2, outputTokens: 7 },
    exitCode: 0,
  };
  runs.set("r1", { startedAtMs: 1_000, firstOutputAtMs: 1_040, done: Promise.resolve(terminal) });
  publish({ type: "run_started", atMs: 1_000, runId: "r1", ...run });
  assert.equal(counters.snapshot()[0]!.runsStarted, 1);
  runs.delete("r1"); // the service forgets a run as it ends
  publish({
    type: "run_finished",
    atMs: 1_300,
    runId: "r1",
    ...run,
    status: "completed",
    durationMs: 300,
    errorCode: "",
  });
  // A run that failed before it was sent: no run_started, no handle.
  publish({
    type: "run_finished",
    atMs: 1_400,
    runId: "r2",
    nodeId: "n1",
    adapter: "cli",
    target: "build",
    status: "failed",
    durationMs: 3,
    errorCode: "UNAVAILABLE",
  });
  await Promise.resolve();
  const [chat, build] = counters.snapshot();
  assert.equal(chat!.pool, "chat");
  assert.deepEqual(
    [chat!.runsStarted, chat!.runsFinished, chat!.runsFailed, chat!.tokensOut],
    [1, 1, 0, 7],
  );
  assert.equal(chat!.latencyBuckets[bucketOf(300)], 1);
  assert.equal(chat!.latencyBuckets.reduce((a, b) => a + b), 1);
  assert.equal(chat!.ttftBuckets[bucketOf(40)], 1);
  assert.equal(chat!.ttftBuckets.length, BUCKET_BOUNDS_MS.length + 1);
  assert.equal(build!.pool, "cli/build");
  assert.deepEqual([build!.runsStarted, build!.runsFinished, build!.runsFailed], [1, 1, 1]);
  assert.equal(build!.ttftBuckets.reduce((a, b) => a + b), 0, "no output, no time to first");
  stop();
  assert.equal(listeners.size, 0);
});

Deno.test("snapshot() returns copies: changing one does not change the counters", () => {
  const counters = new RunCounters();
  counters.finished("a", { status: "cancelled", latencyMs: 5, tokensOut: -3 });
  const first = counters.snapshot();
  first[0]!.latencyBuckets[0] = 99;
  first[0]!.runsFinished = 99;
  const again = counters.snapshot()[0]!;
  assert.equal(again.runsFinished, 1);
  assert.equal(again.runsFailed, 0, "cancelled is not a failure");
  assert.equal(again.tokensOut, 0);
  assert.equal(again.latencyBuckets[0], 0);
});
