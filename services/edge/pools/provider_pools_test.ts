/**
 * ProviderPools admission on its own: least-loaded dispatch, per-provider limits and accounting,
 * the bounded FIFO queue (length, max wait, abort) and which providers are eligible. The pools
 * are real; the service layer around them is the fake fleet of fake_fleet.ts.
 */
import assert from "node:assert/strict";
import { IopError, OverloadedError } from "../../../shared/errors.ts";
import { runInput } from "../../../shared/run.ts";
import { Fleet, fleetConfig, settle, strict, sub, track } from "./fake_fleet.ts";

// --- admission and queueing -------------------------------------------------------------------

Deno.test(
  "a run goes to the least-loaded provider with the provider's adapter and target",
  strict,
  async () => {
    const fleet = new Fleet(fleetConfig([
      { id: "node-a", providers: [{ id: "pa", max: 2 }] },
      { id: "node-b", providers: [{ id: "pb", max: 1 }] },
    ]));
    await fleet.pools.submit("demo", sub("r0"));
    await fleet.pools.submit("demo", sub("r1"));
    await fleet.pools.submit("demo", sub("r2"));
    // Loads: 0/2 vs 0/1 (tie, first wins), then 1/2 vs 0/1, then 1/2 vs 1/1 (full).
    assert.deepEqual(fleet.nodes, ["node-a", "node-b", "node-a"]);
    const first = fleet.sent[0]!.submission;
    assert.deepEqual([first.adapter, first.target], ["mock", "model-pa"]);
    assert.equal(first.modelGroup, undefined, "the pool strips the model group before dispatch");
    assert.deepEqual(fleet.pools.stats("pa"), { inFlight: 2, queued: 0 });
    assert.deepEqual(fleet.pools.stats("pb"), { inFlight: 1, queued: 0 });
    for (let i = 0; i < 3; i++) fleet.complete(i);
    await settle();
    assert.deepEqual(fleet.pools.stats("pa"), { inFlight: 0, queued: 0 });
  },
);

Deno.test("queued runs are dispatched first in, first out as slots free up", strict, async () => {
  const fleet = new Fleet(fleetConfig([{ id: "node-a", providers: [{ id: "pa", max: 1 }] }]));
  await fleet.pools.submit("demo", sub("r0"));
  const waiting = ["r1", "r2", "r3"].map((p) => track(fleet.pools.submit("demo", sub(p))));
  await settle();
  assert.deepEqual(fleet.prompts, ["r0"], "the provider's limit of 1 holds the rest back");
  assert.equal(fleet.pools.queueDepth("demo"), 3);
  for (let i = 0; i < 3; i++) {
    fleet.complete(i);
    await waiting[i]!.promise;
    assert.deepEqual(fleet.prompts, ["r0", "r1", "r2", "r3"].slice(0, i + 2));
    assert.ok(waiting.slice(i + 1).every((w) => !w.settled()), "later runs still wait");
    assert.deepEqual(fleet.pools.stats("pa"), { inFlight: 1, queued: 2 - i });
  }
  fleet.complete(3);
  await settle();
  assert.equal(fleet.pools.queueDepth("demo"), 0);
});

Deno.test("each provider keeps its own in-flight and queued counts", strict, async () => {
  const fleet = new Fleet(fleetConfig([
    { id: "node-a", providers: [{ id: "pa", max: 1 }, { id: "pa-other", max: 1, group: "other" }] },
    { id: "node-b", providers: [{ id: "pb", max: 1 }] },
  ]));
  await fleet.pools.submit("demo", sub("r0"));
  await fleet.pools.submit("demo", sub("r1"));
  // Both full: each waiter is accounted to the least-loaded provider at the time it queued.
  const q1 = track(fleet.pools.submit("demo", sub("q1")));
  const q2 = track(fleet.pools.submit("demo", sub("q2")));
  await settle();
  assert.deepEqual(fleet.pools.stats("pa"), { inFlight: 1, queued: 1 });
  assert.deepEqual(fleet.pools.stats("pb"), { inFlight: 1, queued: 1 });
  assert.equal(fleet.pools.queueDepth("demo"), 2);

  // Another group on the same node is not held back by the full "demo" pool.
  await fleet.pools.submit("other", sub("o1"));
  assert.deepEqual(fleet.pools.stats("pa-other"), { inFlight: 1, queued: 0 });
  assert.equal(fleet.pools.queueDepth("other"), 0);
  assert.deepEqual(fleet.pools.stats("no-such-provider"), { inFlight: 0, queued: 0 });

  fleet.complete(1); // pb frees up; the oldest waiter (accounted to pa) runs there
  await q1.promise;
  assert.equal(fleet.sent[3]!.session.id, "node-b");
  assert.deepEqual(fleet.pools.stats("pa"), { inFlight: 1, queued: 0 });
  assert.deepEqual(fleet.pools.stats("pb"), { inFlight: 1, queued: 1 });
  assert.ok(!q2.settled());
  for (const i of [0, 2, 3]) fleet.complete(i);
  await q2.promise;
  fleet.complete(4);
  await settle();
  for (const id of ["pa", "pb", "pa-other"]) {
    assert.deepEqual(fleet.pools.stats(id), { inFlight: 0, queued: 0 }, id);
  }
});

Deno.test(
  "a full queue answers OVERLOADED at once, retryable, with a Retry-After hint",
  strict,
  async () => {
    const fleet = new Fleet(fleetConfig(
      [{ id: "node-a", providers: [{ id: "pa", max: 1 }] }],
      { max_length: 2, max_wait_ms: 10_000 },
    ));
    await fleet.pools.submit("demo", sub("r0"));
    const queued = [
      track(fleet.pools.submit("demo", sub("q1"))),
      track(fleet.pools.submit("demo", sub("q2"))),
    ];
    const err = await fleet.pools.submit("demo", sub("over")).then(() => undefined, (e) => e);
    assert.ok(err instanceof OverloadedError, String(err));
    assert.equal(err.code, "OVERLOADED");
    assert.equal(err.retryable, true);
    assert.equal(err.retryAfterSeconds, 5, "10 s of wait spread over 2 queue places");
    assert.match(err.message, /queue is full: 2 of 2 waiting/);
    assert.equal(fleet.pools.queueDepth("demo"), 2, "the rejected run did not join the queue");
    assert.deepEqual(fleet.pools.stats("pa"), { inFlight: 1, queued: 2 });

    fleet.complete(0);
    await queued[0]!.promise;
    fleet.complete(1);
    await queued[1]!.promise;
    fleet.complete(2);
    await settle();
    assert.deepEqual(fleet.prompts, ["r0", "q1", "q2"], "the rejected run never reached a node");
  },
);

Deno.test(
  "a pool with a zero-length queue rejects as soon as every provider is busy",
  strict,
  async () => {
    const fleet = new Fleet(fleetConfig(
      [{ id: "node-a", providers: [{ id: "pa", max: 1 }] }],
      { max_length: 0 },
    ));
    await fleet.pools.submit("demo", sub("r0"));
    await assert.rejects(fleet.pools.submit("demo", sub("r1")), { code: "OVERLOADED" });
    fleet.complete(0);
    await settle(); // the slot is released once the run's end has been handled
    await fleet.pools.submit("demo", sub("r2"));
    fleet.complete(1);
    await settle();
    assert.deepEqual(fleet.prompts, ["r0", "r2"]);
  },
);

Deno.test(
  "a run that waits longer than max_wait_ms is rejected OVERLOADED and leaves the queue",
  strict,
  async () => {
    const fleet = new Fleet(fleetConfig(
      [{ id: "node-a", providers: [{ id: "pa", max: 1 }] }],
      { max_wait_ms: 30 },
    ));
    await fleet.pools.submit("demo", sub("r0"));
    const started = performance.now();
    const err = await fleet.pools.submit("demo", sub("late")).then(() => undefined, (e) => e);
    assert.ok(performance.now() - started >= 25, "it waited for about max_wait_ms");
    assert.ok(err instanceof OverloadedError, String(err));
    assert.equal(err.retryable, true);
    assert.equal(err.retryAfterSeconds, 1);
    assert.match(err.message, /within 30 ms/);
    assert.equal(fleet.pools.queueDepth("demo"), 0);
    assert.deepEqual(fleet.pools.stats("pa"), { inFlight: 1, queued: 0 });

    fleet.complete(0);
    await settle();
    assert.deepEqual(fleet.prompts, ["r0"], "the timed-out run is not dispatched later");
  },
);

Deno.test(
  "aborting a queued run removes it and rejects CANCELLED without dispatching it",
  strict,
  async () => {
    const fleet = new Fleet(fleetConfig([{ id: "node-a", providers: [{ id: "pa", max: 1 }] }]));
    await fleet.pools.submit("demo", sub("r0"));
    const controller = new AbortController();
    const gone = fleet.pools.submit("demo", sub("gone"), { signal: controller.signal });
    const next = track(fleet.pools.submit("demo", sub("next")));
    await settle();
    assert.equal(fleet.pools.queueDepth("demo"), 2);

    controller.abort();
    const err = await gone.then(() => undefined, (e) => e);
    assert.ok(err instanceof IopError, String(err));
    assert.equal(err.code, "CANCELLED");
    assert.equal(fleet.pools.queueDepth("demo"), 1);
    assert.deepEqual(fleet.pools.stats("pa"), { inFlight: 1, queued: 1 });

    fleet.complete(0);
    await next.promise;
    assert.deepEqual(fleet.prompts, ["r0", "next"], "the aborted run never reached a node");
    fleet.complete(1);
    await settle();
  },
);

Deno.test(
  "an abort with a custom reason still rejects a queued run as CANCELLED",
  strict,
  async () => {
    const fleet = new Fleet(fleetConfig([{ id: "node-a", providers: [{ id: "pa", max: 1 }] }]));
    await fleet.pools.submit("demo", sub("r0"));
    const controller = new AbortController();
    const gone = fleet.pools.submit("demo", sub("gone"), { signal: controller.signal });
    controller.abort("agent stopped");
    await assert.rejects(gone, (e) => e instanceof IopError && e.code === "CANCELLED");
    await assert.rejects(
      fleet.pools.submit("demo", sub("late"), { signal: controller.signal }),
      (e) => e instanceof IopError && e.code === "CANCELLED",
      "an already aborted signal is refused before queueing",
    );
    assert.equal(fleet.pools.queueDepth("demo"), 0);
    fleet.complete(0);
    await settle();
    assert.deepEqual(fleet.prompts, ["r0"]);
  },
);

Deno.test(
  "a slot is freed by a run that fails, is cancelled or cannot be sent",
  strict,
  async () => {
    const fleet = new Fleet(
      fleetConfig([{ id: "node-a", providers: [{ id: "pa", max: 1 }] }], { max_wait_ms: 300 }),
    );
    const first = await fleet.pools.submit("demo", sub("r0"));
    const q1 = fleet.pools.submit("demo", sub("q1"));
    first.cancel("user");
    assert.deepEqual(fleet.cancels, [{ nodeId: "node-a", runId: "run-1", reason: "user" }]);
    fleet.sent[0]!.run.finish({ type: "cancelled", reason: "user" }, 0);
    await q1;

    const q2 = fleet.pools.submit("demo", sub("q2"));
    fleet.sent[1]!.run.finish({
      type: "failed",
      code: "BACKEND_ERROR",
      message: "x",
      retryable: false,
    }, 0);
    await q2;

    fleet.linkDown.add("node-a");
    const q3 = fleet.pools.submit("demo", sub("q3"));
    const q4 = track(fleet.pools.submit("demo", sub("q4")));
    fleet.complete(2);
    // q3's failed send released the slot again, so q4 was tried (and failed) as well; each
    // waited its queue time for another connection, then ends with the send's failure.
    for (const handle of [await q3, await q4.promise]) {
      const done = await handle.done;
      assert.equal(done.type === "failed" && done.code, "UNAVAILABLE");
    }
    assert.deepEqual(fleet.pools.stats("pa"), { inFlight: 0, queued: 0 });
    assert.equal(fleet.pools.queueDepth("demo"), 0);
  },
);

// --- eligibility --------------------------------------------------------------------------------

Deno.test(
  "providers with a missing, disabled, ambiguous or unbuilt adapter on their node are skipped",
  strict,
  async () => {
    const config = fleetConfig([
      { id: "missing", providers: [{ id: "p-missing", max: 4 }] },
      { id: "disabled", providers: [{ id: "p-disabled", max: 4 }] },
      { id: "ambiguous", providers: [{ id: "p-ambiguous", max: 4 }] },
      { id: "unbuilt", providers: [{ id: "p-unbuilt", max: 4 }] },
      { id: "good", providers: [{ id: "p-good", max: 1 }] },
    ]);
    const fleet = new Fleet(config);
    // The sessions hold what the node records say after a reload that validation did not see.
    const [missing, disabled, ambiguous, unbuilt] = config.nodes;
    const mock = missing!.adapters[0]!;
    fleet.sessions.splice(
      0,
      4,
      fleet.session({ ...missing!, adapters: [] }),
      fleet.session({ ...disabled!, adapters: [{ ...mock, enabled: false }] }),
      fleet.session({ ...ambiguous!, adapters: [mock, { ...mock }] }),
      fleet.session(unbuilt!, { adapters: ["something-else"], refused: {} }),
    );
    await fleet.pools.submit("demo", sub("r0"));
    const queued = track(fleet.pools.submit("demo", sub("r1")));
    await settle();
    assert.deepEqual(fleet.nodes, ["good"], "only the usable provider ran, the next run queued");
    assert.ok(!queued.settled());
    fleet.complete(0);
    await queued.promise;
    fleet.complete(1);
    assert.deepEqual(fleet.nodes, ["good", "good"]);

    fleet.sessions.pop();
    await assert.rejects(fleet.pools.submit("demo", sub("r2")), { code: "UNAVAILABLE" });
  },
);

Deno.test(
  "a node that reported building nothing (its policy refused every adapter) gets no runs",
  strict,
  async () => {
    const config = fleetConfig([
      { id: "refusing", providers: [{ id: "p-refusing", max: 4 }] },
      { id: "good", providers: [{ id: "p-good", max: 4 }] },
    ]);
    const fleet = new Fleet(config);
    fleet.sessions.splice(
      0,
      1,
      fleet.session(config.nodes[0]!, {
        adapters: [],
        refused: { mock: "kind 'mock' is not allowed on this node" },
      }),
    );
    for (let i = 0; i < 3; i++) await fleet.pools.submit("demo", sub(`r${i}`));
    assert.deepEqual(fleet.nodes, ["good", "good", "good"]);
  },
);

Deno.test("draining and disconnected nodes get no runs", strict, async () => {
  // No wait for a provider to connect: with none left the request fails at once.
  const fleet = new Fleet(fleetConfig([
    { id: "node-a", providers: [{ id: "pa", max: 4 }] },
    { id: "node-b", providers: [{ id: "pb", max: 4 }] },
    { id: "node-c", providers: [{ id: "pc", max: 4 }] },
  ], { wait_for_provider_ms: 0 }));
  fleet.sessions[0]!.draining = true;
  fleet.sessions.splice(1, 1); // node-b disconnected
  for (let i = 0; i < 3; i++) await fleet.pools.submit("demo", sub(`r${i}`));
  assert.deepEqual(fleet.nodes, ["node-c", "node-c", "node-c"]);

  fleet.sessions.pop();
  const err = await fleet.pools.submit("demo", sub("none")).then(() => undefined, (e) => e);
  assert.ok(err instanceof IopError && err.code === "UNAVAILABLE" && err.retryable, String(err));
  await assert.rejects(fleet.pools.submit("nope", sub("x")), { code: "NOT_FOUND" });
  for (let i = 0; i < 3; i++) fleet.complete(i);
  await settle();
});

Deno.test(
  "capacity that appears without a run finishing goes to the oldest waiter on the next admission",
  strict,
  async () => {
    const fleet = new Fleet(fleetConfig([
      { id: "node-a", providers: [{ id: "pa", max: 1 }] },
      { id: "node-b", providers: [{ id: "pb", max: 1 }] },
    ]));
    const nodeB = fleet.sessions.pop()!; // node-b is not connected yet
    await fleet.pools.submit("demo", sub("r0"));
    const q1 = fleet.pools.submit("demo", sub("q1"));
    const q2 = track(fleet.pools.submit("demo", sub("q2")));
    fleet.sessions.push(nodeB);
    const r3 = track(fleet.pools.submit("demo", sub("r3")));
    await q1;
    assert.deepEqual(fleet.nodes, ["node-a", "node-b"], "q1 took node-b, ahead of r3");
    assert.ok(!q2.settled() && !r3.settled(), "the newcomer queued behind q2");
    assert.equal(fleet.pools.queueDepth("demo"), 2);
    fleet.complete(0);
    await q2.promise;
    fleet.complete(1);
    await r3.promise;
    assert.deepEqual(fleet.prompts, ["r0", "q1", "q2", "r3"]);
    fleet.complete(2);
    fleet.complete(3);
    await settle();
  },
);

Deno.test(
  "admitWaiting() hands a queued run to a node that connected with no other request arriving",
  strict,
  async () => {
    const fleet = new Fleet(fleetConfig([
      { id: "node-a", providers: [{ id: "pa", max: 1 }] },
      { id: "node-b", providers: [{ id: "pb", max: 1 }] },
    ]));
    const nodeB = fleet.sessions.pop()!; // node-b is not connected yet
    await fleet.pools.submit("demo", sub("r0"));
    const q1 = track(fleet.pools.submit("demo", sub("q1")));
    await settle();
    assert.ok(!q1.settled(), "q1 waits while node-a is busy");
    fleet.sessions.push(nodeB);
    fleet.pools.admitWaiting();
    await q1.promise;
    assert.deepEqual(fleet.nodes, ["node-a", "node-b"]);
    assert.equal(fleet.pools.queueDepth("demo"), 0);
    fleet.complete(0);
    fleet.complete(1);
    await settle();
  },
);

// --- direct runs on pooled resources ----------------------------------------------------------

Deno.test(
  "a direct run on a provider's adapter+target holds that provider's slot until it ends",
  strict,
  async () => {
    const fleet = new Fleet(fleetConfig([{ id: "node-a", providers: [{ id: "pa", max: 1 }] }]));
    const direct = { ...runInput({ adapter: "mock", target: "model-pa" }), prompt: "direct" };
    await fleet.pools.dispatchDirect(fleet.sessions[0]!, direct);
    assert.deepEqual(fleet.pools.stats("pa"), { inFlight: 1, queued: 0 });
    // The pool sees the provider full: its run waits instead of overrunning max_concurrency.
    const pooled = track(fleet.pools.submit("demo", sub("pooled")));
    await settle();
    assert.deepEqual(fleet.prompts, ["direct"]);
    assert.deepEqual(fleet.pools.stats("pa"), { inFlight: 1, queued: 1 });
    fleet.complete(0);
    await pooled.promise;
    assert.deepEqual(fleet.prompts, ["direct", "pooled"]);
    // A direct run is never queued, even on a full provider: it runs and is counted.
    await fleet.pools.dispatchDirect(fleet.sessions[0]!, direct);
    assert.deepEqual(fleet.pools.stats("pa"), { inFlight: 2, queued: 0 });
    fleet.complete(1);
    fleet.complete(2);
    await settle();
    assert.deepEqual(fleet.pools.stats("pa"), { inFlight: 0, queued: 0 });
  },
);

Deno.test(
  "usage counts every run per node resource, pool and direct, until it ends",
  strict,
  async () => {
    const fleet = new Fleet(fleetConfig([
      { id: "node-a", providers: [{ id: "pa", max: 2 }] },
      { id: "node-b", providers: [{ id: "pb", max: 2 }] },
    ]));
    await fleet.pools.submit("demo", sub("pooled"));
    const other = { ...runInput({ adapter: "mock", target: "not-a-provider" }), prompt: "d" };
    await fleet.pools.dispatchDirect(fleet.sessions[0]!, other);
    assert.equal(fleet.pools.usage("node-a", "mock", "model-pa"), 1);
    assert.equal(fleet.pools.usage("node-a", "mock", "not-a-provider"), 1);
    assert.equal(fleet.pools.usage("node-a", "mock"), 2);
    assert.equal(fleet.pools.usage("node-b", "mock"), 0);
    assert.deepEqual(fleet.pools.stats("pa"), { inFlight: 1, queued: 0 }, "no provider runs it");
    fleet.complete(0);
    fleet.complete(1);
    await settle();
    assert.equal(fleet.pools.usage("node-a", "mock"), 0);
  },
);

Deno.test("a direct run whose dispatch fails frees what it held", strict, async () => {
  const fleet = new Fleet(fleetConfig([{ id: "node-a", providers: [{ id: "pa", max: 1 }] }]));
  fleet.linkDown.add("node-a");
  const direct = { ...runInput({ adapter: "mock", target: "model-pa" }), prompt: "direct" };
  await assert.rejects(() => fleet.pools.dispatchDirect(fleet.sessions[0]!, direct), IopError);
  assert.deepEqual(fleet.pools.stats("pa"), { inFlight: 0, queued: 0 });
  assert.equal(fleet.pools.usage("node-a", "mock"), 0);
});

// --- fairness across tenants --------------------------------------------------------------------

const tenant = (name: string, weight = 1, maxQueued = 0) => ({
  name,
  weight,
  priority: 1,
  maxQueued,
});

Deno.test(
  "a flooding tenant's burst does not starve a quiet tenant: turns alternate as slots free",
  strict,
  async () => {
    const fleet = new Fleet(
      fleetConfig([{ id: "node-a", providers: [{ id: "pa", max: 1 }] }], { max_length: 64 }),
    );
    const flood = tenant("flood");
    const quiet = tenant("quiet");
    await fleet.pools.submit("demo", sub("f-first"), { tenant: flood });
    const waiting = [];
    for (let i = 0; i < 20; i++) {
      waiting.push(track(fleet.pools.submit("demo", sub(`f${i}`), { tenant: flood })));
    }
    for (let i = 0; i < 3; i++) {
      waiting.push(track(fleet.pools.submit("demo", sub(`q${i}`), { tenant: quiet })));
    }
    await settle();
    for (let done = 0; done < 7; done++) {
      fleet.complete(done);
      await settle();
    }
    // In one global FIFO the quiet tenant would wait behind all 20; fairly, it gets every
    // other slot: q0, q1 and q2 all ran among the first seven slots that freed up.
    assert.deepEqual(fleet.prompts.slice(1, 8), ["f0", "q0", "f1", "q1", "f2", "q2", "f3"]);
    for (let i = 7; i < fleet.sent.length; i++) fleet.complete(i);
    while (fleet.pools.queueDepth("demo") > 0) {
      fleet.complete(fleet.sent.length - 1);
      await settle();
    }
    fleet.complete(fleet.sent.length - 1);
    await Promise.all(waiting.map((w) => w.promise));
  },
);

Deno.test(
  "a full queue gives a quiet tenant a place by displacing the flooding tenant's newest waiter",
  strict,
  async () => {
    const fleet = new Fleet(
      fleetConfig([{ id: "node-a", providers: [{ id: "pa", max: 1 }] }], { max_length: 3 }),
    );
    const flood = tenant("flood");
    await fleet.pools.submit("demo", sub("running"), { tenant: flood });
    const floods = ["f0", "f1", "f2"].map((p) =>
      track(fleet.pools.submit("demo", sub(p), { tenant: flood }))
    );
    // The flooder itself gets no more room once the queue is full.
    await assert.rejects(
      fleet.pools.submit("demo", sub("f3"), { tenant: flood }),
      (err) => err instanceof OverloadedError && /queue is full: 3 of 3/.test(err.message),
    );
    const quiet = track(fleet.pools.submit("demo", sub("q0"), { tenant: tenant("quiet") }));
    await assert.rejects(
      floods[2]!.promise,
      (err) =>
        err instanceof OverloadedError && /tenant 'flood' holds more than its share/.test(
          err.message,
        ) && err.retryAfterSeconds >= 1,
    );
    assert.equal(fleet.pools.queueDepth("demo"), 3);
    for (let i = 0; i < 3; i++) {
      fleet.complete(i);
      await settle();
    }
    assert.deepEqual(fleet.prompts, ["running", "f0", "q0", "f1"]);
    fleet.complete(3);
    await Promise.all([floods[0]!.promise, floods[1]!.promise, quiet.promise]);
  },
);

Deno.test("a tenant's max_queued bounds its waiting runs in each pool", strict, async () => {
  const fleet = new Fleet(fleetConfig([{ id: "node-a", providers: [{ id: "pa", max: 1 }] }]));
  const capped = tenant("capped", 1, 2);
  await fleet.pools.submit("demo", sub("running"), { tenant: capped });
  const queued = [track(fleet.pools.submit("demo", sub("w0"), { tenant: capped }))];
  queued.push(track(fleet.pools.submit("demo", sub("w1"), { tenant: capped })));
  await assert.rejects(
    fleet.pools.submit("demo", sub("w2"), { tenant: capped }),
    (err) => err instanceof OverloadedError && /already has 2 runs waiting/.test(err.message),
  );
  // Another tenant still queues in the same pool.
  queued.push(track(fleet.pools.submit("demo", sub("o0"), { tenant: tenant("other") })));
  await settle();
  assert.equal(fleet.pools.queueDepth("demo"), 3);
  for (let i = 0; i < 4; i++) {
    fleet.complete(i);
    await settle();
  }
  await Promise.all(queued.map((q) => q.promise));
});

Deno.test(
  "Retry-After of a full queue follows the pool's drain rate once runs have finished",
  strict,
  async () => {
    const fleet = new Fleet(
      fleetConfig([{ id: "node-a", providers: [{ id: "pa", max: 1 }] }], {
        max_length: 2,
        max_wait_ms: 600_000,
      }),
    );
    const t = tenant("t");
    await fleet.pools.submit("demo", sub("r0"), { tenant: t });
    fleet.nowMs += 4_000; // runs take 4 s
    fleet.complete(0);
    await settle();
    await fleet.pools.submit("demo", sub("r1"), { tenant: t });
    const waiting = [0, 1].map((i) =>
      track(fleet.pools.submit("demo", sub(`w${i}`), { tenant: t }))
    );
    const err = await fleet.pools.submit("demo", sub("w2"), { tenant: t }).catch((e) => e);
    assert.ok(err instanceof OverloadedError);
    // Two waiting ahead plus itself, one slot, 4 s per run: about 12 s, not the 600 s cap.
    assert.equal(err.retryAfterSeconds, 12);
    for (let i = 1; i < 4; i++) {
      fleet.complete(i);
      await settle();
    }
    await Promise.all(waiting.map((w) => w.promise));
  },
);
