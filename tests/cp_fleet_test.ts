/**
 * Two real Edges (each with a real Node) attached to a Control Plane running as its own process:
 * the fleet view, fleet commands with per-edge results, the audit log across a Control Plane
 * restart, and Edges that keep serving without the Control Plane and reattach when it returns.
 */
import { listenTlsConfig } from "./tls_fixture.ts";
import assert from "node:assert/strict";
import { runInput } from "../shared/run.ts";
import { type CpEdge, startCpEdge, testEdgeCredential } from "./cp_harness.ts";
import { hashSecret } from "../shared/secrets.ts";
import { freePort, until } from "./util.ts";

/** Parsed JSON of the HTTP API, read field by field in assertions. */
// deno-lint-ignore no-explicit-any
type Json = any;

/** The operate token of the config below (stored hashed there), named ops-alice. */
const OPERATE_TOKEN = "fleet-test-operate-token";
/** The read token of the config below, named dashboards. */
const READ_TOKEN = "fleet-test-read-token";
const ADMIN = { authorization: `Bearer ${OPERATE_TOKEN}`, "content-type": "application/json" };
const READ = { authorization: `Bearer ${READ_TOKEN}` };

interface CpProcess {
  url: string;
  wire: string;
  stop(): Promise<void>;
}

async function writeCpConfig(dir: string, httpPort: number, wirePort: number): Promise<string> {
  const file = `${dir}/cp.yaml`;
  await Deno.writeTextFile(
    file,
    `control_plane: { id: cp-proc }
http: { host: 127.0.0.1, port: ${httpPort} }
wire:
  host: 127.0.0.1
  port: ${wirePort}
  heartbeat_interval_ms: 500
  tls: ${JSON.stringify(await listenTlsConfig("cp", "cp-test"))}
  edges:
    - { id: edge-a, credential: ${testEdgeCredential("edge-a")} }
    - { id: edge-b, credential: ${testEdgeCredential("edge-b")} }
access:
  tokens:
    - { name: ops-alice, token: "${hashSecret(OPERATE_TOKEN)}", role: operate }
    - { name: dashboards, token: ${READ_TOKEN}, role: read }
audit: { path: ${dir}/audit.sqlite }
`,
  );
  return file;
}

/** Starts `services/cp/main.ts` as a process and waits until it answers /readyz. */
async function startCpProcess(config: string, httpPort: number, wirePort: number) {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      new URL("../services/cp/main.ts", import.meta.url).pathname,
      "--config",
      config,
    ],
    env: { IOP_LOG_LEVEL: "error" },
    stdout: "null",
    stderr: "inherit",
  }).spawn();
  const url = `http://127.0.0.1:${httpPort}`;
  await until("control plane process to be ready", async () => {
    const res = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(2_000) });
    await res.body?.cancel();
    return res.ok ? true : undefined;
  }, 30_000);
  let stopped: Promise<void> | undefined;
  return {
    url,
    wire: `127.0.0.1:${wirePort}`,
    stop: () =>
      stopped ??= (async () => {
        child.kill("SIGTERM");
        // A process that does not stop fails the test instead of hanging it.
        const late = setTimeout(() => child.kill("SIGKILL"), 15_000);
        const status = await child.status.finally(() => clearTimeout(late));
        assert.equal(status.code, 0, "control plane exits cleanly on SIGTERM");
      })(),
  } satisfies CpProcess;
}

/** Fetches JSON, by default with the read token. */
async function getJson(url: string, init?: RequestInit): Promise<{ status: number; body: Json }> {
  const res = await fetch(url, { signal: AbortSignal.timeout(10_000), headers: READ, ...init });
  return { status: res.status, body: await res.json() };
}

async function bothConnected(url: string): Promise<Json[] | undefined> {
  const { body } = await getJson(`${url}/edges`);
  const edges = body.edges as Json[];
  const ready = edges.length === 2 &&
    edges.every((e) => e.connected && e.status?.nodes?.[0]?.connected);
  return ready ? edges : undefined;
}

async function withFleet(
  fn: (cp: CpProcess, edges: CpEdge[], restart: () => Promise<CpProcess>) => Promise<void>,
) {
  const dir = await Deno.makeTempDir({ prefix: "iop-cp-fleet-" });
  const httpPort = freePort();
  const wirePort = freePort();
  const config = await writeCpConfig(dir, httpPort, wirePort);
  let cp: CpProcess | undefined = await startCpProcess(config, httpPort, wirePort);
  const edges: CpEdge[] = [];
  try {
    edges.push(
      await startCpEdge({ edgeId: "edge-a", cpAddress: cp.wire, labels: { site: "lab" } }),
    );
    edges.push(
      await startCpEdge({ edgeId: "edge-b", cpAddress: cp.wire, labels: { site: "field" } }),
    );
    await until("both edges attached with their nodes", () => bothConnected(cp!.url));
    await fn(cp, edges, async () => {
      await cp?.stop();
      cp = undefined;
      cp = await startCpProcess(config, httpPort, wirePort);
      return cp;
    });
  } finally {
    for (const edge of edges) await edge.stop();
    await cp?.stop();
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("GET /edges shows both edges distinctly with their node and provider snapshots and no tokens or addresses", async () => {
  await withFleet(async (cp, edges) => {
    const anonymous = await fetch(`${cp.url}/edges`);
    assert.equal(anonymous.status, 401, "fleet data needs a token");
    await anonymous.body?.cancel();
    const res = await fetch(`${cp.url}/edges`, { headers: READ });
    const text = await res.text();
    const list = JSON.parse(text).edges as Json[];
    assert.deepEqual(list.map((e) => e.edgeId), ["edge-a", "edge-b"]);
    assert.deepEqual(list.map((e) => e.labels.site), ["lab", "field"]);
    for (const [i, view] of list.entries()) {
      const node = view.status.nodes[0];
      assert.equal(node.id, edges[i]!.nodeId);
      assert.equal(node.connected, true);
      assert.deepEqual(
        node.resources.map((r: Json) => [r.kind, r.id, r.target, r.inFlight, r.queued]),
        [
          ["provider", `${edges[i]!.nodeId}-demo`, "demo", 0, 0],
          // The CLI profiles are resources too, never queued.
          ...["build", "deploy", "broken", "slow"].map((p) => ["profile", `cli/${p}`, p, 0, 0]),
        ],
      );
      assert.deepEqual(view.status.agents.map((a: Json) => [a.id, a.state]), [[
        "deployer",
        "ready",
      ]]);
    }
    for (const edge of edges) {
      assert.ok(!text.includes(edge.nodeToken), "no node token in the fleet view");
      assert.ok(!text.includes(`:${edge.nodeWire.port}`), "no node wire address in the fleet view");
    }
    for (const edge of edges) {
      assert.ok(!text.includes(edge.credential), "no edge credential in the fleet view");
    }
    const one = await getJson(`${cp.url}/edges/edge-b?refresh=1`);
    assert.equal(one.body.edgeId, "edge-b");
    const missing = await getJson(`${cp.url}/edges/edge-x`);
    assert.equal(missing.status, 404);
    assert.equal(missing.body.error.code, "NOT_FOUND");
  });
});

Deno.test("a fleet command to both edges returns a result per edge and an audit row that survives a Control Plane restart", async () => {
  await withFleet(async (cp, _edges, restart) => {
    const body = JSON.stringify({
      edges: { all: true },
      command: { run: { adapter: "cli", target: "build", prompt: "v1.2" } },
      actor: "mallory",
    });
    const refused = await fetch(`${cp.url}/commands`, { method: "POST", body });
    assert.equal(refused.status, 401);
    await refused.body?.cancel();
    const readOnly = await getJson(`${cp.url}/commands`, { method: "POST", headers: READ, body });
    assert.equal(readOnly.status, 403, "a read token cannot command");
    const accepted = await getJson(`${cp.url}/commands`, { method: "POST", headers: ADMIN, body });
    assert.equal(accepted.status, 202);
    assert.deepEqual(accepted.body.edgeIds, ["edge-a", "edge-b"]);
    const id = accepted.body.commandId as string;
    const done = await until("command to finish", async () => {
      const { body } = await getJson(`${cp.url}/commands/${id}`);
      return body.outcome === "running" ? undefined : body;
    });
    assert.equal(done.outcome, "succeeded");
    for (const edgeId of ["edge-a", "edge-b"]) {
      const share = done.edges[edgeId];
      assert.equal(share.status, "succeeded");
      assert.match(share.result.summary, /building v1\.2\ndone/);
      assert.equal(share.result.nodeId, `${edgeId}-node`);
      assert.ok(share.progress.some((p: Json) => p.message === "building v1.2"));
    }
    const cpAfter = await restart();
    const { body: audit } = await getJson(`${cpAfter.url}/audit`);
    const row = audit.records.find((r: Json) => r.commandId === id);
    assert.ok(row, "audit row survives the restart");
    assert.equal(row.actor, "ops-alice", "the token's name, not the body's actor");
    assert.equal(row.kind, "run");
    assert.equal(row.outcome, "succeeded");
    assert.deepEqual(row.edges, ["edge-a", "edge-b"]);
    assert.equal(row.results["edge-a"].status, "succeeded");
    assert.ok(row.finishedAtMs >= row.createdAtMs);
  });
});

Deno.test("edges keep serving runs while the Control Plane is down and reattach when it returns", async () => {
  await withFleet(async (cp, edges, restart) => {
    await cp.stop();
    await until(
      "edges to notice the control plane is gone",
      () => edges.every((e) => !e.link.attached) ? true : undefined,
    );
    for (const edge of edges) {
      const handle = await edge.service.submitRun(
        runInput({ adapter: "mock", target: "demo", prompt: "still here" }),
      );
      const terminal = await handle.done;
      assert.equal(terminal.type, "completed", `${edge.edgeId} serves without the control plane`);
    }
    const back = await restart();
    const list = await until("both edges to reattach", () => bothConnected(back.url));
    assert.deepEqual(list.map((e) => e.edgeId), ["edge-a", "edge-b"]);
  });
});
