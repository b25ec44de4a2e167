/**
 * The run ledger on real parts: a NodeCore running the mock adapter with a SQLite history, and
 * links that are real event outboxes whose frames are decoded back into run events. A run stops
 * at its window and goes on as acks come; through a link loss it is held, replayed from what
 * the Edge received and goes on live; the Edge not resuming it, or the grace period passing,
 * cancels it with a reason its history keeps; without a window nothing waits or is kept.
 */
import assert from "node:assert/strict";
import { setImmediate } from "node:timers";
import type { NodeEnvelope } from "../../../proto/gen/iop/v1/node_pb.ts";
import { createLogger } from "../../../shared/log.ts";
import { isTerminal, type RunEvent, runInput } from "../../../shared/run.ts";
import { fromWireRunEvent } from "../../../shared/run_codec.ts";
import { estimatedEventBytes } from "../../../shared/run_event_size.ts";
import { DEFAULT_MAX_FRAME_BYTES } from "../../../shared/wire/frame.ts";
import { mockAdapterFactory, mockAnswer } from "../adapters/mock.ts";
import { buildAdapterRegistry } from "../adapters/registry.ts";
import { NodeCore, type RunOutlet } from "../node.ts";
import { DEFAULT_NODE_POLICY } from "../policy.ts";
import { openRunStore } from "../store/sqlite_store.ts";
import { eventOutbox } from "./event_outbox.ts";
import { type LedgerLink, type ResumedRun, RunLedger } from "./run_ledger.ts";
import { until } from "../../../tests/util.ts";

const PROMPT = "hold on";

/** A node core with the mock adapter, its history in a temp dir, and a ledger over it. */
async function ledgerNode(options: { graceMs?: number; maxFrameBytes?: number } = {}) {
  const dir = await Deno.makeTempDir({ prefix: "iop_run_ledger_" });
  const store = openRunStore(`${dir}/history.db`);
  const logs: Record<string, unknown>[] = [];
  const logger = createLogger("test", { writer: (line) => logs.push(JSON.parse(line)) });
  const core = new NodeCore({
    nodeId: "n1",
    store,
    logger,
    buildAdapters: (c) => buildAdapterRegistry(c, { mock: mockAdapterFactory }),
    policy: DEFAULT_NODE_POLICY,
  });
  core.applyConfig([{
    name: "mock",
    kind: "mock",
    enabled: true,
    settings: {
      tokens: 4,
      tokenDelayMs: 0,
      startDelayMs: 0,
      failWith: "",
      failRetryable: false,
      embeddingDimensions: 8,
    },
  }]);
  const ledger = new RunLedger({
    core,
    graceMs: options.graceMs ?? 60_000,
    maxFrameBytes: options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES,
    logger,
  });
  return {
    core,
    store,
    ledger,
    logs,
    /** A link with this window ({@linkcode edgeLink}), attached with these held runs resumed. */
    attach(windowBytes: number, resumed: ResumedRun[] = []) {
      const edge = edgeLink(windowBytes);
      ledger.attach(edge.link, resumed);
      return edge;
    },
    /**
     * Starts a mock run through the ledger with these `mock.*` knobs; returns its outlet and a
     * way to await its next pause.
     */
    start(runId: string, knobs: Record<string, number>, embed?: { dimensions: number }) {
      const metadata = Object.fromEntries(
        Object.entries(knobs).map(([k, v]) => [`mock.${k}`, String(v)]),
      );
      const outlet = ledger.open(runId);
      // Counts the times the run's adapter was handed a pending ready(): it then reads nothing
      // more until there is room, so the run is stopped for certain.
      let stalls = 0;
      let seen = 0;
      let ended = false;
      let wake: (() => void) | undefined;
      const watched: RunOutlet = {
        emit(event) {
          outlet.emit(event);
          if (isTerminal(event)) (ended = true, wake?.());
        },
        ready() {
          const room = outlet.ready();
          if (room) (stalls++, wake?.());
          return room;
        },
      };
      core.startRun(
        runId,
        runInput({
          adapter: "mock",
          target: "echo",
          prompt: PROMPT,
          metadata,
          ...(embed ? { embed: { inputs: ["a"], dimensions: embed.dimensions } } : {}),
        }),
        watched,
      );
      return {
        outlet,
        /**
         * Resolves once the run waits for room again ("stalled") or has ended ("ended"), and
         * the events it emitted left the outbox.
         */
        async pause(): Promise<"stalled" | "ended"> {
          while (stalls === seen && !ended) await new Promise<void>((resolve) => (wake = resolve));
          wake = undefined;
          seen = stalls;
          await outboxFlushed();
          return ended ? "ended" : "stalled";
        },
      };
    },
    /** The history row of `runId` once the run ended. */
    async ended(runId: string) {
      return await until(`run ${runId} to end`, () => {
        const row = store.history(50).find((r) => r.runId === runId);
        return row && row.status !== "running" ? row : undefined;
      });
    },
    async [Symbol.asyncDispose]() {
      ledger.close();
      await core.close();
      store.close();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

/** A link as the Edge client builds it: a batching outbox, its frames decoded as they leave. */
function edgeLink(windowBytes: number) {
  const events: RunEvent[] = [];
  const send = eventOutbox((msg: NodeEnvelope["msg"]) => {
    const wire = msg.case === "runEvents"
      ? msg.value.events
      : msg.case === "runEvent"
      ? [msg.value]
      : [];
    for (const w of wire) events.push(fromWireRunEvent(w)!);
  }, { batches: true, maxFrameBytes: DEFAULT_MAX_FRAME_BYTES }).emit;
  const link: LedgerLink = { send, windowBytes };
  return {
    link,
    events,
    of: (runId: string) => events.filter((e) => e.runId === runId),
  };
}

/**
 * Lets the outbox's end-of-turn flush run: immediates run in order, so this one comes after the
 * flush the outbox queued when it was given events (a 0 ms timer may fire before it).
 */
const outboxFlushed = () => new Promise((resolve) => setImmediate(resolve));

const bytesOf = (events: RunEvent[]) => events.reduce((n, e) => n + estimatedEventBytes(e), 0);

/** Asserts `events` are one whole well-formed run: seq 1, 2, 3… once each, one terminal last. */
function assertWhole(events: RunEvent[], answer: string): void {
  assert.deepEqual(events.map((e) => e.seq), events.map((_, i) => i + 1), "every seq once");
  assert.equal(events.filter(isTerminal).length, 1);
  assert.equal(events.at(-1)!.type, "completed");
  const text = events.map((e) => e.type === "output" ? e.text : "").join("");
  assert.equal(text, answer);
}

Deno.test("a run stops once its unacked events fill the window and goes on as the Edge acks", async () => {
  await using node = await ledgerNode();
  const edge = node.attach(2_000);
  const run = node.start("r1", { tokens: 300 });
  let acked = 0;
  let stalls = 0;
  while (await run.pause() === "stalled") {
    assert.equal(edge.events.some(isTerminal), false);
    stalls++;
    const unacked = edge.events.filter((e) => e.seq > acked);
    const bytes = bytesOf(unacked);
    assert.ok(bytes >= 2_000, `stopped with ${bytes} bytes unacked, under the window`);
    assert.ok(
      bytes - estimatedEventBytes(unacked.at(-1)!) < 2_000,
      `read on past a full window: ${bytes} bytes unacked`,
    );
    acked = edge.events.at(-1)!.seq;
    node.ledger.ack("r1", acked);
  }
  assert.ok(stalls >= 5, `the run stopped ${stalls} times`);
  assertWhole(edge.events, mockAnswer(PROMPT, 300));
  assert.equal(node.ledger.size, 1, "kept until its end is acked");
  node.ledger.ack("r1", edge.events.at(-1)!.seq);
  assert.equal(node.ledger.size, 0);
});

Deno.test("a cancel ends a run that waits for its window; the cancellation still goes out", async () => {
  await using node = await ledgerNode();
  const edge = node.attach(500);
  const run = node.start("r1", { tokens: 300 });
  assert.equal(await run.pause(), "stalled");
  assert.equal(edge.events.some(isTerminal), false);
  assert.equal(node.core.cancelRun("r1", "client went away"), true);
  const last = await until("the cancellation", () => edge.events.find(isTerminal));
  assert.deepEqual([last.type, last.type === "cancelled" && last.reason], [
    "cancelled",
    "client went away",
  ]);
});

Deno.test("without a window (an older Edge) nothing waits, nothing is kept, a lost link cancels at once", async () => {
  await using node = await ledgerNode();
  const edge = node.attach(0);
  node.start("quick", { tokens: 300 });
  await until("the quick run's end", () => edge.events.some(isTerminal));
  assertWhole(edge.events, mockAnswer(PROMPT, 300));
  assert.equal(node.ledger.size, 0, "nothing kept for a run whose end went out");

  node.start("slow", { tokens: 1_000, token_delay_ms: 10 });
  await until("slow output", () => edge.of("slow").some((e) => e.type === "output"));
  node.ledger.detach();
  assert.deepEqual(node.ledger.held(), []);
  const row = await node.ended("slow");
  assert.deepEqual([row.status, row.error?.message], ["cancelled", "link to edge lost"]);
});

Deno.test("a run held through a link loss sends again what the Edge missed, once, and goes on live", async () => {
  await using node = await ledgerNode();
  const first = node.attach(1 << 20);
  node.start("r1", { tokens: 60, token_delay_ms: 5 });
  await until("some output", () => first.events.length >= 6);
  node.ledger.detach();
  // What the outbox held when the link was lost was sent on it before.
  await outboxFlushed();
  const sent = first.events.length;
  // Held, the run goes on producing (its window has room); the events stay with the ledger.
  const held = await until("more events while held", () => {
    const offer = node.ledger.held()[0];
    return offer && offer.lastSeq > sent + 3 ? offer : undefined;
  });
  assert.equal(held.runId, "r1");
  assert.equal(first.events.length, sent, "nothing goes to a lost link");

  // The Edge received all but the last two the old link carried.
  const received = sent - 2;
  const second = node.attach(1 << 20, [{ runId: "r1", receivedSeq: received }]);
  await until("the run's end", () => second.events.some(isTerminal));
  assert.equal(second.events[0]!.seq, received + 1);
  assertWhole([...first.events.slice(0, received), ...second.events], mockAnswer(PROMPT, 60));
  const row = await node.ended("r1");
  assert.equal(row.status, "completed");
  node.ledger.ack("r1", second.events.at(-1)!.seq);
  assert.equal(node.ledger.size, 0);
});

Deno.test("a held run the Edge does not resume is cancelled, its history says why, and nothing of it goes out", async () => {
  await using node = await ledgerNode();
  const first = node.attach(1 << 20);
  node.start("r1", { tokens: 1_000, token_delay_ms: 5 });
  await until("some output", () => first.events.length >= 3);
  node.ledger.detach();
  const second = node.attach(1 << 20);
  const row = await node.ended("r1");
  assert.deepEqual(
    [row.status, row.error?.message],
    ["cancelled", "the edge no longer waits for run r1"],
  );
  assert.deepEqual(second.events, []);
  assert.equal(node.ledger.size, 0);
  assert.ok(node.logs.some((l) =>
    l.msg === "held runs taken up by the edge" &&
    JSON.stringify(l.cancelled) === JSON.stringify(["r1"])
  ));
});

Deno.test("past the grace period held runs are cancelled with a reason naming edge.resume_grace_ms", async () => {
  await using node = await ledgerNode({ graceMs: 100 });
  const first = node.attach(1 << 20);
  node.start("r1", { tokens: 10_000, token_delay_ms: 5 });
  await until("some output", () => first.events.length >= 3);
  node.ledger.detach();
  const row = await node.ended("r1");
  assert.deepEqual(
    [row.status, row.error?.message],
    ["cancelled", "link to edge lost for 100 ms (edge.resume_grace_ms)"],
  );
  assert.deepEqual(node.ledger.held(), [], "no longer offered");
  assert.ok(node.logs.some((l) => l.msg === "held runs cancelled" && l.level === "warn"));
  // Kept until the next link (a registration under way may resume it), which does not.
  assert.equal(node.ledger.size, 1);
  const second = node.attach(1 << 20);
  assert.equal(node.ledger.size, 0);
  await outboxFlushed();
  assert.deepEqual(second.events, []);
});

Deno.test("a run whose grace runs out while a registration is under way still ends on the Edge", async () => {
  await using node = await ledgerNode({ graceMs: 100 });
  const first = node.attach(1 << 20);
  node.start("r1", { tokens: 10_000, token_delay_ms: 5 });
  await until("some output", () => first.events.length >= 3);
  node.ledger.detach();
  // The registration lists the run; its answer comes only after the grace ran out.
  assert.deepEqual(node.ledger.held().map((h) => h.runId), ["r1"]);
  const row = await node.ended("r1");
  const reason = "link to edge lost for 100 ms (edge.resume_grace_ms)";
  assert.deepEqual([row.status, row.error?.message], ["cancelled", reason]);
  const received = first.events.at(-1)!.seq;
  // The Edge re-attached the run (and a second one the node never had): it waits for both.
  const second = node.attach(1 << 20, [
    { runId: "r1", receivedSeq: received },
    { runId: "ghost", receivedSeq: 4 },
  ]);
  await until("r1's end", () => second.of("r1").some(isTerminal));
  const all = [...first.events, ...second.of("r1")];
  assert.deepEqual(all.map((e) => e.seq), all.map((_, i) => i + 1), "every seq once");
  const end = all.at(-1)!;
  assert.deepEqual([end.type, end.type === "cancelled" && end.reason], ["cancelled", reason]);
  await until("ghost's end", () => second.of("ghost").length > 0);
  const ghost = second.of("ghost");
  assert.deepEqual(ghost.map((e) => [e.seq, e.type]), [[5, "cancelled"]]);
  assert.match(
    ghost[0]!.type === "cancelled" ? ghost[0]!.reason : "",
    /no longer had run ghost/,
  );
  node.ledger.ack("r1", end.seq);
  assert.equal(node.ledger.size, 0);
});

Deno.test("after a resume, events the Edge received but its client did not take still fill the window", async () => {
  await using node = await ledgerNode();
  const first = node.attach(2_000);
  const run = node.start("r1", { tokens: 300 });
  assert.equal(await run.pause(), "stalled");
  node.ledger.detach();
  // The Edge received every event, but its client took none: nothing was acknowledged.
  const received = first.events.at(-1)!.seq;
  const second = node.attach(2_000, [{ runId: "r1", receivedSeq: received }]);
  assert.notEqual(run.outlet.ready(), undefined, "a resume is no acknowledgement: still no room");
  await outboxFlushed();
  assert.equal(second.events.length, 0, "nothing sent again, nothing new");
  // The client takes them: the run goes on, from where the Edge is.
  node.ledger.ack("r1", received);
  while (await run.pause() === "stalled") node.ledger.ack("r1", second.events.at(-1)!.seq);
  assert.equal(second.events[0]!.seq, received + 1);
  assertWhole([...first.events, ...second.events], mockAnswer(PROMPT, 300));
});

Deno.test("with edge.resume_grace_ms 0 a lost link cancels the runs at once, as before", async () => {
  await using node = await ledgerNode({ graceMs: 0 });
  const first = node.attach(1 << 20);
  node.start("r1", { tokens: 10_000, token_delay_ms: 5 });
  await until("some output", () => first.events.length >= 3);
  node.ledger.detach();
  assert.deepEqual(node.ledger.held(), []);
  const row = await node.ended("r1");
  assert.deepEqual([row.status, row.error?.message], ["cancelled", "link to edge lost"]);
});

Deno.test("a run that ended while held is sent to its end when resumed; one not resumed is only forgotten", async () => {
  await using node = await ledgerNode();
  const first = node.attach(1 << 20);
  node.start("resumed", { tokens: 5, start_delay_ms: 50 });
  node.start("dropped", { tokens: 5, start_delay_ms: 50 });
  await until("both started", () => first.events.length === 2);
  node.ledger.detach();
  assert.equal((await node.ended("resumed")).status, "completed");
  assert.equal((await node.ended("dropped")).status, "completed");
  assert.deepEqual(
    node.ledger.held().map((h) => [h.runId, h.lastSeq]),
    [["resumed", 8], ["dropped", 8]],
    "started, 5 outputs, usage, completed",
  );
  const second = node.attach(1 << 20, [{ runId: "resumed", receivedSeq: 1 }]);
  await until("the replay", () => second.events.some(isTerminal));
  assertWhole([first.of("resumed")[0]!, ...second.events], mockAnswer(PROMPT, 5));
  assert.deepEqual(second.of("dropped"), []);
  assert.equal((await node.ended("dropped")).status, "completed", "a finished run stays finished");
  assert.equal(node.ledger.size, 1);
  node.ledger.ack("resumed", 8);
  assert.equal(node.ledger.size, 0);
});

Deno.test("an event no frame can hold fails its run even while held, and the failure is resumed", async () => {
  await using node = await ledgerNode({ maxFrameBytes: 4_096 });
  const first = node.attach(1 << 20);
  // 2,000 values take 8 KB: more than a 4 KiB frame.
  node.start("big", { start_delay_ms: 50 }, { dimensions: 2_000 });
  await until("started", () => first.events.length === 1);
  node.ledger.detach();
  const row = await node.ended("big");
  assert.equal(row.status, "failed");
  assert.match(row.error?.message ?? "", /more than the link's frame limit of 4096 bytes/);
  const second = node.attach(1 << 20, [{ runId: "big", receivedSeq: 1 }]);
  await until("the failure", () => second.events.some(isTerminal));
  assert.deepEqual(second.events.map((e) => [e.seq, e.type]), [[2, "failed"]]);
});
