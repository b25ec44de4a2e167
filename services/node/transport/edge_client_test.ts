/**
 * The Node's link against a fake Edge on a real socket: what frames the run events travel in.
 */
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { type NodeEnvelope, NodeEnvelopeSchema } from "../../../proto/gen/iop/v1/node_pb.ts";
import { createLogger } from "../../../shared/log.ts";
import { FrameConnection } from "../../../shared/wire/connection.ts";
import { plainLink } from "../../../shared/wire/link.ts";
import { mockAdapterFactory } from "../adapters/mock.ts";
import { buildAdapterRegistry } from "../adapters/registry.ts";
import { NodeCore } from "../node.ts";
import { DEFAULT_NODE_POLICY } from "../policy.ts";
import { openRunStore } from "../store/sqlite_store.ts";
import { startEdgeClient } from "./edge_client.ts";

/** Registers one node with a fake Edge, runs one mock run, and returns the frames it sent. */
async function framesOfOneRun(acceptsEventBatches: boolean): Promise<NodeEnvelope["msg"][]> {
  using listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const logger = createLogger("test", { level: "error" });
  const store = openRunStore(":memory:");
  const core = new NodeCore({
    nodeId: "n1",
    store,
    logger,
    buildAdapters: (c) => buildAdapterRegistry(c, { mock: mockAdapterFactory }),
    policy: DEFAULT_NODE_POLICY,
  });
  const client = startEdgeClient({
    edgeAddress: `127.0.0.1:${listener.addr.port}`,
    tls: undefined,
    nodeId: "n1",
    token: "t",
    version: "test",
    core,
    logger,
  });
  const conn = new FrameConnection(plainLink(await listener.accept()), {
    inSchema: NodeEnvelopeSchema,
    outSchema: NodeEnvelopeSchema,
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
              name: "mock",
              kind: "mock",
              enabled: true,
              settingsJson: JSON.stringify({ tokens: 5, token_delay_ms: 0 }),
            }],
          },
        },
      },
    }));
    assert.equal((await messages.next()).value?.msg.case, "nodeEvent");
    await conn.send(create(NodeEnvelopeSchema, {
      msg: { case: "runRequest", value: { runId: "r1", adapter: "mock", target: "echo" } },
    }));
    for await (const envelope of messages) {
      frames.push(envelope.msg);
      const events = envelope.msg.case === "runEvents"
        ? envelope.msg.value.events
        : envelope.msg.case === "runEvent"
        ? [envelope.msg.value]
        : [];
      if (events.some((e) => e.event.case === "completed")) break;
    }
  } finally {
    await client.stop();
    conn.close();
    store.close();
  }
  return frames;
}

function eventsOf(frames: NodeEnvelope["msg"][]): string[] {
  return frames.flatMap((m) =>
    m.case === "runEvents"
      ? m.value.events.map((e) => e.event.case ?? "")
      : m.case === "runEvent"
      ? [m.value.event.case ?? ""]
      : []
  );
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
