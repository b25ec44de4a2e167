/**
 * The Node's link against a fake Edge on a real socket: what frames the run events travel in.
 */
import assert from "node:assert/strict";
import { create, toBinary } from "@bufbuild/protobuf";
import {
  type NodeEnvelope,
  NodeEnvelopeSchema,
  type RegisterRequest,
} from "../../../proto/gen/iop/v1/node_pb.ts";
import { isTerminal, type RunEvent, type RunInput, runInput } from "../../../shared/run.ts";
import { fromWireRunEvent, toRunRequest } from "../../../shared/run_codec.ts";
import { estimatedEventBytes } from "../../../shared/run_event_size.ts";
import { startFakeOllama } from "../../../shared/testing/fake_ollama.ts";
import { DEFAULT_MAX_FRAME_BYTES } from "../../../shared/wire/frame.ts";
import { createLogger } from "../../../shared/log.ts";
import { FrameConnection } from "../../../shared/wire/connection.ts";
import { plainLink } from "../../../shared/wire/link.ts";
import { adapterCatalog } from "../adapters/catalog.ts";
import { mockAdapterFactory, mockAnswer } from "../adapters/mock.ts";
import { type AdapterFactories, buildAdapterRegistry } from "../adapters/registry.ts";
import { NodeCore } from "../node.ts";
import { DEFAULT_NODE_POLICY, type NodePolicy } from "../policy.ts";
import { openRunStore } from "../store/sqlite_store.ts";
import { until } from "../../../tests/util.ts";
import { type EdgeClientOptions, startEdgeClient } from "./edge_client.ts";

/** What {@linkcode framesOfOneRun} runs: its adapter's kind and settings, and its input. */
interface OneRun {
  kind: "mock" | "ollama";
  settings: Record<string, unknown>;
  input: RunInput;
}

const ECHO_RUN: OneRun = {
  kind: "mock",
  settings: { tokens: 5, token_delay_ms: 0 },
  input: runInput({ adapter: "mock", target: "echo" }),
};

/** The default policy, plus model servers on this host. */
const POLICY: NodePolicy = {
  ...DEFAULT_NODE_POLICY,
  adapterKinds: ["mock", "ollama"],
  backendHosts: ["127.0.0.1"],
  isDefault: false,
};

/** A NodeCore (mock adapters, history in memory) and its Edge client dialing `edgeAddress`. */
function startNode(
  edgeAddress: EdgeClientOptions["edgeAddress"],
  options: Partial<EdgeClientOptions> & { policy?: NodePolicy; catalog?: AdapterFactories } = {},
) {
  const { policy = DEFAULT_NODE_POLICY, catalog = { mock: mockAdapterFactory }, ...rest } = options;
  const logger = createLogger("test", { level: "error" });
  const store = openRunStore(":memory:");
  const core = new NodeCore({
    nodeId: "n1",
    store,
    logger,
    buildAdapters: (c) => buildAdapterRegistry(c, catalog),
    policy,
  });
  const client = startEdgeClient({
    edgeAddress,
    tls: undefined,
    nodeId: "n1",
    token: "t",
    version: "test",
    core,
    logger,
    ...rest,
  });
  return { store, core, client };
}

/**
 * Registers one node with a fake Edge, runs one run, and returns the frames it sent until the
 * run ended. `maxFrameBytes` is the frame limit of both ends (the Edge closes a link that sends
 * a larger frame, failing the test).
 */
async function framesOfOneRun(
  acceptsEventBatches: boolean,
  run: OneRun = ECHO_RUN,
  maxFrameBytes = DEFAULT_MAX_FRAME_BYTES,
): Promise<NodeEnvelope["msg"][]> {
  using listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { store, client } = startNode(`127.0.0.1:${listener.addr.port}`, {
    policy: POLICY,
    catalog: adapterCatalog(),
    maxFrameBytes,
  });
  const conn = new FrameConnection(plainLink(await listener.accept()), {
    inSchema: NodeEnvelopeSchema,
    outSchema: NodeEnvelopeSchema,
    maxFrameBytes,
  });
  const frames: NodeEnvelope["msg"][] = [];
  try {
    const messages = conn.messages();
    assert.equal((await messages.next()).value?.msg.case, "registerRequest");
    await conn.send(create(NodeEnvelopeSchema, {
      msg: {
        case: "registerResponse",
        value: {
          accepted: true,
          acceptsEventBatches,
          config: {
            nodeId: "n1",
            heartbeatIntervalMs: 60_000,
            adapters: [{
              name: run.input.adapter,
              kind: run.kind,
              enabled: true,
              settingsJson: JSON.stringify(run.settings),
            }],
          },
        },
      },
    }));
    assert.equal((await messages.next()).value?.msg.case, "nodeEvent");
    await conn.send(create(NodeEnvelopeSchema, {
      msg: {
        case: "runRequest",
        value: toRunRequest("r1", run.input),
      },
    }));
    for await (const envelope of messages) {
      frames.push(envelope.msg);
      const events = wireEventsOf(envelope.msg);
      if (events.some((e) => e.event.case === "completed" || e.event.case === "failed")) break;
    }
  } finally {
    await client.stop();
    conn.close();
    store.close();
  }
  return frames;
}

/** The wire run events one envelope carries: a batch's, a lone event, or none. */
function wireEventsOf(m: NodeEnvelope["msg"]) {
  return m.case === "runEvents" ? m.value.events : m.case === "runEvent" ? [m.value] : [];
}

function eventsOf(frames: NodeEnvelope["msg"][]): string[] {
  return frames.flatMap((m) => wireEventsOf(m).map((e) => e.event.case ?? ""));
}

Deno.test("run events produced in one task travel as one batch frame to an Edge that accepts it", async () => {
  const frames = await framesOfOneRun(true);
  assert.deepEqual(eventsOf(frames), [
    "started",
    "output",
    "output",
    "output",
    "output",
    "output",
    "usage",
    "completed",
  ]);
  assert.ok(frames.some((m) => m.case === "runEvents" && m.value.events.length > 1));
  assert.ok(frames.length < 8, `${frames.length} frames for 8 events`);
});

Deno.test("to an Edge that does not accept batches each run event is its own frame", async () => {
  const frames = await framesOfOneRun(false);
  assert.equal(eventsOf(frames).length, 8);
  assert.ok(frames.every((m) => m.case === "runEvent"));
});

Deno.test("a large embedding answer reaches the Edge in frames under the frame limit", async () => {
  // 160 vectors of 8192 values are 5 MiB of floats, answered at once: one batch frame would
  // exceed 4 MiB and make the Edge close the link; the outbox spreads them over frames.
  await using ollama = startFakeOllama({ defaults: { embeddingDimensions: 8192 } });
  const inputs = Array.from({ length: 160 }, (_, i) => `input ${i}`);
  const frames = await framesOfOneRun(true, {
    kind: "ollama",
    settings: { base_url: ollama.url },
    input: runInput({ adapter: "ollama", target: "llama3.2", embed: { inputs } }),
  });
  const events = frames.flatMap(wireEventsOf);
  const vectors = events.flatMap((e) => e.event.case === "embedding" ? [e.event.value] : []);
  assert.deepEqual(vectors.map((v) => v.index), inputs.map((_, i) => i));
  assert.ok(vectors.every((v) => v.values.length === 8192));
  assert.equal(events.at(-1)?.event.case, "completed");
  for (const frame of frames) {
    const size = toBinary(NodeEnvelopeSchema, create(NodeEnvelopeSchema, { msg: frame })).length;
    assert.ok(size <= DEFAULT_MAX_FRAME_BYTES, `a frame of ${size} bytes`);
  }
});

Deno.test("under a smaller edge.max_frame_bytes vectors still fit, and one too large fails only its run", async () => {
  const limit = 64 * 1024;
  const embedRun = (dimensions: number): OneRun => ({
    kind: "mock",
    settings: { token_delay_ms: 0 },
    input: runInput({
      adapter: "mock",
      target: "echo",
      embed: { inputs: Array.from({ length: 40 }, (_, i) => `input ${i}`), dimensions },
    }),
  });
  // 40 vectors of 4096 values are 640 KiB: ten frames or more, each accepted by the Edge.
  const frames = await framesOfOneRun(true, embedRun(4096), limit);
  const events = frames.flatMap(wireEventsOf);
  const vectors = events.flatMap((e) => e.event.case === "embedding" ? [e.event.value] : []);
  assert.equal(vectors.length, 40);
  assert.equal(events.at(-1)?.event.case, "completed");
  assert.ok(frames.length >= 10, `${frames.length} frames`);

  // One vector of 65,536 values (256 KiB) fits no frame: the run fails, numbered without a gap.
  const failed = await framesOfOneRun(true, embedRun(65_536), limit);
  const ended = failed.flatMap(wireEventsOf);
  assert.deepEqual(ended.map((e) => [Number(e.seq), e.event.case]), [[1, "started"], [
    2,
    "failed",
  ]]);
  const error = ended[1]!.event.case === "failed" ? ended[1]!.event.value.error : undefined;
  assert.equal(error?.code, "BACKEND_ERROR");
  assert.match(
    error?.message ?? "",
    /^Cannot send the embedding event of run 'r1' as it takes about \d+ bytes, more than the link's frame limit of 65536 bytes/,
  );
});

/** A fake Edge's side of one registered link: sends the registration answer, reads the rest. */
async function acceptNode(listener: Deno.TcpListener) {
  const conn = new FrameConnection(plainLink(await listener.accept()), {
    inSchema: NodeEnvelopeSchema,
    outSchema: NodeEnvelopeSchema,
  });
  const messages = conn.messages();
  assert.equal((await messages.next()).value?.msg.case, "registerRequest");
  await conn.send(create(NodeEnvelopeSchema, {
    msg: {
      case: "registerResponse",
      value: {
        accepted: true,
        config: {
          nodeId: "n1",
          heartbeatIntervalMs: 60_000,
          adapters: [{
            name: "mock",
            kind: "mock",
            enabled: true,
            settingsJson: JSON.stringify({ tokens: 3, token_delay_ms: 0 }),
          }],
        },
      },
    },
  }));
  /** The next frame that is not a heartbeat. */
  const next = async () => {
    for (;;) {
      const { done, value } = await messages.next();
      assert.ok(!done, "the node closed the link");
      if (value.msg.case !== "heartbeat") return value.msg;
    }
  };
  return { conn, next };
}

Deno.test("a draining node tells its Edge, again after a redial, and refuses a run that still comes", async () => {
  using listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { store, core, client } = startNode(`127.0.0.1:${listener.addr.port}`, {
    backoffInitialMs: 10,
    backoffMaxMs: 20,
  });
  try {
    const first = await acceptNode(listener);
    const applied = await first.next();
    assert.equal(applied.case === "nodeEvent" && applied.value.event.case, "configApplied");

    core.refuseNewRuns("stopping");
    client.announceDraining(25_000);
    const draining = await first.next();
    assert.ok(draining.case === "nodeEvent" && draining.value.event.case === "draining");
    assert.deepEqual(
      { runs: draining.value.event.value.runsInFlight, ms: draining.value.event.value.deadlineMs },
      { runs: 0, ms: 25_000 },
    );

    await first.conn.send(create(NodeEnvelopeSchema, {
      msg: { case: "runRequest", value: { runId: "r1", adapter: "mock", target: "echo" } },
    }));
    const refused = await first.next();
    assert.ok(refused.case === "runEvent" && refused.value.event.case === "failed");
    assert.equal(refused.value.event.value.error?.code, "UNAVAILABLE");
    assert.equal(refused.value.event.value.error?.retryable, true);
    assert.match(refused.value.event.value.error?.message ?? "", /node 'n1' is stopping/);
    assert.equal(core.history(10).length, 0, "a refused run leaves no history row");

    // The link drops; on the next one the node says again that it drains, right after login.
    first.conn.close("test drops the link");
    const second = await acceptNode(listener);
    const again = await second.next();
    assert.ok(again.case === "nodeEvent" && again.value.event.case === "draining");
    // What is left of the wait, not the whole of it again.
    assert.ok(again.value.event.value.deadlineMs < 25_000, `${again.value.event.value.deadlineMs}`);
    second.conn.close("test done");
  } finally {
    await client.stop();
    store.close();
  }
});

/** A fake Edge's link that can tell a node gone quiet (it waits for credit) from one still sending. */
async function flowLink(listener: { accept(): Promise<Deno.Conn> }) {
  const conn = new FrameConnection(plainLink(await listener.accept()), {
    inSchema: NodeEnvelopeSchema,
    outSchema: NodeEnvelopeSchema,
  });
  const messages = conn.messages();
  const register = (await messages.next()).value!.msg;
  assert.equal(register.case, "registerRequest");
  let pending: Promise<IteratorResult<NodeEnvelope>> | undefined;
  const events: RunEvent[] = [];
  return {
    conn,
    register: register.value as RegisterRequest,
    events,
    answer: (
      flow: { runWindowBytes: number; resumedRuns?: { runId: string; receivedSeq: bigint }[] },
    ) =>
      conn.send(create(NodeEnvelopeSchema, {
        msg: {
          case: "registerResponse",
          value: {
            accepted: true,
            acceptsEventBatches: true,
            config: {
              nodeId: "n1",
              heartbeatIntervalMs: 60_000,
              adapters: [{
                name: "mock",
                kind: "mock",
                enabled: true,
                settingsJson: JSON.stringify({ tokens: 200, token_delay_ms: 0 }),
              }],
            },
            runWindowBytes: flow.runWindowBytes,
            resumedRuns: flow.resumedRuns ?? [],
          },
        },
      })),
    /** Reads run events until at least `count` arrived. */
    async readEvents(count: number): Promise<void> {
      while (events.length < count) {
        const got = await (pending ?? messages.next());
        pending = undefined;
        assert.ok(!got.done, "the node closed the link");
        for (const w of wireEventsOf(got.value.msg)) events.push(fromWireRunEvent(w)!);
      }
    },
    /** Reads run events until the node sent none for `quietMs` (or the run ended). */
    async readUntilQuiet(quietMs = 200): Promise<void> {
      while (!events.some(isTerminal)) {
        pending ??= messages.next();
        let timer: ReturnType<typeof setTimeout> | undefined;
        const quiet = new Promise<"quiet">((resolve) => {
          timer = setTimeout(resolve, quietMs, "quiet");
        });
        const got = await Promise.race([pending, quiet]).finally(() => clearTimeout(timer));
        if (got === "quiet") return;
        pending = undefined;
        assert.ok(!got.done, "the node closed the link");
        for (const w of wireEventsOf(got.value.msg)) events.push(fromWireRunEvent(w)!);
      }
    },
    ack: (runId: string, seq: number) =>
      conn.send(create(NodeEnvelopeSchema, {
        msg: { case: "runAcks", value: { acks: [{ runId, seq: BigInt(seq) }] } },
      })),
  };
}

Deno.test("the node honours the Edge's window and acks, and resumes a held run on the next link", async () => {
  using listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { store, core, client } = startNode(`127.0.0.1:${listener.addr.port}`, {
    backoffInitialMs: 10,
    backoffMaxMs: 20,
    resumeGraceMs: 60_000,
  });
  const WINDOW = 1_500;
  try {
    const first = await flowLink(listener);
    assert.deepEqual(first.register.heldRuns, []);
    await first.answer({ runWindowBytes: WINDOW });
    await first.conn.send(create(NodeEnvelopeSchema, {
      msg: {
        case: "runRequest",
        value: toRunRequest("r1", runInput({ adapter: "mock", target: "echo", prompt: "go" })),
      },
    }));
    await first.readUntilQuiet();
    const bytes = first.events.reduce((n, e) => n + estimatedEventBytes(e), 0);
    assert.ok(bytes >= WINDOW && bytes - estimatedEventBytes(first.events.at(-1)!) < WINDOW);
    // Credit for all but the last two: the node sends about that much more, then waits again.
    const credited = first.events.length;
    await first.ack("r1", credited - 2);
    await first.readUntilQuiet();
    assert.ok(first.events.length > credited, "an ack lets the run go on");
    assert.equal(first.events.some(isTerminal), false);

    // The Edge loses the link; the node keeps the run and offers it on the next one.
    const lastSent = first.events.at(-1)!.seq;
    first.conn.close("test drops the link");
    const second = await flowLink(listener);
    assert.deepEqual(
      second.register.heldRuns.map((h) => [h.runId, Number(h.lastSeq)]),
      [["r1", lastSent]],
    );
    assert.equal(core.inFlight, 1, "the run went on through the loss");
    // The Edge received all but the last event the first link carried.
    await second.answer({
      runWindowBytes: 1 << 20,
      resumedRuns: [{ runId: "r1", receivedSeq: BigInt(lastSent - 1) }],
    });
    await second.readUntilQuiet(5_000);
    const all = [...first.events.slice(0, lastSent - 1), ...second.events];
    assert.deepEqual(all.map((e) => e.seq), all.map((_, i) => i + 1), "every event once");
    assert.equal(all.at(-1)!.type, "completed");
    assert.equal(
      all.map((e) => e.type === "output" ? e.text : "").join(""),
      mockAnswer("go", 200),
    );
    second.conn.close("test done");
  } finally {
    await client.stop();
    store.close();
  }
});

/** Accepts every connection to `listener` in the background; `accept()` takes the next. */
function acceptQueue(listener: Deno.TcpListener) {
  const conns: Deno.Conn[] = [];
  let wake: (() => void) | undefined;
  let accepted = 0;
  void (async () => {
    for await (const conn of listener) {
      accepted++;
      conns.push(conn);
      wake?.();
    }
  })().catch(() => {});
  return {
    get accepted() {
      return accepted;
    },
    async accept(): Promise<Deno.Conn> {
      while (conns.length === 0) await new Promise<void>((resolve) => (wake = resolve));
      return conns.shift()!;
    },
    /** Closes the connections nobody took. */
    close() {
      for (const conn of conns.splice(0)) conn.close();
    },
  };
}

Deno.test("a node holding runs redials their Edge after a failed dial, and goes to the standby once refused", async () => {
  const active = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  using standbyListener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const standby = acceptQueue(standbyListener);
  const { store, core, client } = startNode([
    `127.0.0.1:${active.addr.port}`,
    `127.0.0.1:${standbyListener.addr.port}`,
  ], { backoffInitialMs: 10, backoffMaxMs: 20, resumeGraceMs: 60_000 });
  let activeOpen = true;
  try {
    const first = await flowLink(active);
    await first.answer({ runWindowBytes: 1_500 });
    await first.conn.send(create(NodeEnvelopeSchema, {
      msg: {
        case: "runRequest",
        value: toRunRequest("r1", runInput({ adapter: "mock", target: "echo", prompt: "go" })),
      },
    }));
    // The run fills its window and waits: it is in flight when the link drops.
    await first.readEvents(2);
    first.conn.close("test drops the link");

    // The active Edge's host is up but its Edge is slow to come back: two dials end before a
    // registration answer. The node tries it again each time, not the standby.
    for (let attempt = 1; attempt <= 3; attempt++) {
      const again = await flowLink(active);
      assert.deepEqual(again.register.heldRuns.map((h) => h.runId), ["r1"], `dial ${attempt}`);
      if (attempt < 3) {
        again.conn.close("not ready yet");
        continue;
      }
      assert.equal(standby.accepted, 0, "the standby knows nothing of r1: not dialled");
      // Now the active Edge is gone: its port refuses, and the node goes to the standby at once.
      active.close();
      activeOpen = false;
      again.conn.close("edge process gone");
    }
    const other = await flowLink(standby);
    assert.deepEqual(other.register.heldRuns.map((h) => h.runId), ["r1"]);
    await other.answer({ runWindowBytes: 1_500 });
    const row = await until("r1 to end", () => {
      const r = core.history(5).find((h) => h.runId === "r1");
      return r && r.status !== "running" ? r : undefined;
    });
    assert.deepEqual(
      [row.status, row.error?.message],
      ["cancelled", "the edge no longer waits for run r1"],
    );
    other.conn.close("test done");
  } finally {
    await client.stop();
    if (activeOpen) active.close();
    standby.close();
    store.close();
  }
});
