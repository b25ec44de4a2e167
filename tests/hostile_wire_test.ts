/**
 * Anonymous peers on the node wire (TLS, as shipped): sockets announcing huge frames and crowds
 * of sockets that never log in are cut off with bounded memory, while a registered node keeps
 * running and a new one can still register.
 * @module
 */
import assert from "node:assert/strict";
import { encodeFrame } from "../shared/wire/frame.ts";
import { create } from "@bufbuild/protobuf";
import { NodeEnvelopeSchema } from "../proto/gen/iop/v1/node_pb.ts";
import { runInput } from "../shared/run.ts";
import { dialLink } from "../shared/wire/link.ts";
import type { DialTls } from "../shared/wire/tls.ts";
import { mockNode, startNode, startStack, type TestEdge } from "./stack.ts";
import { dialTlsOf, listenTlsOf } from "./tls_fixture.ts";
import { listenFrames } from "../shared/wire/listener.ts";
import { createLogger } from "../shared/log.ts";

async function trustOnly(): Promise<DialTls> {
  const files = await dialTlsOf("node");
  return { ca: await Deno.readTextFile(files.caFile), serverName: "" };
}

/** Resolves once the server has closed the link (a read ends or fails). */
async function closedByServer(link: Awaited<ReturnType<typeof dialLink>>): Promise<void> {
  const buffer = new Uint8Array(1024);
  while (true) {
    const n = await link.read(buffer).catch(() => null);
    if (n === null) return;
  }
}

async function runCompletes(edge: TestEdge, node: string): Promise<void> {
  const run = await edge.service.submitRun({
    ...runInput({ adapter: "mock", target: "demo", prompt: "still here" }),
    node,
  });
  assert.equal((await run.done).type, "completed");
}

function rejected(edge: TestEdge, reason: string): Promise<number> {
  return edge.registry.getSingleMetricAsString("iop_edge_wire_rejected_connections_total").then(
    (text) => Number(text.match(new RegExp(`reason="${reason}"} (\\d+)`))?.[1] ?? 0),
  );
}

Deno.test("300 anonymous sockets announcing 4 MiB frames are cut off at the prefix; a node keeps running", async () => {
  await using edge = await startStack({
    config: { nodes: [mockNode("n1"), mockNode("late")] },
    nodes: ["n1"],
  });
  const tls = await trustOnly();
  const rssBefore = Deno.memoryUsage().rss;
  // A 4 MiB length prefix and the first bytes of a body that never comes whole.
  const prefix = new Uint8Array([0x80, 0x80, 0x80, 0x02]);
  const attackers = [];
  for (let i = 0; i < 300; i++) {
    const link = await dialLink({ address: `127.0.0.1:${edge.wire.port}`, tls });
    await link.write(new Uint8Array([...prefix, ...new Uint8Array(1000)]));
    attackers.push(link);
    if (i === 150) await runCompletes(edge, "n1");
  }
  await Promise.all(attackers.map(closedByServer));
  const grownMiB = (Deno.memoryUsage().rss - rssBefore) / 2 ** 20;
  console.log(`RSS grew ${grownMiB.toFixed(1)} MiB over 300 oversize announcements`);
  assert.ok(grownMiB < 200, `RSS grew ${grownMiB.toFixed(1)} MiB`);
  assert.equal(await rejected(edge, "oversize"), 300);
  await runCompletes(edge, "n1");
  const late = await startNode(edge, { id: "late" });
  assert.deepEqual(late.adapters, ["mock"]);
});

Deno.test("beyond max_pending_connections, sockets that never log in are closed on arrival, not counted as failed handshakes; nodes still register", async () => {
  await using edge = await startStack({
    config: {
      wire: { max_pending_connections: 20, register_timeout_ms: 1_500 },
      nodes: [mockNode("n1"), mockNode("late")],
    },
    nodes: ["n1"],
  });
  const idle = [];
  for (let i = 0; i < 60; i++) {
    idle.push(await Deno.connect({ hostname: "127.0.0.1", port: edge.wire.port }));
  }
  // The 40 beyond the cap are closed at once; the 20 within it at their login deadline.
  const crowdedAt = performance.now();
  while (await rejected(edge, "crowded") < 40) {
    assert.ok(performance.now() - crowdedAt < 5_000, "crowded sockets were not closed");
    await new Promise((r) => setTimeout(r, 20));
  }
  await runCompletes(edge, "n1");
  // Once the anonymous ones timed out, a real node registers as usual.
  const late = await startNode(edge, { id: "late", readyMs: 10_000 });
  assert.deepEqual(late.adapters, ["mock"]);
  // Only the 20 let in and never finishing a handshake failed one; the Edge turned the rest away.
  assert.equal(await rejected(edge, "handshake"), 20);
  for (const conn of idle) {
    try {
      conn.close();
    } catch {
      // Closed by the server.
    }
  }
});

Deno.test("a register request larger than the login limit is refused before registration", async () => {
  await using edge = await startStack({ config: { nodes: [mockNode("n1")] }, nodes: [] });
  const link = await dialLink({ address: `127.0.0.1:${edge.wire.port}`, tls: await trustOnly() });
  await link.write(encodeFrame(
    NodeEnvelopeSchema,
    create(NodeEnvelopeSchema, {
      msg: {
        case: "registerRequest",
        value: { nodeId: "n1", token: "x".repeat(20_000), protocolVersion: 2 },
      },
    }),
  ));
  await closedByServer(link);
  assert.equal(await rejected(edge, "oversize"), 1);
  assert.equal(edge.service.status().nodes.find((n) => n.id === "n1")?.connected, false);
});

Deno.test("a burst of failed TLS handshakes is counted in full but logged once per 10 s", async () => {
  const lines: string[] = [];
  let failed = 0;
  await using listener = await listenFrames({
    hostname: "127.0.0.1",
    port: 0,
    tls: await listenTlsOf("edge"),
    logger: createLogger("test", { level: "warn", writer: (line) => lines.push(line) }),
    onHandshakeFailed: () => failed++,
    handle: () => Promise.resolve(),
  });
  const notTls = new TextEncoder().encode("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  for (let i = 0; i < 12; i++) {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: listener.port });
    await conn.write(notTls);
    await conn.read(new Uint8Array(64)).catch(() => null); // closed by the server
    conn.close();
  }
  while (failed < 12) await new Promise((r) => setTimeout(r, 10));
  const warned = lines.filter((l) => l.includes("peer failed the TLS handshake"));
  assert.equal(warned.length, 1, lines.join("\n"));
});
