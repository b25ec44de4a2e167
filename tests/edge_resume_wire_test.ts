/**
 * The Edge's side of flow control and resume on the real node wire: a node speaking the wire
 * by hand (so each frame is the test's to choose) registers over TCP, drops its link mid-run
 * and registers again listing the runs it held. The Edge answers the window and the runs it
 * resumes, delivers each event once, batches its acks, and gives up on a node that does not
 * come back within `runs.resume_grace_ms`. A node that closes its link while it talks has
 * exited (its runs fail at once); one that closes it after a silence gave up on the link (its
 * runs wait for it).
 * @module
 */
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import {
  type NodeEnvelope,
  NodeEnvelopeSchema,
  type RegisterResponse,
  type RunAck,
} from "../proto/gen/iop/v1/node_pb.ts";
import { type RunEvent, runInput } from "../shared/run.ts";
import { toWireRunEvent } from "../shared/run_codec.ts";
import { FrameConnection } from "../shared/wire/connection.ts";
import { dialLink } from "../shared/wire/link.ts";
import type { RunHandle } from "../services/edge/ports.ts";
import { mockNode, type RawConfig, startEdge, type TestEdge } from "./stack.ts";
import { until } from "./util.ts";

const NODE = "n1";
/** The Edge's heartbeat interval: a silent link is dead after three of them. */
const HEARTBEAT_MS = 200;

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;
/** An event as a test node writes it: the wire adds its run id and time. */
type NodeEvent = DistributiveOmit<RunEvent, "runId" | "timestampMs">;

/** A node that speaks the wire by hand and records what the Edge sends it. */
class WireNode {
  readonly conn: FrameConnection<typeof NodeEnvelopeSchema, typeof NodeEnvelopeSchema>;
  readonly register: RegisterResponse;
  readonly runs: string[] = [];
  readonly ackFrames: RunAck[][] = [];
  readonly cancels: string[] = [];
  readonly reading: Promise<void>;
  readonly #heartbeat: ReturnType<typeof setInterval>;

  private constructor(
    conn: WireNode["conn"],
    register: RegisterResponse,
    messages: AsyncGenerator<NodeEnvelope>,
  ) {
    this.conn = conn;
    this.register = register;
    this.#heartbeat = setInterval(() => {
      conn.send(create(NodeEnvelopeSchema, { msg: { case: "heartbeat", value: {} } }))
        .catch(() => {});
    }, HEARTBEAT_MS / 3);
    this.reading = (async () => {
      for await (const envelope of messages) {
        const msg = envelope.msg;
        if (msg.case === "runRequest") this.runs.push(msg.value.runId);
        if (msg.case === "runAcks") this.ackFrames.push(msg.value.acks);
        if (msg.case === "cancelRequest") this.cancels.push(msg.value.runId);
      }
    })().catch(() => {});
  }

  /** Registers as node n1 holding `held` runs ([run id, last seq]) and applies its config. */
  static async connect(edge: TestEdge, held: [string, number][] = []): Promise<WireNode> {
    const link = await dialLink({ address: `127.0.0.1:${edge.wire.port}` });
    const conn = new FrameConnection(link, {
      inSchema: NodeEnvelopeSchema,
      outSchema: NodeEnvelopeSchema,
    });
    await conn.send(create(NodeEnvelopeSchema, {
      msg: {
        case: "registerRequest",
        value: {
          nodeId: NODE,
          token: `${NODE}-token`,
          protocolVersion: 2,
          heldRuns: held.map(([runId, lastSeq]) => ({ runId, lastSeq: BigInt(lastSeq) })),
        },
      },
    }));
    const messages = conn.messages();
    const first = (await messages.next()).value;
    assert.equal(first?.msg.case, "registerResponse");
    const register = first.msg.value as RegisterResponse;
    assert.ok(register.accepted, register.reason);
    await conn.send(create(NodeEnvelopeSchema, {
      msg: {
        case: "nodeEvent",
        value: {
          event: {
            case: "configApplied",
            value: { adapters: ["mock"], version: register.configVersion },
          },
        },
      },
    }));
    return new WireNode(conn, register, messages);
  }

  /** Sends events of `runId` in one batch frame, as a node's outbox does. */
  async send(runId: string, events: NodeEvent[]): Promise<void> {
    await this.conn.send(create(NodeEnvelopeSchema, {
      msg: {
        case: "runEvents",
        value: {
          events: events.map((e) =>
            toWireRunEvent({ ...e, runId, timestampMs: Date.now() } as RunEvent)
          ),
        },
      },
    }));
  }

  /**
   * Goes silent the way a network cut looks to the Edge: no more frames and no close, until
   * the Edge gives up on the link by its heartbeats and closes it.
   */
  async drop(): Promise<void> {
    this.quiet();
    await this.reading;
    this.conn.close("cut");
  }

  /** Sends nothing more, heartbeats included, and keeps the link open. */
  quiet(): void {
    clearInterval(this.#heartbeat);
  }

  /** Ends the link from the node's side, as a node process that exits does. */
  async close(): Promise<void> {
    clearInterval(this.#heartbeat);
    this.conn.close("node exited");
    await this.reading;
  }
}

function edgeConfig(runs: Record<string, number>, heartbeatMs = HEARTBEAT_MS): RawConfig {
  return {
    edge: { id: "edge-resume" },
    // Short heartbeats, so a node that goes silent is given up on soon.
    wire: { heartbeat_interval_ms: heartbeatMs },
    runs,
    nodes: [mockNode(NODE)],
  };
}

function dispatch(edge: TestEdge): Promise<RunHandle> {
  return edge.service.submitRun({
    ...runInput({ adapter: "mock", target: "demo", prompt: "hi" }),
    node: NODE,
  });
}

/** Everything the run's consumer receives, collected as it arrives. */
function collect(handle: RunHandle): { seen: string[]; ended: Promise<void> } {
  const seen: string[] = [];
  const ended = (async () => {
    for await (const e of handle.events()) seen.push(e.type === "output" ? e.text : e.type);
  })();
  return { seen, ended };
}

const started = { type: "started", nodeId: NODE, adapter: "mock", target: "demo" } as const;

Deno.test("a run whose node link drops resumes on the node's new link; each event arrives once", async () => {
  await using edge = await startEdge({ tls: "off", config: edgeConfig({ window_bytes: 8192 }) });
  const first = await WireNode.connect(edge);
  assert.equal(first.register.runWindowBytes, 8192, "the node is told the window");
  assert.deepEqual(first.register.resumedRuns, []);
  const handle = await dispatch(edge);
  const runId = handle.runId;
  const { seen, ended } = collect(handle);
  await first.send(runId, [
    { ...started, seq: 1 },
    { type: "output", text: "a", seq: 2 },
    { type: "output", text: "b", seq: 3 },
  ]);
  await until("the edge to take three events", () => edge.service.getRun(runId)?.lastSeq === 3);
  await first.drop();
  await until("the run to wait for its node", () => {
    const node = edge.service.status().nodes[0]!;
    return !node.connected && node.detachedRuns === 1;
  });

  // Back, holding the run and a run the Edge never had: only the first is resumed.
  const second = await WireNode.connect(edge, [[runId, 4], ["run_unknown", 2]]);
  assert.deepEqual(
    second.register.resumedRuns.map((r) => [r.runId, Number(r.receivedSeq)]),
    [[runId, 3]],
  );
  const node = edge.service.status().nodes[0]!;
  assert.deepEqual([node.connected, node.inFlight, node.detachedRuns], [true, 1, undefined]);
  // The node sends again from what it retained (seq 3 included), then goes on.
  await second.send(runId, [
    { type: "output", text: "b", seq: 3 },
    { type: "output", text: "c", seq: 4 },
    { type: "completed", finishReason: "stop", exitCode: 0, seq: 5 },
  ]);
  await ended;
  assert.deepEqual(seen, ["started", "a", "b", "c", "completed"]);
  // Right after its registration answer the new link is acked what the client took before the
  // drop (seq 3: acks on the old link may never have arrived, and the node counts what it sent
  // against the window until acked), then the terminal event; seq 4 is far below a quarter
  // window.
  const acks = await until("the terminal ack", () => {
    const all = second.ackFrames.flat().map((a) => Number(a.seq));
    return all.includes(5) && all;
  });
  assert.deepEqual(acks, [3, 5]);
  await second.close();
});

Deno.test("acks of several runs given in one turn leave in one RunAcks frame", async () => {
  await using edge = await startEdge({ tls: "off", config: edgeConfig({}) });
  const node = await WireNode.connect(edge);
  const runs = [await dispatch(edge), await dispatch(edge)];
  const done = Promise.all(runs.map((r) => r.done));
  // One frame carrying both runs' terminal events: both acks leave in one frame.
  await node.conn.send(create(NodeEnvelopeSchema, {
    msg: {
      case: "runEvents",
      value: {
        events: runs.map((r) =>
          toWireRunEvent({
            type: "completed",
            finishReason: "stop",
            exitCode: 0,
            runId: r.runId,
            seq: 1,
            timestampMs: 0,
          })
        ),
      },
    },
  }));
  await done;
  await until("the acks", () => node.ackFrames.length > 0);
  assert.deepEqual(
    node.ackFrames.map((frame) => frame.map((a) => [a.runId, Number(a.seq)])),
    [[[runs[0]!.runId, 1], [runs[1]!.runId, 1]]],
  );
  await node.close();
});

Deno.test("a node that does not come back within runs.resume_grace_ms fails its run NODE_LOST", async () => {
  await using edge = await startEdge({ tls: "off", config: edgeConfig({ resume_grace_ms: 200 }) });
  const first = await WireNode.connect(edge);
  const handle = await dispatch(edge);
  await first.send(handle.runId, [{ ...started, seq: 1 }, { type: "output", text: "a", seq: 2 }]);
  await until("the output", () => edge.service.getRun(handle.runId)?.lastSeq === 2);
  await first.drop();
  const terminal = await handle.done;
  assert.equal(terminal.type === "failed" && terminal.code, "NODE_LOST");
  assert.match(
    terminal.type === "failed" ? terminal.message : "",
    /^Node 'n1' did not come back within 200 ms \(runs\.resume_grace_ms\): /,
  );
  // Back too late: the Edge no longer waits for the run, so it resumes nothing.
  const late = await WireNode.connect(edge, [[handle.runId, 3]]);
  assert.deepEqual(late.register.resumedRuns, []);
  await late.close();
});

Deno.test("a node whose own end closes its link (its process ended) fails its runs at once", async () => {
  await using edge = await startEdge({ tls: "off", config: edgeConfig({}) });
  const node = await WireNode.connect(edge);
  const handle = await dispatch(edge);
  await node.send(handle.runId, [{ ...started, seq: 1 }, { type: "output", text: "a", seq: 2 }]);
  await until("the output", () => edge.service.getRun(handle.runId)?.lastSeq === 2);
  await node.close();
  // Failed without waiting runs.resume_grace_ms (30 s by default): the test would time out.
  const terminal = await handle.done;
  assert.equal(terminal.type === "failed" && terminal.code, "NODE_LOST");
  assert.match(
    terminal.type === "failed" ? terminal.message : "",
    /^Node 'n1' was lost while running: peer closed$/,
  );
});

Deno.test("a node that closes its link after a silence gave up on it: its run waits and resumes", async () => {
  // Closed between two and three intervals of silence: before the Edge's own heartbeat check
  // (three missed) closes the link, so the close the Edge sees is the node's.
  const heartbeatMs = 1000;
  await using edge = await startEdge({ tls: "off", config: edgeConfig({}, heartbeatMs) });
  const disconnects: string[] = [];
  edge.service.subscribe((e) => {
    if (e.type === "node_disconnected") disconnects.push(e.reason);
  });
  const first = await WireNode.connect(edge);
  const handle = await dispatch(edge);
  const { seen, ended } = collect(handle);
  await first.send(handle.runId, [{ ...started, seq: 1 }, { type: "output", text: "a", seq: 2 }]);
  await until("the output", () => edge.service.getRun(handle.runId)?.lastSeq === 2);
  first.quiet();
  await until(
    "the node to be silent for two heartbeat intervals",
    () => Date.now() - edge.service.status().nodes[0]!.lastSeenMs > 2 * heartbeatMs + 50,
  );
  await first.close();
  await until("the run to wait for its node", () => {
    const node = edge.service.status().nodes[0]!;
    return !node.connected && node.detachedRuns === 1;
  });
  assert.deepEqual(disconnects, ["peer closed"], "the close was the node's, not the heartbeats'");

  const second = await WireNode.connect(edge, [[handle.runId, 3]]);
  assert.deepEqual(
    second.register.resumedRuns.map((r) => [r.runId, Number(r.receivedSeq)]),
    [[handle.runId, 2]],
  );
  await second.send(handle.runId, [
    { type: "output", text: "b", seq: 3 },
    { type: "completed", finishReason: "stop", exitCode: 0, seq: 4 },
  ]);
  await ended;
  assert.deepEqual(seen, ["started", "a", "b", "completed"]);
  await second.close();
});

Deno.test("runs waiting for their node fail at once when the edge stops serving nodes", async () => {
  const edge = await startEdge({ tls: "off", config: edgeConfig({}) });
  try {
    const first = await WireNode.connect(edge);
    const handle = await dispatch(edge);
    await first.send(handle.runId, [{ ...started, seq: 1 }]);
    await until("the start", () => edge.service.getRun(handle.runId)?.lastSeq === 1);
    await first.drop();
    await until("the run to wait", () => edge.service.status().nodes[0]!.detachedRuns === 1);
    await edge.wire.close();
    const terminal = await handle.done;
    assert.match(
      terminal.type === "failed" ? terminal.message : "",
      /^Node 'n1' was lost while running: .* \(the edge stopped serving nodes\)$/,
    );
  } finally {
    await edge.close();
  }
});
