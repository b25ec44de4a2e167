/**
 * A pool with no node connected waits for one (`queue.wait_for_provider_ms`) instead of failing:
 * a node restarting, a rolling update that replaces the only node, an Edge whose nodes are still
 * dialing in. And a run its node refused as retryable UNAVAILABLE before any output (a stopping
 * node that got it before its Edge heard it drains) is retried on another connection, which may
 * be the same node id reconnected. Real pools, fake fleet (fake_fleet.ts).
 * @module
 */
import assert from "node:assert/strict";
import { parseEdgeConfig } from "../config.ts";
import { drain, Fleet, fleetConfig, settle, strict, sub, track } from "./fake_fleet.ts";

const oneNode = (queue: Parameters<typeof fleetConfig>[1] = {}) =>
  fleetConfig([{ id: "node-a", providers: [{ id: "pa", max: 1 }] }], queue);

// --- waiting for a provider to connect ----------------------------------------------------------

Deno.test(
  "with its only node away a request waits and runs once the node connects again",
  strict,
  async () => {
    const fleet = new Fleet(oneNode({ wait_for_provider_ms: 60_000, max_wait_ms: 60_000 }));
    fleet.disconnect("node-a");
    const waiting = track(fleet.pools.submit("demo", sub("during the restart")));
    await settle();
    assert.ok(!waiting.settled(), "the request waits instead of failing");
    assert.equal(fleet.pools.queueDepth("demo"), 1);

    fleet.connect("node-a");
    const handle = await waiting.promise;
    assert.equal(handle.nodeId, "node-a");
    assert.deepEqual(fleet.prompts, ["during the restart"]);
    assert.equal(fleet.pools.queueDepth("demo"), 0);
    fleet.complete(0);
    assert.equal((await handle.done).type, "completed");
    await settle();
    assert.deepEqual(fleet.pools.stats("pa"), { inFlight: 0, queued: 0 });
  },
);

Deno.test(
  "a request waiting while the only node drains goes to its replacement, never to it",
  strict,
  async () => {
    const fleet = new Fleet(oneNode({ wait_for_provider_ms: 60_000, max_wait_ms: 60_000 }));
    const inFlight = await fleet.pools.submit("demo", sub("long"));
    fleet.sessions[0]!.draining = true; // SIGTERM: the node told its edge it drains
    const waiting = track(fleet.pools.submit("demo", sub("short")));
    await settle();
    assert.ok(!waiting.settled());
    fleet.complete(0); // the draining node finishes its run; its slot is free, it takes nothing
    await inFlight.done;
    await settle();
    assert.ok(!waiting.settled(), "a draining node's freed slot takes no new run");

    fleet.connect("node-a"); // the new task registers under the same id
    const handle = await waiting.promise;
    assert.deepEqual(fleet.prompts, ["long", "short"]);
    fleet.complete(1);
    await handle.done;
  },
);

Deno.test(
  "nobody connecting within wait_for_provider_ms fails UNAVAILABLE, retryable, naming the wait",
  strict,
  async () => {
    const fleet = new Fleet(oneNode({ wait_for_provider_ms: 20, max_wait_ms: 60_000 }));
    fleet.disconnect("node-a");
    const err = await fleet.pools.submit("demo", sub("nobody")).then(() => undefined, (e) => e);
    assert.equal(err?.code, "UNAVAILABLE");
    assert.equal(err.retryable, true);
    assert.match(err.message, /no provider of it connected within 20 ms/);
    assert.equal(fleet.pools.queueDepth("demo"), 0);
  },
);

Deno.test(
  "a request that saw a provider connect but stay busy waits on to max_wait_ms for a slot",
  strict,
  async () => {
    const fleet = new Fleet(oneNode({ wait_for_provider_ms: 20, max_wait_ms: 60_000 }));
    fleet.disconnect("node-a");
    const first = track(fleet.pools.submit("demo", sub("first")));
    const second = track(fleet.pools.submit("demo", sub("second")));
    await settle();
    fleet.connect("node-a"); // one slot: `first` takes it, `second` waits for a free slot
    await first.promise;
    await new Promise((r) => setTimeout(r, 40)); // past wait_for_provider_ms
    assert.ok(!second.settled(), "the provider wait no longer applies once one is connected");
    fleet.complete(0);
    const handle = await second.promise;
    assert.deepEqual(fleet.prompts, ["first", "second"]);
    fleet.complete(1);
    await handle.done;
  },
);

Deno.test(
  "wait_for_provider_ms 0, or a connected node with an unhealthy adapter, fails at once",
  strict,
  async () => {
    const off = new Fleet(oneNode({ wait_for_provider_ms: 0 }));
    off.disconnect("node-a");
    const refused = track(off.pools.submit("demo", sub("x")));
    await settle();
    assert.ok(refused.settled(), "no wait with wait_for_provider_ms: 0");
    await assert.rejects(refused.promise, { code: "UNAVAILABLE" });

    // The node is there and its model server is down: nothing is on its way, answer now.
    const sick = new Fleet(oneNode({ wait_for_provider_ms: 60_000, max_wait_ms: 60_000 }));
    sick.sessions[0]!.adapterHealth = new Map([["mock", { healthy: false, detail: "down" }]]);
    const unhealthy = track(sick.pools.submit("demo", sub("y")));
    await settle();
    assert.ok(unhealthy.settled(), "an unhealthy connected provider is not waited for");
    await assert.rejects(unhealthy.promise, { code: "UNAVAILABLE" });
  },
);

Deno.test("queue.wait_for_provider_ms defaults to 10 s, at most max_wait_ms", () => {
  const parse = (queue: Record<string, number>) =>
    parseEdgeConfig({
      nodes: [{
        id: "n",
        token: "t",
        adapters: [{ name: "mock", kind: "mock" }],
        providers: [{ id: "p", adapter: "mock", target: "m", model_group: "demo" }],
      }],
      models: [{ name: "demo", route: "pool", queue }],
    }, "edge.yaml").models[0]!.queue;
  assert.equal(parse({}).waitForProviderMs, 10_000);
  assert.equal(parse({ max_wait_ms: 4_000 }).waitForProviderMs, 4_000);
  assert.equal(parse({ wait_for_provider_ms: 0 }).waitForProviderMs, 0);
  assert.throws(() => parse({ max_wait_ms: 5_000, wait_for_provider_ms: 6_000 }), {
    name: "ConfigError",
    message: "edge.yaml: models[0].queue.wait_for_provider_ms: must be at most 5000: " +
      "current value is 6000",
  });
});

// --- retrying a refused run -----------------------------------------------------------------------

Deno.test(
  "a run a stopping node refused before any output is retried on the same id's new connection",
  strict,
  async () => {
    const fleet = new Fleet(oneNode({ wait_for_provider_ms: 60_000, max_wait_ms: 60_000 }));
    const handle = await fleet.pools.submit("demo", sub("raced the drain"));
    const events = drain(handle);
    fleet.sessions[0]!.draining = true;
    fleet.refuse(0); // it reached the node before the edge heard `draining`
    await settle();
    assert.deepEqual(fleet.nodes, ["node-a"], "the retry waits: no other connection serves it");

    fleet.disconnect("node-a");
    fleet.connect("node-a"); // the replacement task, same hostname-derived id
    await settle();
    assert.deepEqual(fleet.nodes, ["node-a", "node-a"]);
    fleet.output(1, "hello");
    fleet.complete(1);
    assert.deepEqual((await events).map((e) => `${e.runId}:${e.type}`), [
      "run-1:started",
      "run-2:started",
      "run-2:output",
      "run-2:completed",
    ]);
  },
);

Deno.test(
  "a refusal after output, or one that is not retryable, reaches the caller",
  strict,
  async () => {
    const two = () =>
      new Fleet(fleetConfig([
        { id: "node-a", providers: [{ id: "pa", max: 1 }] },
        { id: "node-b", providers: [{ id: "pb", max: 1 }] },
      ]));
    const late = two();
    const afterOutput = await late.pools.submit("demo", sub("x"));
    late.output(0, "partial");
    late.refuse(0);
    const ended = await afterOutput.done;
    assert.equal(ended.type === "failed" && ended.code, "UNAVAILABLE");
    assert.deepEqual(late.nodes, ["node-a"]);

    const final = two();
    const notRetryable = await final.pools.submit("demo", sub("y"));
    final.refuse(0, false);
    const done = await notRetryable.done;
    assert.equal(done.type === "failed" && done.code, "UNAVAILABLE");
    await settle();
    assert.deepEqual(final.nodes, ["node-a"]);
  },
);

Deno.test(
  "a refused run goes to another connected node at once",
  strict,
  async () => {
    const fleet = new Fleet(fleetConfig([
      { id: "node-a", providers: [{ id: "pa", max: 2 }] },
      { id: "node-b", providers: [{ id: "pb", max: 1 }] },
    ]));
    const handle = await fleet.pools.submit("demo", sub("r0"));
    fleet.refuse(0);
    await settle();
    assert.deepEqual(fleet.nodes, ["node-a", "node-b"]);
    fleet.complete(1);
    assert.equal((await handle.done).type, "completed");
  },
);
