/**
 * The two wires under attack, over real sockets with real certificates: impostor Edges and
 * Control Planes get nothing, plaintext and certificate-less peers are dropped while the
 * listener keeps serving, and with mutual TLS a certificate binds a peer to its own id.
 * @module
 */
import assert from "node:assert/strict";
import tls from "node:tls";
import { create } from "@bufbuild/protobuf";
import { EdgeEnvelopeSchema } from "../proto/gen/iop/v1/control_pb.ts";
import { NodeEnvelopeSchema } from "../proto/gen/iop/v1/node_pb.ts";
import { DomainAgents } from "../services/edge/agents/domain_agents.ts";
import { startCpLink } from "../services/edge/cp_link/cp_link.ts";
import { parseEdgeConfig } from "../services/edge/config.ts";
import { EdgeService } from "../services/edge/service.ts";
import { mockAdapterFactory } from "../services/node/adapters/mock.ts";
import { buildAdapterRegistry } from "../services/node/adapters/registry.ts";
import { NodeCore } from "../services/node/node.ts";
import { DEFAULT_NODE_POLICY } from "../services/node/policy.ts";
import { openRunStore } from "../services/node/store/sqlite_store.ts";
import { startEdgeClient } from "../services/node/transport/edge_client.ts";
import { startControlPlane } from "../services/cp/control_plane.ts";
import { createLogger } from "../shared/log.ts";
import { runInput } from "../shared/run.ts";
import { FrameConnection } from "../shared/wire/connection.ts";
import { encodeFrame } from "../shared/wire/frame.ts";
import { dialLink } from "../shared/wire/link.ts";
import type { DialTls } from "../shared/wire/tls.ts";
import { testCpConfig, testEdgeCredential } from "./cp_harness.ts";
import { mockNode, quiet, startNode, startStack } from "./stack.ts";
import { dialTlsOf, foreignCertificates, testCertificates } from "./tls_fixture.ts";
import { TextLog, until } from "./util.ts";

/** A TLS server that records every byte a client manages to send it. */
async function recordingServer(cert: string, key: string) {
  const received: Uint8Array[] = [];
  let connections = 0;
  let handshakeFailures = 0;
  const server = tls.createServer({ cert, key }, (socket) => {
    socket.on("data", (chunk: Uint8Array) => received.push(chunk));
    socket.on("error", () => {});
  });
  server.on("connection", () => connections++);
  server.on("tlsClientError", () => handshakeFailures++);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  return {
    port,
    received,
    get connections() {
      return connections;
    },
    get handshakeFailures() {
      return handshakeFailures;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** A node (mock adapter) dialing `port` with the fleet CA; its log lines go to `log`. */
function dialingNode(port: number, log: TextLog) {
  const logger = createLogger("test.node", { level: "warn", writer: log.append });
  const store = openRunStore(":memory:");
  const core = new NodeCore({
    nodeId: "n1",
    store,
    logger,
    policy: DEFAULT_NODE_POLICY,
    buildAdapters: (c) => buildAdapterRegistry(c, { mock: mockAdapterFactory }),
  });
  return {
    core,
    start: async () =>
      startEdgeClient({
        edgeAddress: `127.0.0.1:${port}`,
        tls: await dialTlsOf("node"),
        nodeId: "n1",
        token: "node-secret-token",
        version: "test",
        core,
        logger,
        backoffInitialMs: 20,
        backoffMaxMs: 50,
      }),
    close: async () => {
      await core.close();
      store.close();
    },
  };
}

for (
  const [what, certificate] of [
    [
      "a certificate outside the fleet CA",
      async (): Promise<[string, string]> => {
        const foreign = await foreignCertificates({ role: "edge", id: "edge-test" });
        return [foreign.certFor("edge", "edge-test"), foreign.keyFor("edge", "edge-test")];
      },
    ],
    [
      "a fleet certificate issued to another service (a node's)",
      async (): Promise<[string, string]> => {
        const fleet = await testCertificates({ role: "node", id: "stolen", hosts: ["other"] });
        return [fleet.certFor("node", "stolen"), fleet.keyFor("node", "stolen")];
      },
    ],
  ] as const
) {
  Deno.test(`a fake Edge with ${what} receives no token and the node runs nothing`, async () => {
    const [certFile, keyFile] = await certificate();
    const fake = await recordingServer(
      await Deno.readTextFile(certFile),
      await Deno.readTextFile(keyFile),
    );
    const log = new TextLog();
    const node = dialingNode(fake.port, log);
    const client = await node.start();
    try {
      await until("three refused dials", () => fake.connections >= 3);
      assert.equal(client.registered, false);
      assert.equal(fake.received.length, 0, "not one byte reached the impostor");
      assert.equal(node.core.inFlight, 0);
      assert.match(
        log.text,
        /Cannot verify 127\.0\.0\.1:\d+ as '127\.0\.0\.1' against the fleet CA/,
      );
      assert.doesNotMatch(log.text, /node-secret-token/);
    } finally {
      await client.stop();
      await node.close();
      await fake.close();
    }
  });
}

Deno.test("a plaintext client on the TLS node wire is dropped and the listener keeps serving", async () => {
  await using edge = await startStack({
    config: { nodes: [mockNode("n1"), mockNode("n2")] },
    nodes: ["n1"],
  });
  // A valid register frame, sent without TLS.
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: edge.wire.port });
  await conn.write(encodeFrame(
    NodeEnvelopeSchema,
    create(NodeEnvelopeSchema, {
      msg: {
        case: "registerRequest",
        value: { nodeId: "n2", token: "n2-token", protocolVersion: 2 },
      },
    }),
  ));
  const buffer = new Uint8Array(1024);
  // The listener answers with at most a TLS alert, then closes.
  while ((await conn.read(buffer).catch(() => null)) !== null) { /* drain */ }
  conn.close();
  assert.equal(edge.service.status().nodes.find((n) => n.id === "n2")?.connected, false);

  const metrics = await edge.registry.getSingleMetricAsString(
    "iop_edge_wire_rejected_connections_total",
  );
  assert.match(metrics, /link="node",reason="handshake"} 1/);
  // The listener still serves: n1 stays up, n2 registers over TLS and runs.
  const n2 = await startNode(edge, { id: "n2" });
  assert.deepEqual(n2.adapters, ["mock"]);
  const run = await edge.service.submitRun({
    ...runInput({ adapter: "mock", target: "demo", prompt: "hi" }),
    node: "n2",
  });
  assert.equal((await run.done).type, "completed");
  assert.equal(edge.service.status().nodes.find((n) => n.id === "n1")?.connected, true);
});

/** Opens a TLS link to the Edge's node wire as `certId`'s certificate and registers as `as`. */
async function registerWith(port: number, tlsSettings: DialTls, as: { id: string; token: string }) {
  const link = await dialLink({ address: `127.0.0.1:${port}`, tls: tlsSettings });
  const conn = new FrameConnection(link, {
    inSchema: NodeEnvelopeSchema,
    outSchema: NodeEnvelopeSchema,
  });
  try {
    await conn.send(create(NodeEnvelopeSchema, {
      msg: {
        case: "registerRequest",
        value: { nodeId: as.id, token: as.token, protocolVersion: 2 },
      },
    }));
    const answer = await conn.messages().next();
    return answer.value?.msg.case === "registerResponse" ? answer.value.msg.value : undefined;
  } finally {
    conn.close();
  }
}

async function pem(role: "node" | "edge", id?: string): Promise<DialTls> {
  const files = await dialTlsOf(role, id);
  return {
    ca: await Deno.readTextFile(files.caFile),
    serverName: "",
    ...(id
      ? {
        cert: await Deno.readTextFile(files.certFile),
        key: await Deno.readTextFile(files.keyFile),
      }
      : {}),
  };
}

Deno.test("with mutual TLS a node registers only under the id its certificate names", async () => {
  await using edge = await startStack({
    config: { nodes: [mockNode("n-a"), mockNode("n-b")] },
    tls: "mutual",
    nodes: ["n-b"],
  });
  // n-b's certificate with n-a's id and token: refused, whatever the token.
  const stolen = await registerWith(edge.wire.port, await pem("node", "n-b"), {
    id: "n-a",
    token: "n-a-token",
  });
  assert.equal(stolen?.accepted, false);
  assert.match(
    stolen?.reason ?? "",
    /client certificate is not for node 'n-a' \(it names node\/n-b\)/,
  );
  assert.equal(edge.service.status().nodes.find((n) => n.id === "n-a")?.connected, false);

  // No client certificate at all: dropped at the handshake, before any answer (a TLS 1.3 client
  // learns it only when it reads, so the attempt may end with an error or with no answer).
  const anonymous = await registerWith(edge.wire.port, await pem("node"), {
    id: "n-a",
    token: "n-a-token",
  }).catch(() => undefined);
  assert.equal(anonymous, undefined);
  assert.equal(edge.service.status().nodes.find((n) => n.id === "n-a")?.connected, false);
  // The real n-b stayed connected, and n-a with its own certificate registers.
  assert.equal(edge.service.status().nodes.find((n) => n.id === "n-b")?.connected, true);
  const own = await registerWith(edge.wire.port, await pem("node", "n-a"), {
    id: "n-a",
    token: "n-a-token",
  });
  assert.equal(own?.accepted, true);
});

Deno.test("an edge verifies its Control Plane: an impostor never sees the edge credential", async () => {
  const foreign = await foreignCertificates({ role: "cp", id: "cp-test" });
  const fake = await recordingServer(
    await Deno.readTextFile(foreign.certFor("cp", "cp-test")),
    await Deno.readTextFile(foreign.keyFor("cp", "cp-test")),
  );
  const caFile = (await testCertificates()).ca;
  const config = parseEdgeConfig({
    edge: { id: "edge-a" },
    wire: { insecure_plaintext: true },
    control_plane: {
      address: `127.0.0.1:${fake.port}`,
      credential: "edge-a-cp-credential",
      reconnect_max_ms: 100,
      tls: { ca: caFile },
    },
  }, "edge.yaml");
  const log = new TextLog();
  const service = new EdgeService({ config, logger: quiet("edge"), version: "test" });
  const link = startCpLink({
    service,
    agents: new DomainAgents(service),
    version: "test",
    logger: createLogger("test.cp_link", { level: "warn", writer: log.append }),
    backoffInitialMs: 20,
  });
  try {
    await until("three refused dials", () => fake.connections >= 3);
    assert.equal(link.attached, false);
    assert.equal(fake.received.length, 0, "not one byte reached the impostor");
    assert.match(log.text, /against the fleet CA/);
    assert.doesNotMatch(log.text, /edge-a-cp-credential/);
  } finally {
    await link.stop();
    await fake.close();
  }
});

Deno.test("with mutual TLS an edge certificate binds the edge id it may attach as", async () => {
  await using cp = await startControlPlane(await testCpConfig(":memory:", { tls: "mutual" }), {
    logger: quiet("cp"),
  });
  const hello = async (tlsSettings: DialTls, edgeId: string) => {
    const link = await dialLink({ address: cp.wireAddress, tls: tlsSettings });
    const conn = new FrameConnection(link, {
      inSchema: EdgeEnvelopeSchema,
      outSchema: EdgeEnvelopeSchema,
    });
    try {
      await conn.send(create(EdgeEnvelopeSchema, {
        msg: {
          case: "hello",
          value: { edgeId, credential: testEdgeCredential(edgeId), protocolVersion: 1 },
        },
      }));
      const answer = await conn.messages().next();
      return answer.value?.msg.case === "helloAck" ? answer.value.msg.value : undefined;
    } finally {
      conn.close();
    }
  };
  // edge-b's certificate, edge-a's id and even edge-a's credential: refused.
  const forged = await hello(await pem("edge", "edge-b"), "edge-a");
  assert.equal(forged?.accepted, false);
  assert.match(forged?.reason ?? "", /client certificate is not for edge 'edge-a'/);
  assert.equal(cp.registry.list().length, 0);
  // Its own certificate and credential: accepted.
  const own = await hello(await pem("edge", "edge-a"), "edge-a");
  assert.equal(own?.accepted, true);
});

/** A TCP proxy to `target` that holds each connection `delayMs` before forwarding it. */
function slowProxy(target: string, delayMs: number) {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const [host, port] = [
    target.slice(0, target.lastIndexOf(":")),
    Number(target.slice(target.lastIndexOf(":") + 1)),
  ];
  const conns: Deno.Conn[] = [];
  const accepting = (async () => {
    for await (const inbound of listener) {
      conns.push(inbound);
      void (async () => {
        await new Promise((r) => setTimeout(r, delayMs));
        const outbound = await Deno.connect({ hostname: host, port });
        conns.push(outbound);
        await Promise.allSettled([
          inbound.readable.pipeTo(outbound.writable),
          outbound.readable.pipeTo(inbound.writable),
        ]);
      })().catch(() => {});
    }
  })().catch(() => {});
  return {
    address: `127.0.0.1:${(listener.addr as Deno.NetAddr).port}`,
    close: async () => {
      listener.close();
      for (const c of conns) {
        try {
          c.close();
        } catch {
          // Closed already.
        }
      }
      await accepting;
    },
  };
}

Deno.test("an edge link stopped while its TLS dial is under way ends instead of attaching", async () => {
  await using cp = await startControlPlane(await testCpConfig(":memory:"), {
    logger: quiet("cp"),
  });
  const proxy = slowProxy(cp.wireAddress, 300);
  const config = parseEdgeConfig({
    edge: { id: "edge-a" },
    wire: { insecure_plaintext: true },
    control_plane: {
      address: proxy.address,
      credential: testEdgeCredential("edge-a"),
      tls: { ca: (await testCertificates()).ca, server_name: "localhost" },
    },
  }, "edge.yaml");
  const service = new EdgeService({ config, logger: quiet("edge"), version: "test" });
  const link = startCpLink({
    service,
    agents: new DomainAgents(service),
    version: "test",
    logger: quiet("cp_link"),
  });
  try {
    await new Promise((r) => setTimeout(r, 100)); // the dial waits in the proxy
    const stopped = link.stop().then(() => "stopped");
    const outcome = await Promise.race([
      stopped,
      new Promise((r) => setTimeout(() => r("still running"), 5_000)),
    ]);
    assert.equal(outcome, "stopped");
    assert.equal(cp.registry.list().filter((e) => e.connected).length, 0);
  } finally {
    await proxy.close();
  }
});
