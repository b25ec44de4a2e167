/**
 * End-to-end fleet suite: compose/fleet.yaml (Control Plane, edge-a with node-a1 + node-a2 and
 * its standby edge-a-standby, edge-b with node-b1 + a fake Ollama) in real containers, driven
 * through the published loopback ports with the `openai` client, with faults made by the docker
 * CLI: a node killed mid-stream, an edge stopped, the active edge killed (its nodes go to the
 * standby and come back), an edge cut off the Control Plane network, the Control Plane
 * restarted. Needs a Docker engine and compose v2; without them the suite fails saying what to
 * install, unless IOP_SKIP_FLEET=1 opts out explicitly (CI never does).
 * @module
 */
import { assertPrometheusScrapesEveryTier } from "./fleet_prometheus.ts";
import assert from "node:assert/strict";
import OpenAI from "openai";
import {
  docker,
  dockerProblem,
  ensureImages,
  type Fleet,
  FLEET_CP_READ,
  getJson,
  ROOT,
  run,
  startFleet,
} from "./fleet_harness.ts";
import { until } from "./util.ts";

const skip = Deno.env.get("IOP_SKIP_FLEET") === "1";
if (skip) console.log("fleet suite ignored: IOP_SKIP_FLEET=1 was set explicitly");

/** An edge as GET /edges shows it (protobuf JSON: false and empty fields are omitted). */
interface EdgeView {
  edgeId: string;
  connected?: boolean;
  connectedAtMs?: string;
  disconnectReason?: string;
  status?: { nodes?: { id: string; connected?: boolean }[] };
}

/** A node as the edge's /api/iop/status shows it. */
interface EdgeNodeStatus {
  id: string;
  connected: boolean;
  resources: { kind: string; modelGroup: string; inFlight: number }[];
}

const EDGE_NODES: Record<string, string[]> = {
  "edge-a": ["node-a1", "node-a2"],
  "edge-b": ["node-b1"],
};

/** How often a node on the standby checks edge-a (`edge.failback_ms`, compose/config/node.yaml). */
const FAILBACK_MS = 2_000;

/** A service of `docker compose config --format json`, as far as the GPU test reads it. */
interface ComposeService {
  environment?: Record<string, string>;
  deploy?: {
    resources?: {
      reservations?: { devices?: { driver?: string; capabilities?: string[] }[] };
    };
  };
}

/** `docker compose config` of a file with exactly the given variables (no engine needed). */
function composeConfig(file: string, vars: Record<string, string>, extra: string[]) {
  const assignments = Object.entries(vars).map(([k, v]) => `${k}=${v}`);
  return run("env", [
    "-u",
    "IOP_NODE_ID",
    "-u",
    "IOP_NODE_TOKEN",
    "-u",
    "IOP_NODE_EDGE_ADDRESS",
    ...assignments,
    "docker",
    "compose",
    "-f",
    file,
    ...extra,
    "config",
    "--format",
    "json",
  ]);
}

function client(baseUrl: string): OpenAI {
  return new OpenAI({ apiKey: "fleet", baseURL: `${baseUrl}/v1`, maxRetries: 0, timeout: 30_000 });
}

/** Streams one chat completion; returns the text and how many content chunks carried it. */
async function streamChat(
  baseUrl: string,
  model: string,
  prompt: string,
): Promise<{ text: string; chunks: number }> {
  const stream = await client(baseUrl).chat.completions.create({
    model,
    messages: [{ role: "user", content: prompt }],
    stream: true,
  });
  let text = "";
  let chunks = 0;
  for await (const chunk of stream) {
    const delta = chunk.choices[0]?.delta.content ?? "";
    if (delta !== "") chunks++;
    text += delta;
  }
  return { text, chunks };
}

function servedBy(text: string): string | undefined {
  return text.match(/served-by (node-[a-z0-9]+)\s/)?.[1];
}

/** The node whose provider of pool `group` has a run in flight, by the edge's status. */
async function nodeRunning(edgeUrl: string, group: string): Promise<string | undefined> {
  const status = await getJson<{ nodes: EdgeNodeStatus[] }>(`${edgeUrl}/api/iop/status`);
  return status.nodes.find((n) =>
    n.resources.some((r) => r.kind === "provider" && r.modelGroup === group && r.inFlight > 0)
  )?.id;
}

/** The edge as GET /edges shows it: what an operator sees, no refresh requested. */
async function cpEdge(fleet: Fleet, id: string): Promise<EdgeView | undefined> {
  const { edges } = await getJson<{ edges: EdgeView[] }>(`${fleet.cpUrl}/edges`, FLEET_CP_READ);
  return edges.find((e) => e.edgeId === id);
}

/** Waits until the Control Plane shows `edgeId` attached with all its nodes connected. */
function untilEdgeAttachedWithNodes(fleet: Fleet, edgeId: string, timeoutMs: number) {
  return until(
    `${edgeId} and its nodes on the Control Plane`,
    async () => {
      const view = await cpEdge(fleet, edgeId);
      if (view?.connected !== true) return undefined;
      const up = (view.status?.nodes ?? []).filter((n) => n.connected === true).map((n) => n.id);
      return EDGE_NODES[edgeId]!.every((n) => up.includes(n)) ? view : undefined;
    },
    timeoutMs,
    200,
  );
}

function untilEdgeGone(fleet: Fleet, edgeId: string, timeoutMs: number) {
  return until(
    `the Control Plane to mark ${edgeId} disconnected`,
    async () => {
      const view = await cpEdge(fleet, edgeId);
      return view && view.connected !== true ? view : undefined;
    },
    timeoutMs,
    200,
  );
}

function untilNodeOnEdge(edgeUrl: string, nodeId: string, timeoutMs: number) {
  return until(
    `${nodeId} connected to its edge`,
    async () => {
      const status = await getJson<{ nodes: EdgeNodeStatus[] }>(`${edgeUrl}/api/iop/status`);
      return status.nodes.some((n) => n.id === nodeId && n.connected) ? true : undefined;
    },
    timeoutMs,
    200,
  );
}

/** The ids of the nodes an edge's status shows connected, sorted. */
async function connectedNodes(edgeUrl: string): Promise<string[]> {
  const status = await getJson<{ nodes: EdgeNodeStatus[] }>(`${edgeUrl}/api/iop/status`);
  return status.nodes.filter((n) => n.connected).map((n) => n.id).sort();
}

function seconds(since: number): string {
  return `${((performance.now() - since) / 1000).toFixed(1)} s`;
}

Deno.test({
  name: "fleet in containers serves OpenAI through both edges and survives node, edge and " +
    "Control Plane faults",
  ignore: skip,
  fn: async (t) => {
    const problem = await dockerProblem();
    if (problem) {
      throw new Error(
        `The fleet suite needs Docker: ${problem}. Set IOP_SKIP_FLEET=1 only to skip it on purpose.`,
      );
    }
    await ensureImages();
    const started = performance.now();
    const fleet = await startFleet();
    const results: boolean[] = [];
    try {
      results.push(
        await t.step(
          "the fleet comes up and the Control Plane shows both edges with their nodes, and " +
            "edge-a's standby attached with none",
          async () => {
            await untilEdgeAttachedWithNodes(fleet, "edge-a", 60_000);
            await untilEdgeAttachedWithNodes(fleet, "edge-b", 60_000);
            const standby = await until(
              "edge-a-standby on the Control Plane",
              async () => {
                const view = await cpEdge(fleet, "edge-a-standby");
                return view?.connected === true && view.status ? view : undefined;
              },
              60_000,
              200,
            );
            // The standby knows group a's nodes; they are registered with edge-a, not with it.
            assert.deepEqual(
              (standby.status?.nodes ?? []).map((n) => [n.id, n.connected === true]).sort(),
              [["node-a1", false], ["node-a2", false]],
            );
            // In the fleet report those nodes are `elsewhere` on the standby, not down, not twice.
            const report = await getJson<{
              nodes: { connected: number; known: number };
              perEdge: { edgeId: string; health: string; nodes: { elsewhere: number } }[];
            }>(`${fleet.cpUrl}/report`, FLEET_CP_READ);
            const standbyLine = report.perEdge.find((e) => e.edgeId === "edge-a-standby");
            assert.equal(standbyLine?.health, "healthy");
            assert.equal(standbyLine?.nodes.elsewhere, 2);
            assert.deepEqual(report.nodes, { connected: 3, known: 3 });
            const { edges } = await getJson<{ edges: EdgeView[] }>(
              `${fleet.cpUrl}/edges`,
              FLEET_CP_READ,
            );
            assert.deepEqual(edges.map((e) => e.edgeId).sort(), [
              "edge-a",
              "edge-a-standby",
              "edge-b",
            ]);
            // An init, not Deno, is PID 1 of a node: it reaps what killed CLI process groups leave.
            const pid1 = await docker([
              "exec",
              fleet.containerId("node-a1"),
              "cat",
              "/proc/1/comm",
            ]);
            assert.equal(pid1.trim(), "docker-init");
            console.log(`fleet up and attached in ${seconds(started)}`);
          },
        ),
      );

      results.push(
        await t.step(
          "both wires run mutual TLS: a plaintext peer on a node wire is dropped, nodes stay",
          async () => {
            const edgeLogs = async () => {
              const r = await run("docker", ["logs", fleet.containerId("edge-a")]);
              return r.stdout + r.stderr;
            };
            const logs = await edgeLogs();
            assert.match(logs, /"node_wire_tls":"mutual"/);
            assert.doesNotMatch(logs, /plaintext/, "no wire of edge-a runs plaintext");
            const ip = (await docker([
              "inspect",
              "-f",
              `{{(index .NetworkSettings.Networks "${fleet.network("group-a")}").IPAddress}}`,
              fleet.containerId("edge-a"),
            ])).trim();
            const conn = await Deno.connect({ hostname: ip, port: 7100 });
            await conn.write(new TextEncoder().encode("\x10plaintext hello!"));
            const buffer = new Uint8Array(512);
            while ((await conn.read(buffer).catch(() => null)) !== null) { /* until closed */ }
            conn.close();
            await until(
              "edge-a to log the refused handshake",
              async () => /peer failed the TLS handshake/.test(await edgeLogs()),
            );
            const status = await getJson<{ nodes: EdgeNodeStatus[] }>(
              `${fleet.edgeAUrl}/api/iop/status`,
            );
            assert.deepEqual(
              status.nodes.filter((n) => n.connected).map((n) => n.id).sort(),
              EDGE_NODES["edge-a"],
            );
          },
        ),
      );

      results.push(
        await t.step(
          "edge-b serves its tenants: no key is refused, a tenant sees only its models and " +
            "gets 429 at its concurrency limit",
          async () => {
            const anonymous = await fetch(`${fleet.edgeBUrl}/v1/models`);
            assert.equal(anonymous.status, 401);
            await anonymous.body?.cancel();
            const batch = new OpenAI({
              apiKey: "fleet-batch-key",
              baseURL: `${fleet.edgeBUrl}/v1`,
              maxRetries: 0,
              timeout: 30_000,
            });
            const models = await batch.models.list();
            assert.deepEqual(models.data.map((m) => m.id), ["chat"]);
            const first = await batch.chat.completions.create({
              model: "chat",
              messages: [{ role: "user", content: "batch one" }],
              stream: true,
            });
            const second = await batch.chat.completions.create({
              model: "chat",
              messages: [{ role: "user", content: "batch two" }],
            }).catch((e) => e);
            assert.equal(second.status, 429, String(second));
            assert.ok(Number(second.headers?.get("retry-after")) >= 1);
            for await (const _chunk of first) { /* the first run still completes */ }
            const forbidden = await batch.chat.completions.create({
              model: "whoami",
              messages: [{ role: "user", content: "x" }],
            }).catch((e) => e);
            assert.equal(forbidden.status, 404);
          },
        ),
      );

      results.push(
        await t.step("Prometheus scrapes every tier of the fleet", async () => {
          await assertPrometheusScrapesEveryTier(fleet.prometheusUrl);
        }),
      );

      results.push(
        await t.step("an OpenAI stream through each edge reaches a node", async () => {
          const models = await client(fleet.edgeAUrl).models.list();
          assert.ok(models.data.some((m) => m.id === "whoami"), "edge-a lists the whoami model");
          const a = await streamChat(fleet.edgeAUrl, "whoami", "hello fleet");
          assert.match(servedBy(a.text) ?? "", /^node-a[12]$/, a.text);
          assert.match(a.text, /hello\s+fleet/);
          assert.ok(a.chunks >= 2, `edge-a answered in ${a.chunks} chunk(s), not a stream`);

          const b = await streamChat(fleet.edgeBUrl, "whoami", "hello fleet");
          assert.equal(servedBy(b.text), "node-b1", b.text);
          // The model path: node-b1 runs it on the fake Ollama container.
          const llama = await streamChat(fleet.edgeBUrl, "llama3.2", "say something");
          assert.match(llama.text, /^tok0 tok1 tok2/, llama.text);
          assert.ok(llama.chunks >= 10, `llama3.2 answered in ${llama.chunks} chunk(s)`);
        }),
      );

      results.push(
        await t.step(
          "a node killed mid-stream ends the stream with an error promptly and the next request runs on the other node",
          async () => {
            // A pool run (mock, 200 tokens over ~10 s); the edge's status names its node.
            const stream = await client(fleet.edgeAUrl).chat.completions.create({
              model: "chat",
              messages: [{ role: "user", content: "before the kill" }],
              stream: true,
              metadata: { "mock.tokens": "200", "mock.token_delay_ms": "50" },
            });
            let text = "";
            let victim: string | undefined;
            let killedAt = 0;
            let error: unknown;
            try {
              for await (const chunk of stream) {
                text += chunk.choices[0]?.delta.content ?? "";
                if (victim === undefined && text !== "") {
                  victim = await nodeRunning(fleet.edgeAUrl, "chat");
                  if (victim === undefined) continue;
                  await docker(["kill", fleet.containerId(victim)]);
                  killedAt = performance.now();
                }
              }
            } catch (err) {
              error = err;
            }
            const errorAfterMs = performance.now() - killedAt;
            assert.ok(victim, `the edge's status showed no node running the chat run: ${text}`);
            assert.ok(
              error instanceof OpenAI.APIError,
              `the stream ended without an API error: ${error}; text ${text}`,
            );
            assert.ok(errorAfterMs < 5_000, `the error came ${errorAfterMs} ms after the kill`);
            assert.doesNotMatch(
              text,
              /tok199/,
              "the stream completed although its node was killed",
            );
            console.log(
              `killed ${victim}: client error after ${
                Math.round(errorAfterMs)
              } ms: ${error.message}`,
            );

            // The pool serves on the node left, and so does the direct CLI route.
            const other = victim === "node-a1" ? "node-a2" : "node-a1";
            const again = await streamChat(fleet.edgeAUrl, "chat", "after the kill");
            assert.match(again.text, /^after the kill/);
            const next = await streamChat(fleet.edgeAUrl, "whoami", "after the kill");
            assert.equal(servedBy(next.text), other, next.text);
            assert.match(next.text, /after\s+the\s+kill/);

            // Bring the node back for the scenarios that follow; it re-registers by itself.
            const restartedAt = performance.now();
            await docker(["start", fleet.containerId(victim)]);
            await untilNodeOnEdge(fleet.edgeAUrl, victim, 30_000);
            console.log(`${victim} re-registered ${seconds(restartedAt)} after docker start`);
          },
        ),
      );

      results.push(
        await t.step(
          "an edge stopped is marked gone; restarted, it reattaches with its nodes",
          async () => {
            const stoppedAt = performance.now();
            await docker(["stop", "--time", "5", fleet.containerId("edge-a")]);
            const gone = await untilEdgeGone(fleet, "edge-a", 15_000);
            console.log(
              `edge-a marked gone ${seconds(stoppedAt)} after docker stop (${
                gone.disconnectReason ?? ""
              })`,
            );
            assert.equal((await cpEdge(fleet, "edge-b"))?.connected, true, "edge-b stays attached");

            const restartedAt = performance.now();
            await docker(["start", fleet.containerId("edge-a")]);
            await untilEdgeAttachedWithNodes(fleet, "edge-a", 45_000);
            console.log(
              `edge-a reattached with both nodes ${seconds(restartedAt)} after docker start`,
            );
            const after = await streamChat(fleet.edgeAUrl, "chat", "back again");
            assert.match(after.text, /^back again/);
          },
        ),
      );

      results.push(
        await t.step(
          "edge-a killed: its standby answers within 10 s, and the nodes fail back once edge-a " +
            "is back",
          async () => {
            // The nodes registered with edge-a now (both, unless an earlier step lost one).
            const group = await connectedNodes(fleet.edgeAUrl);
            assert.ok(group.length > 0, "edge-a has nodes to hand over");
            assert.deepEqual(await connectedNodes(fleet.edgeAStandbyUrl), []);
            await docker(["kill", fleet.containerId("edge-a")]);
            const killedAt = performance.now();
            try {
              // Clients of group a now ask the standby; it answers once a node registered there.
              const served = await until(
                "an answer from edge-a-standby",
                () => streamChat(fleet.edgeAStandbyUrl, "whoami", "from the standby"),
                10_000,
                100,
              );
              const answeredAfterMs = performance.now() - killedAt;
              assert.match(servedBy(served.text) ?? "", /^node-a[12]$/, served.text);
              assert.match(served.text, /from\s+the\s+standby/);
              assert.ok(
                answeredAfterMs < 10_000,
                `the standby answered ${answeredAfterMs} ms after the kill`,
              );
              console.log(`edge-a killed: edge-a-standby answered ${seconds(killedAt)} after`);
              await until(
                "edge-a's nodes on the standby",
                async () => (await connectedNodes(fleet.edgeAStandbyUrl)).join() === group.join(),
                10_000,
                100,
              );
            } finally {
              await docker(["start", fleet.containerId("edge-a")]);
            }
            const restartedAt = performance.now();
            // Idle nodes return within about one failback_ms of edge-a accepting connections.
            await until(
              "the nodes back on edge-a",
              async () => (await connectedNodes(fleet.edgeAUrl)).join() === group.join(),
              30_000 + FAILBACK_MS,
              200,
            );
            console.log(`nodes failed back to edge-a ${seconds(restartedAt)} after docker start`);
            await until(
              "the standby to see the nodes gone",
              async () => (await connectedNodes(fleet.edgeAStandbyUrl)).length === 0,
              5_000,
              100,
            );
            const after = await streamChat(fleet.edgeAUrl, "whoami", "back on edge-a");
            assert.match(servedBy(after.text) ?? "", /^node-a[12]$/, after.text);
            await until(
              "edge-a attached to the Control Plane",
              async () => (await cpEdge(fleet, "edge-a"))?.connected === true,
              30_000,
              200,
            );
          },
        ),
      );

      results.push(
        await t.step(
          "an edge cut off the Control Plane network keeps serving and reattaches when reconnected",
          async () => {
            const cpNet = fleet.network("cp-net");
            const edgeA = fleet.containerId("edge-a");
            const cutAt = performance.now();
            await docker(["network", "disconnect", cpNet, edgeA]);
            try {
              await untilEdgeGone(fleet, "edge-a", 15_000);
              console.log(`edge-a cut off: marked gone ${seconds(cutAt)} after the disconnect`);
              const served = await streamChat(fleet.edgeAUrl, "whoami", "still serving");
              assert.match(servedBy(served.text) ?? "", /^node-a[12]$/, served.text);
              assert.match(served.text, /still\s+serving/);
            } finally {
              await docker(["network", "connect", cpNet, edgeA]);
            }
            const reconnectedAt = performance.now();
            await untilEdgeAttachedWithNodes(fleet, "edge-a", 30_000);
            console.log(`edge-a reattached ${seconds(reconnectedAt)} after the network came back`);
          },
        ),
      );

      results.push(
        await t.step("the Control Plane restarted: both edges reattach on their own", async () => {
          const before = await cpEdge(fleet, "edge-b");
          const restartedAt = performance.now();
          await docker(["restart", "--time", "5", fleet.containerId("cp")]);
          await untilEdgeAttachedWithNodes(fleet, "edge-a", 45_000);
          const b = await untilEdgeAttachedWithNodes(fleet, "edge-b", 45_000);
          assert.notEqual(b.connectedAtMs, before?.connectedAtMs, "edge-b attached anew");
          console.log(
            `both edges reattached ${seconds(restartedAt)} after the Control Plane restart`,
          );
          const served = await streamChat(fleet.edgeBUrl, "llama3.2", "after restart");
          assert.match(served.text, /^tok0/);
        }),
      );
    } finally {
      if (results.includes(false)) await fleet.dumpLogs();
      const downAt = performance.now();
      await fleet.down();
      console.log(`fleet removed in ${seconds(downAt)}; whole suite ${seconds(started)}`);
    }
  },
});

Deno.test({
  name: "gpu-node compose file refuses to start without an edge address or certificates and " +
    "reserves GPUs for the model servers",
  ignore: skip,
  fn: async () => {
    const problem = await dockerProblem();
    if (problem) throw new Error(`The fleet suite needs Docker: ${problem}.`);
    const file = `${ROOT}/compose/gpu-node.yaml`;
    const env = {
      IOP_NODE_ID: "gpu-01",
      IOP_NODE_TOKEN: "t0k",
      IOP_NODE_EDGE_ADDRESS: "",
      IOP_CERTS_DIR: "/etc/iop-certs",
    };
    const missing = await composeConfig(file, env, []);
    assert.notEqual(missing.code, 0);
    assert.match(missing.stderr, /IOP_NODE_EDGE_ADDRESS/);
    const noCerts = await composeConfig(file, {
      ...env,
      IOP_NODE_EDGE_ADDRESS: "edge.example.internal:7100",
      IOP_CERTS_DIR: "",
    }, []);
    assert.notEqual(noCerts.code, 0);
    assert.match(noCerts.stderr, /IOP_CERTS_DIR/);

    env.IOP_NODE_EDGE_ADDRESS = "edge.example.internal:7100";
    const plain = await composeConfig(file, env, []);
    assert.equal(plain.code, 0, plain.stderr);
    const services = JSON.parse(plain.stdout).services as Record<string, ComposeService>;
    assert.deepEqual(Object.keys(services).sort(), ["node", "ollama"]);
    assert.equal(services.node!.environment?.IOP_NODE_EDGE_ADDRESS, env.IOP_NODE_EDGE_ADDRESS);
    assert.equal(services.node!.deploy, undefined, "the IOP node itself needs no GPU");
    assert.equal(
      services.node!.environment?.IOP_NODE_EDGE_TLS_CERT,
      "/etc/iop/certs/node-gpu-01.pem",
      "the node shows its own certificate to the edge",
    );

    const withVllm = await composeConfig(file, env, ["--profile", "vllm"]);
    assert.equal(withVllm.code, 0, withVllm.stderr);
    const all = JSON.parse(withVllm.stdout).services as Record<string, ComposeService>;
    for (const name of ["ollama", "vllm"]) {
      const devices = all[name]?.deploy?.resources?.reservations?.devices ?? [];
      assert.ok(
        devices.some((d) => d.driver === "nvidia" && d.capabilities?.includes("gpu")),
        `${name} reserves an NVIDIA GPU`,
      );
    }
  },
});
