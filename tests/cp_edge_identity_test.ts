/**
 * Edge identity at the Control Plane, with a real Control Plane and real Edges (each with a
 * real Node) over TCP in this process: a credential admits only the edge id it belongs to, an
 * impostor never displaces the edge it claims to be, a legitimate reconnect still replaces the
 * old link, an empty `wire.edges` admits nobody, and a hashed credential works.
 */
import assert from "node:assert/strict";
import { type ControlPlane, startControlPlane } from "../services/cp/control_plane.ts";
import { createLogger, type Logger } from "../shared/log.ts";
import { hashSecret } from "../shared/secrets.ts";
import { authHeaders, startCpEdge, testCpConfig, testEdgeCredential } from "./cp_harness.ts";
import { until } from "./util.ts";

/** Parsed JSON of the HTTP API and of log lines, read field by field in assertions. */
// deno-lint-ignore no-explicit-any
type Json = any;

const ADMIN = authHeaders();

/** A logger that keeps its JSON lines for assertions. */
function recordingLogger(component: string): { logger: Logger; lines: string[]; logs(): Json[] } {
  const lines: string[] = [];
  const logger = createLogger(component, { level: "info", writer: (line) => lines.push(line) });
  return { logger, lines, logs: () => lines.map((l) => JSON.parse(l)) };
}

function refusals(logs: Json[], edgeId: string): Json[] {
  return logs.filter((l) => l.msg === "edge refused" && l.edge_id === edgeId);
}

function attached(cp: ControlPlane, edgeId: string): true | undefined {
  return cp.registry.get(edgeId)?.connected && cp.registry.get(edgeId)?.status?.nodes[0]?.connected
    ? true
    : undefined;
}

async function runBuild(cp: ControlPlane, edgeId: string, version: string): Promise<Json> {
  const res = await fetch(`${cp.httpUrl}/commands`, {
    method: "POST",
    headers: ADMIN,
    body: JSON.stringify({
      edges: { edgeIds: [edgeId] },
      command: { run: { adapter: "cli", target: "build", prompt: version } },
      actor: "alice",
    }),
  });
  assert.equal(res.status, 202);
  const { commandId } = await res.json();
  return await until("command to finish", async () => {
    const body = await (await fetch(`${cp.httpUrl}/commands/${commandId}`, { headers: ADMIN }))
      .json();
    return body.outcome === "running" ? undefined : body;
  });
}

Deno.test("an edge holding edge-b's credential cannot attach as edge-a, and edge-a keeps its link and its commands", async () => {
  const cpLog = recordingLogger("cp");
  await using cp = await startControlPlane(await testCpConfig(":memory:"), {
    logger: cpLog.logger,
  });
  await using edgeA = await startCpEdge({ edgeId: "edge-a", cpAddress: cp.wireAddress });
  await using edgeB = await startCpEdge({ edgeId: "edge-b", cpAddress: cp.wireAddress });
  await until("edge-a and edge-b attached", () => attached(cp, "edge-a") && attached(cp, "edge-b"));
  const connectedAt = cp.registry.get("edge-a")!.connectedAtMs;
  const linkEvents: string[] = [];
  cp.registry.subscribe((e) => {
    if (e.edgeId === "edge-a" && e.event.case === "link") linkEvents.push(e.event.value);
  });

  const impostorLog = recordingLogger("impostor.cp_link");
  await using impostor = await startCpEdge({
    edgeId: "edge-a",
    credential: edgeB.credential,
    nodeId: "impostor-node",
    cpAddress: cp.wireAddress,
    linkLogger: impostorLog.logger,
  });
  // It redials after each refusal: wait for two, so a retry is covered too.
  await until("the impostor refused twice", () => refusals(cpLog.logs(), "edge-a").length >= 2);

  const refused = refusals(cpLog.logs(), "edge-a")[0];
  assert.equal(refused.level, "warn");
  assert.equal(refused.reason, "credential is not valid for edge id 'edge-a'");
  assert.match(refused.remote, /^127\.0\.0\.1:\d+$/);
  const told = await until(
    "the impostor to hear why",
    () => impostorLog.logs().find((l) => l.msg === "control plane refused this edge"),
  );
  assert.equal(told.reason, "credential is not valid for edge id 'edge-a'");
  assert.equal(impostor.link.attached, false);
  for (const line of [...cpLog.lines, ...impostorLog.lines]) {
    assert.ok(!line.includes(edgeB.credential), `no credential in: ${line}`);
  }

  // edge-a never left: same attachment, no link change, still answering its own commands.
  assert.deepEqual(linkEvents, []);
  assert.equal(edgeA.link.attached, true);
  assert.equal(cp.registry.get("edge-a")!.connected, true);
  assert.equal(cp.registry.get("edge-a")!.connectedAtMs, connectedAt);
  assert.equal(cp.registry.get("edge-a")!.status?.nodes[0]?.id, "edge-a-node");
  const done = await runBuild(cp, "edge-a", "v9");
  assert.equal(done.outcome, "succeeded");
  assert.equal(done.edges["edge-a"].result.nodeId, "edge-a-node");
  assert.match(done.edges["edge-a"].result.summary, /building v9\ndone/);
  const audit = await (await fetch(`${cp.httpUrl}/audit`, { headers: ADMIN })).json();
  const row = audit.records.find((r: Json) => r.commandId === done.commandId);
  assert.deepEqual(row.edges, ["edge-a"]);
  assert.equal(row.results["edge-a"].status, "succeeded");
  assert.match(row.results["edge-a"].summary, /building v9\ndone/);
  assert.equal(edgeB.link.attached, true, "edge-b is untouched too");
});

Deno.test("a second connection of edge-a with edge-a's own credential replaces the older link", async () => {
  const cpLog = recordingLogger("cp");
  await using cp = await startControlPlane(await testCpConfig(":memory:"), {
    logger: cpLog.logger,
  });
  await using first = await startCpEdge({ edgeId: "edge-a", cpAddress: cp.wireAddress });
  await until("edge-a attached", () => attached(cp, "edge-a"));
  // Both stay configured to redial, so the two connections take turns: record who reported.
  const reporters = new Set<string>();
  cp.registry.subscribe((e) => {
    if (e.edgeId === "edge-a" && e.event.case === "status") {
      for (const node of e.event.value.nodes) reporters.add(node.id);
    }
  });
  const second = await startCpEdge({
    edgeId: "edge-a",
    nodeId: "edge-a-restarted-node",
    cpAddress: cp.wireAddress,
    linkLogger: recordingLogger("second.cp_link").logger,
  });
  try {
    await until("the new connection to take over", () => reporters.has("edge-a-restarted-node"));
    assert.deepEqual(refusals(cpLog.logs(), "edge-a"), []);
    const attaches = cpLog.logs().filter((l) =>
      l.msg === "edge attached" && l.edge_id === "edge-a"
    );
    assert.ok(attaches.length >= 2, "both connections were accepted");
  } finally {
    await second.stop();
  }
  // With the newer one gone, the first one is back (its link redials after being replaced).
  await until(
    "the first edge-a to be attached again",
    () => first.link.attached && cp.registry.get("edge-a")?.status?.nodes[0]?.id === "edge-a-node",
  );
});

Deno.test("an empty wire.edges admits no edge and says so at start", async () => {
  const cpLog = recordingLogger("cp");
  await using cp = await startControlPlane(await testCpConfig(":memory:", { edges: [] }), {
    logger: cpLog.logger,
  });
  const warning = cpLog.logs().find((l) => l.level === "warn");
  assert.equal(warning?.msg, "no edges configured under wire.edges: every edge will be refused");
  await using edge = await startCpEdge({
    edgeId: "edge-a",
    cpAddress: cp.wireAddress,
    linkLogger: recordingLogger("edge.cp_link").logger,
  });
  await until("edge-a refused", () => refusals(cpLog.logs(), "edge-a").length >= 1);
  assert.equal(
    refusals(cpLog.logs(), "edge-a")[0].reason,
    "credential is not valid for edge id 'edge-a'",
  );
  assert.equal(edge.link.attached, false);
  assert.deepEqual(cp.registry.list(), []);
});

Deno.test("an edge whose credential the Control Plane stores as sha256: attaches with the plain one", async () => {
  const plain = testEdgeCredential("edge-a");
  const cpLog = recordingLogger("cp");
  await using cp = await startControlPlane(
    await testCpConfig(":memory:", { edges: [{ id: "edge-a", credential: hashSecret(plain) }] }),
    { logger: cpLog.logger },
  );
  await using edge = await startCpEdge({ edgeId: "edge-a", cpAddress: cp.wireAddress });
  await until("edge-a attached", () => attached(cp, "edge-a"));
  assert.equal(edge.link.attached, true);
  // The stored hash is not a password: presenting it is refused.
  await using _replay = await startCpEdge({
    edgeId: "edge-a",
    credential: hashSecret(plain),
    nodeId: "replay-node",
    cpAddress: cp.wireAddress,
    linkLogger: recordingLogger("replay.cp_link").logger,
  });
  await until("the hash replay refused", () => refusals(cpLog.logs(), "edge-a").length >= 1);
  assert.equal(edge.link.attached, true);
  assert.equal(cp.registry.get("edge-a")!.status?.nodes[0]?.id, "edge-a-node");
});
