/**
 * A pool run whose node is lost: retried once on another provider before its first output, never
 * after it, never twice and never once cancelled. Real pools, fake fleet (fake_fleet.ts).
 */
import assert from "node:assert/strict";
import { OverloadedError } from "../../../shared/errors.ts";
import { errorOf } from "../http/run_bridge.ts";
import { openaiError } from "../http/openai/errors.ts";
import { drain, Fleet, fleetConfig, settle, strict, sub } from "./fake_fleet.ts";

// --- retry on a lost node -----------------------------------------------------------------------

Deno.test(
  "a run whose node is lost before any output is retried once on another node",
  strict,
  async () => {
    const fleet = new Fleet(fleetConfig([
      { id: "node-a", providers: [{ id: "pa", max: 2 }] },
      { id: "node-b", providers: [{ id: "pb", max: 1 }] },
    ]));
    const handle = await fleet.pools.submit("demo", sub("r0"));
    const events = drain(handle);
    assert.equal(handle.nodeId, "node-a");
    fleet.lose(0); // node-a still has a free slot, but the retry must avoid it
    await settle();
    assert.deepEqual(fleet.nodes, ["node-a", "node-b"]);
    assert.equal(handle.nodeId, "node-b");
    assert.equal(handle.runId, "run-2");
    fleet.output(1, "hello");
    fleet.complete(1);
    const seen = await events;
    assert.deepEqual(seen.map((e) => `${e.runId}:${e.type}`), [
      "run-1:started",
      "run-2:started",
      "run-2:output",
      "run-2:completed",
    ]);
    assert.equal((await handle.done).type, "completed");
    await settle();
    assert.deepEqual(fleet.pools.stats("pa"), { inFlight: 0, queued: 0 });
    assert.deepEqual(fleet.pools.stats("pb"), { inFlight: 0, queued: 0 });
  },
);

Deno.test(
  "a caller that has its run is not told later that the run's replacement queues",
  strict,
  async () => {
    const fleet = new Fleet(fleetConfig([
      { id: "node-a", providers: [{ id: "pa", max: 1 }] },
      { id: "node-b", providers: [{ id: "pb", max: 1 }] },
    ]));
    let queuedCalls = 0;
    const handle = await fleet.pools.submit("demo", sub("r0"), { onQueued: () => queuedCalls++ });
    await fleet.pools.submit("demo", sub("r1")); // node-b is full now
    fleet.lose(0); // the replacement must avoid node-a and waits for node-b
    await settle();
    assert.equal(fleet.pools.queueDepth("demo"), 1, "the replacement waits in the queue");
    assert.equal(queuedCalls, 0, "the caller, long answered, hears nothing of it");
    fleet.complete(1);
    await settle();
    assert.equal(handle.nodeId, "node-b");
    fleet.complete(2);
    assert.equal((await handle.done).type, "completed");
  },
);

Deno.test(
  "a run whose node is lost after output started fails NODE_LOST without a retry",
  strict,
  async () => {
    const fleet = new Fleet(fleetConfig([
      { id: "node-a", providers: [{ id: "pa", max: 1 }] },
      { id: "node-b", providers: [{ id: "pb", max: 1 }] },
    ]));
    const handle = await fleet.pools.submit("demo", sub("r0"));
    fleet.output(0, "partial");
    fleet.lose(0);
    const done = await handle.done;
    assert.equal(done.type === "failed" && done.code, "NODE_LOST");
    await settle();
    assert.deepEqual(fleet.nodes, ["node-a"]);
    const seen = await drain(handle);
    assert.deepEqual(seen.map((e) => e.type), ["started", "output", "failed"]);
  },
);

Deno.test(
  "a lost run is retried only once, then its NODE_LOST reaches the caller",
  strict,
  async () => {
    const fleet = new Fleet(fleetConfig([
      { id: "node-a", providers: [{ id: "pa", max: 1 }] },
      { id: "node-b", providers: [{ id: "pb", max: 1 }] },
      { id: "node-c", providers: [{ id: "pc", max: 1 }] },
    ]));
    const handle = await fleet.pools.submit("demo", sub("r0"));
    fleet.lose(0);
    await settle();
    fleet.lose(1);
    const done = await handle.done;
    assert.equal(done.type === "failed" && done.code, "NODE_LOST");
    await settle();
    assert.deepEqual(fleet.nodes, ["node-a", "node-b"], "node-c was never tried");
  },
);

Deno.test("a lost run with no other provider fails NODE_LOST", strict, async () => {
  const fleet = new Fleet(
    fleetConfig([{ id: "node-a", providers: [{ id: "pa", max: 2 }] }], { wait_for_provider_ms: 0 }),
  );
  const handle = await fleet.pools.submit("demo", sub("r0"));
  fleet.lose(0);
  const done = await handle.done;
  assert.equal(done.type === "failed" && done.code, "NODE_LOST");
  assert.deepEqual(fleet.nodes, ["node-a"]);
  await settle();
});

Deno.test(
  "a lost run whose replacement finds the queue full ends OVERLOADED with the queue's Retry-After",
  strict,
  async () => {
    const fleet = new Fleet(fleetConfig([
      { id: "node-a", providers: [{ id: "pa", max: 1 }] },
      { id: "node-b", providers: [{ id: "pb", max: 1 }] },
    ], { max_length: 1 }));
    const handle = await fleet.pools.submit("demo", sub("r0"));
    await fleet.pools.submit("demo", sub("r1")); // node-b is full
    const waiting = fleet.pools.submit("demo", sub("r2")); // and the queue's one place is taken
    await settle();
    fleet.lose(0); // the replacement must avoid node-a: it finds no room
    const done = await handle.done;
    assert.equal(done.type, "failed");
    if (done.type !== "failed") return;
    assert.equal(
      done.code,
      "OVERLOADED",
      "not the first attempt's NODE_LOST: the client backs off",
    );
    assert.match(done.message, /queue is full/);
    assert.ok(done.retryable);
    assert.ok((done.retryAfterSeconds ?? 0) >= 1, `Retry-After ${done.retryAfterSeconds}`);
    const failure = errorOf(done);
    assert.ok(failure instanceof OverloadedError);
    assert.equal(failure.retryAfterSeconds, done.retryAfterSeconds);
    assert.equal(openaiError(failure).status, 429);
    // The replacement never ran; the run that waited in the queue took node-a's freed slot.
    assert.equal((await waiting).nodeId, "node-a");
    assert.deepEqual(fleet.nodes, ["node-a", "node-b", "node-a"]);
    await settle();
  },
);

Deno.test("a cancelled pool run is not retried when its node is lost", strict, async () => {
  const fleet = new Fleet(fleetConfig([
    { id: "node-a", providers: [{ id: "pa", max: 1 }] },
    { id: "node-b", providers: [{ id: "pb", max: 1 }] },
  ]));
  const handle = await fleet.pools.submit("demo", sub("r0"));
  handle.cancel("stop");
  assert.deepEqual(fleet.cancels.map((c) => c.reason), ["stop"]);
  fleet.lose(0);
  const done = await handle.done;
  assert.equal(done.type, "failed");
  await settle();
  assert.deepEqual(fleet.nodes, ["node-a"]);
});

Deno.test(
  "cancelling a run whose retry waits in the queue ends it at once and frees the queue place",
  strict,
  async () => {
    const fleet = new Fleet(fleetConfig([
      { id: "node-a", providers: [{ id: "pa", max: 1 }] },
      { id: "node-b", providers: [{ id: "pb", max: 1 }] },
    ]));
    const handle = await fleet.pools.submit("demo", sub("r0"));
    await fleet.pools.submit("demo", sub("r1"));
    fleet.lose(0); // the retry must avoid node-a, and node-b is busy: it queues
    await settle();
    assert.equal(fleet.pools.queueDepth("demo"), 1);

    handle.cancel("stop");
    await settle();
    assert.equal(fleet.pools.queueDepth("demo"), 0, "the retry left the queue with the cancel");
    const done = await handle.done;
    assert.equal(done.type === "failed" && done.code, "NODE_LOST");
    assert.deepEqual(fleet.pools.stats("pa"), { inFlight: 0, queued: 0 });
    fleet.complete(1);
    await settle();
    assert.deepEqual(fleet.nodes, ["node-a", "node-b"], "the cancelled retry never ran");
  },
);
