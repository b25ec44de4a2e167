import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { Registry } from "prom-client";
import { NodeEnvelopeSchema } from "../proto/gen/iop/v1/node_pb.ts";
import { createLogger } from "../shared/log.ts";
import { runInput } from "../shared/run.ts";
import { encodeFrame } from "../shared/wire/frame.ts";
import { createWireMetrics } from "../shared/wire/wire_metrics.ts";
import { mockAdapterFactory } from "../services/node/adapters/mock.ts";
import { buildAdapterRegistry } from "../services/node/adapters/registry.ts";
import { NodeCore } from "../services/node/node.ts";
import { DEFAULT_NODE_POLICY } from "../services/node/policy.ts";
import { openRunStore } from "../services/node/store/sqlite_store.ts";
import { startEdgeClient } from "../services/node/transport/edge_client.ts";
import { parseEdgeConfig } from "../services/edge/config.ts";
import { EdgeService } from "../services/edge/service.ts";
import { startNodeServer } from "../services/edge/transport/node_server.ts";

const quiet = createLogger("test", { writer: () => {} });

/** A deterministic PRNG so that a failing input can be reproduced from its index. */
function rng(seed: number) {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

function garbage(i: number): Uint8Array {
  const rand = rng(i);
  const bytes = (n: number) => Uint8Array.from({ length: n }, () => Math.floor(rand() * 256));
  switch (i % 6) {
    case 0: // random bytes
      return bytes(1 + Math.floor(rand() * 64));
    case 1: { // a plausible length, then random body
      const body = bytes(Math.floor(rand() * 40));
      return Uint8Array.of(body.length, ...body);
    }
    case 2: // a huge announced length
      return Uint8Array.of(0xff, 0xff, 0xff, 0xff, 0x0f, ...bytes(8));
    case 3: { // a valid frame of the wrong first message
      return encodeFrame(
        NodeEnvelopeSchema,
        create(NodeEnvelopeSchema, {
          msg: { case: "runRequest", value: { runId: "x", adapter: "mock" } },
        }),
      );
    }
    case 4: { // a valid registration with a wrong token
      return encodeFrame(
        NodeEnvelopeSchema,
        create(NodeEnvelopeSchema, {
          msg: {
            case: "registerRequest",
            value: { nodeId: "n1", token: `guess-${i}`, protocolVersion: 1 },
          },
        }),
      );
    }
    default: { // a truncated valid frame
      const frame = encodeFrame(
        NodeEnvelopeSchema,
        create(NodeEnvelopeSchema, {
          msg: { case: "heartbeat", value: { sentAtMs: BigInt(i) } },
        }),
      );
      return frame.slice(0, Math.max(1, frame.length - 1 - (i % 3)));
    }
  }
}

Deno.test("node wire server survives 10,000 garbage inputs and then serves a real node", async () => {
  const config = parseEdgeConfig({
    wire: { heartbeat_interval_ms: 200, register_timeout_ms: 300 },
    nodes: [{
      id: "n1",
      token: "secret-token",
      adapters: [{ name: "mock", kind: "mock", tokens: 3, token_delay_ms: 0 }],
    }],
  }, "fuzz.yaml");
  const service = new EdgeService({ config, logger: quiet, version: "test" });
  const registry = new Registry();
  // Plain TCP: the frames themselves are under test here.
  const server = await startNodeServer({
    hostname: "127.0.0.1",
    port: 0,
    service,
    logger: quiet,
    wireMetrics: createWireMetrics(registry, "edge", "node"),
  });
  const dir = await Deno.makeTempDir();
  try {
    const inputs = 10_000;
    let next = 0;
    const worker = async () => {
      while (next < inputs) {
        const i = next++;
        const conn = await Deno.connect({ hostname: "127.0.0.1", port: server.port });
        try {
          await conn.write(garbage(i)).catch(() => 0);
          if (i % 10 === 0) {
            // Wait for the server's verdict on some inputs: it must close the connection.
            const buf = new Uint8Array(256);
            while ((await conn.read(buf).catch(() => null)) !== null) { /* drain until closed */ }
          }
        } finally {
          conn.close();
        }
      }
    };
    await Promise.all(Array.from({ length: 32 }, worker));

    const rejected = await registry.getSingleMetric("iop_edge_wire_rejected_connections_total")!
      .get();
    const total = rejected.values.reduce((n, v) => n + v.value, 0);
    assert.ok(total > 1000, `expected many rejected connections to be counted, got ${total}`);
    assert.equal(service.status().nodes[0]!.connected, false);

    // The server still accepts and serves a well-behaved node.
    const store = openRunStore(`${dir}/history.db`);
    const core = new NodeCore({
      nodeId: "n1",
      store,
      logger: quiet,
      buildAdapters: (configs) => buildAdapterRegistry(configs, { mock: mockAdapterFactory }),
      policy: DEFAULT_NODE_POLICY,
    });
    const client = startEdgeClient({
      edgeAddress: `127.0.0.1:${server.port}`,
      tls: undefined,
      nodeId: "n1",
      token: "secret-token",
      version: "test",
      core,
      logger: quiet,
    });
    try {
      while (!service.status().nodes[0]!.connected) await new Promise((r) => setTimeout(r, 10));
      const run = await service.submitRun(
        runInput({ adapter: "mock", target: "t", prompt: "still serving" }),
      );
      const terminal = await run.done;
      assert.equal(terminal.type, "completed");
    } finally {
      await client.stop();
      store.close();
    }
  } finally {
    await server.close();
    await Deno.remove(dir, { recursive: true });
  }
});
