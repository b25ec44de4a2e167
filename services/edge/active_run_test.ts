/**
 * ActiveRun's flow control: which events count as taken, when they are acked, and the stall
 * cancellation of a reader that stays paused.
 */
import assert from "node:assert/strict";
import type { RunEvent } from "../../shared/run.ts";
import { estimatedEventBytes } from "../../shared/run_event_size.ts";
import { ActiveRun, type RunFlow, stallReason } from "./active_run.ts";

const strict = { sanitizeOps: true, sanitizeResources: true };

/** A run with a `windowBytes` window whose acks and cancels the test reads. */
function flowRun(windowBytes: number, stallTimeoutMs = 60_000) {
  const acks: number[] = [];
  const cancels: string[] = [];
  const cancelled = Promise.withResolvers<string>();
  const flow: RunFlow = { stallTimeoutMs, ack: (seq) => acks.push(seq) };
  const run = new ActiveRun(
    { runId: "run_1", nodeId: "n1", adapter: "mock", target: "m", startedAtMs: 0 },
    (reason) => {
      cancels.push(reason);
      cancelled.resolve(reason);
    },
    flow,
  );
  run.attached(windowBytes);
  let seq = 0;
  const output = (text: string) =>
    run.offer({ type: "output", text, runId: "run_1", seq: ++seq, timestampMs: 0 });
  const complete = () =>
    run.offer({
      type: "completed",
      finishReason: "stop",
      exitCode: 0,
      runId: "run_1",
      seq: ++seq,
      timestampMs: 0,
    });
  const seen: RunEvent[] = [];
  run.subscribe((event) => seen.push(event));
  return { run, acks, cancels, cancelled: cancelled.promise, output, complete, seen };
}

/** The bytes one output event of `text` counts for. */
const bytesOf = (text: string) =>
  estimatedEventBytes({ type: "output", text, runId: "run_1", seq: 1, timestampMs: 0 });

Deno.test(
  "a run acks its taken events each quarter window, and its terminal event at once",
  strict,
  () => {
    const text = "x".repeat(100);
    // A quarter window is exactly four events' worth.
    const t = flowRun(16 * bytesOf(text));
    for (let i = 0; i < 3; i++) t.output(text);
    assert.deepEqual(t.acks, [], "nothing acked below a quarter window");
    t.output(text);
    assert.deepEqual(t.acks, [4]);
    for (let i = 0; i < 5; i++) t.output(text);
    assert.deepEqual(t.acks, [4, 8]);
    assert.equal(t.complete(), "terminal");
    assert.deepEqual(t.acks, [4, 8, 10], "the terminal event is acked at once");
    assert.equal(t.seen.length, 10, "every event reached the consumer");
  },
);

Deno.test("events handed to a paused reader count once it reads again", strict, () => {
  const text = "y".repeat(100);
  const t = flowRun(4 * bytesOf(text));
  t.run.setReaderPaused(true);
  for (let i = 0; i < 5; i++) t.output(text);
  assert.deepEqual(t.acks, [], "a paused reader took nothing");
  assert.equal(t.seen.length, 5, "the events were still handed on");
  t.run.setReaderPaused(false);
  assert.deepEqual(t.acks, [5], "resuming takes them all");
  t.run.setReaderPaused(true);
  t.run.setReaderPaused(true);
  t.run.setReaderPaused(false);
  assert.deepEqual(t.acks, [5], "a pause with nothing handed meanwhile acks nothing");
  t.complete();
  assert.deepEqual(t.acks, [5, 6]);
});

Deno.test(
  "a terminal event is acked even while the reader is paused, and ends the stall watch",
  strict,
  () => {
    const t = flowRun(1024 * 1024, 10);
    t.output("a");
    t.run.setReaderPaused(true);
    t.complete();
    assert.deepEqual(t.acks, [2]);
    assert.deepEqual(t.cancels, [], "a finished run is not cancelled for a stall");
  },
);

Deno.test(
  "a reader paused past the stall timeout gets the run cancelled with the reason",
  strict,
  async () => {
    const t = flowRun(1024 * 1024, 20);
    t.output("a");
    t.run.setReaderPaused(true);
    assert.equal(await t.cancelled, "client read nothing for 20 ms (runs.stall_timeout_ms)");
    assert.equal(stallReason(30_000), "client read nothing for 30000 ms (runs.stall_timeout_ms)");
    t.run.finish({ type: "cancelled", reason: await t.cancelled }, 0);
    assert.deepEqual(t.acks, [], "an Edge-side end acks nothing the node did not send");
  },
);

Deno.test("a reader that reads again before the stall timeout keeps its run", strict, () => {
  const t = flowRun(1024 * 1024, 60_000);
  t.run.setReaderPaused(true);
  t.run.setReaderPaused(false);
  t.output("a");
  t.complete();
  assert.deepEqual(t.cancels, []);
});

Deno.test(
  "on a link without a window a run acks nothing, its terminal event included",
  strict,
  () => {
    const text = "z".repeat(1000);
    const t = flowRun(0);
    for (let i = 0; i < 2000; i++) t.output(text);
    t.run.setReaderPaused(true);
    t.output(text);
    t.run.setReaderPaused(false);
    t.complete();
    assert.deepEqual(t.acks, []);
    assert.equal(t.seen.length, 2002, "every event reached the consumer");
  },
);

Deno.test(
  "a run attached to a new link acks at once what was taken, then in the new link's window",
  strict,
  () => {
    const text = "w".repeat(100);
    const t = flowRun(64 * bytesOf(text));
    t.output(text);
    t.output(text);
    assert.deepEqual(t.acks, [], "below a quarter of the first window");
    t.run.attached(4 * bytesOf(text));
    assert.deepEqual(t.acks, [2], "the node may not have had the acks the lost link carried");
    assert.equal(t.run.windowBytes, 4 * bytesOf(text));
    t.output(text);
    assert.deepEqual(t.acks, [2, 3], "a quarter of the new window after that ack");
    assert.equal(t.run.lastSeq, 3);
    assert.equal(t.run.produced, true);
  },
);

Deno.test(
  "a reader that pauses again and again is cancelled only once paused for the whole timeout",
  strict,
  async () => {
    const stallMs = 150;
    const t = flowRun(1024 * 1024, stallMs);
    t.output("a");
    // Flipping the whole time: each pause is short, so the first one's timer finds a later one.
    const startedAt = Date.now();
    let lastPauseAt = 0;
    while (Date.now() - startedAt < 2 * stallMs) {
      t.run.setReaderPaused(true);
      lastPauseAt = Date.now();
      await new Promise((resolve) => setTimeout(resolve, 5));
      t.run.setReaderPaused(false);
    }
    assert.deepEqual(t.cancels, [], "never paused for the whole timeout");
    assert.equal(t.run.stalled, false);
    t.run.setReaderPaused(true);
    lastPauseAt = Date.now();
    assert.equal(await t.cancelled, stallReason(stallMs));
    assert.ok(Date.now() - lastPauseAt >= stallMs - 1, "cancelled a whole timeout after the pause");
    assert.equal(t.run.stalled, true, "the handle says why it was cancelled");
    t.run.finish({ type: "cancelled", reason: stallReason(stallMs) }, 0);
  },
);
