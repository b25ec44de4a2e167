/**
 * Honest fleet command outcomes, with a real Control Plane and a real Edge and Node (TLS on the
 * edge wire) in this process, and the Node's CLI processes real: the Edge cancels a command's
 * run at its timeout_ms; a share the Control Plane cannot know (deadline passed, link lost) is
 * unknown and never retryable; the Edge's late answer then completes it in the command record,
 * the audit and the report.
 */
import assert from "node:assert/strict";
import type { CommandUpdate } from "../proto/gen/iop/v1/control_pb.ts";
import { type ControlPlane, startControlPlane } from "../services/cp/control_plane.ts";
import { authHeaders, startCpEdge, TEST_READ_TOKEN, testCpConfig } from "./cp_harness.ts";
import { quiet } from "./stack.ts";
import { until } from "./util.ts";

/** Parsed JSON of the HTTP API, read field by field in assertions. */
// deno-lint-ignore no-explicit-any
type Json = any;

const ADMIN = authHeaders();

async function startCp(resultGraceMs?: number): Promise<ControlPlane> {
  const config = await testCpConfig(":memory:");
  return await startControlPlane(
    resultGraceMs === undefined
      ? config
      : { ...config, commands: { ...config.commands, resultGraceMs } },
    { logger: quiet("cp") },
  );
}

async function submit(cp: ControlPlane, command: Json, timeoutMs: number): Promise<string> {
  const res = await fetch(`${cp.httpUrl}/commands`, {
    method: "POST",
    headers: ADMIN,
    body: JSON.stringify({ edges: { edgeIds: ["edge-a"] }, command: { ...command, timeoutMs } }),
  });
  const body: Json = await res.json();
  assert.equal(res.status, 202, JSON.stringify(body));
  return body.commandId;
}

/** GETs fleet data as a read token does. */
async function getJson(url: string): Promise<Json> {
  const res = await fetch(url, { headers: authHeaders(TEST_READ_TOKEN) });
  assert.equal(res.status, 200);
  return await res.json();
}

/** The process group of every live process whose command line contains `token`. */
async function groupsRunning(token: string): Promise<Set<number>> {
  const groups = new Set<number>();
  for (const p of await processes()) if (p.cmdline.includes(token)) groups.add(p.pgid);
  return groups;
}

/** Live (not zombie) processes: pid, process group and command line. */
async function processes(): Promise<{ pid: number; pgid: number; cmdline: string }[]> {
  const out = [];
  for await (const entry of Deno.readDir("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    try {
      const stat = await Deno.readTextFile(`/proc/${entry.name}/stat`);
      // After "pid (comm) ": state, ppid, pgrp, ...
      const [state, , pgrp] = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (state === "Z") continue;
      const cmdline = await Deno.readTextFile(`/proc/${entry.name}/cmdline`);
      out.push({ pid: Number(entry.name), pgid: Number(pgrp), cmdline });
    } catch {
      // The process ended while we looked.
    }
  }
  return out;
}

Deno.test("the Edge cancels a command's run at its timeout_ms: failed/TIMEOUT, the node's run cancelled, no process left", async () => {
  await using cp = await startCp();
  await using edge = await startCpEdge({ edgeId: "edge-a", cpAddress: cp.wireAddress });
  await until("edge attached", () => cp.registry.get("edge-a")?.status?.nodes[0]?.connected);
  const finished: { runId: string; status: string }[] = [];
  const off = edge.service.subscribe((e) => {
    if (e.type === "run_finished") finished.push({ runId: e.runId, status: e.status });
  });
  const token = `deadline-${crypto.randomUUID()}`;
  const started = performance.now();
  const id = await submit(cp, { run: { adapter: "cli", target: "slow", prompt: token } }, 1_500);

  const command = cp.commands.get(id)!;
  await until(
    "the run prints started",
    () => command.edges.get("edge-a")?.progress.some((p) => p.message === "started"),
  );
  const groups = await groupsRunning(token);
  assert.equal(groups.size, 1, "the profile's shell runs in one process group");
  const [pgid] = [...groups];
  const own = (await processes()).find((p) => p.pid === Deno.pid)?.pgid;
  assert.notEqual(pgid, own, "the CLI runs in its own process group");

  await until("the command ends", () => command.outcome !== "running", 10_000);
  const elapsed = performance.now() - started;
  const share = command.edges.get("edge-a")!;
  assert.equal(command.outcome, "failed");
  assert.equal(share.status, "failed");
  assert.equal(share.late, false, "answered within the Control Plane's grace");
  assert.equal(share.result?.error?.code, "TIMEOUT");
  assert.equal(share.result?.error?.retryable, false);
  assert.equal(
    share.result?.error?.message,
    "Cannot finish the command within its deadline of 1500 ms: cancelled at the deadline",
  );
  assert.ok(elapsed >= 1_500 && elapsed < 6_000, `answered at the deadline (${elapsed} ms)`);
  const runId = share.result?.runId ?? "";
  assert.match(runId, /^run_/);
  await until("the node's run ends", () => finished.find((f) => f.runId === runId));
  assert.equal(finished.find((f) => f.runId === runId)?.status, "cancelled");
  await until(
    "no process of the run is left",
    async () => (await processes()).every((p) => p.pgid !== pgid),
  );
  off();
});

Deno.test("a Control Plane deadline on a slow deploy records the share unknown, then the late result completes it", async () => {
  // No grace: the Control Plane gives up at the deadline itself, just before the Edge answers.
  await using cp = await startCp(0);
  await using _edge = await startCpEdge({ edgeId: "edge-a", cpAddress: cp.wireAddress });
  await until("edge attached", () => cp.registry.get("edge-a")?.status?.nodes[0]?.connected);
  const updates: CommandUpdate[] = [];
  const whileUnknown: Json[] = [];
  cp.commands.subscribe((u) => {
    updates.push(u);
    if (u.shareStatus !== "unknown") return;
    // After the share is settled and audited, before any late answer can arrive.
    queueMicrotask(() =>
      whileUnknown.push({
        outcome: cp.commands.get(u.commandId)?.outcome,
        audit: cp.audit.get(u.commandId),
      })
    );
  });
  const id = await submit(cp, {
    agent: { agentId: "deployer", command: "slow", input: "v3" },
  }, 1_000);

  const results = () => updates.filter((u) => u.commandId === id && u.update.case === "result");
  await until("the late result", () => results().length >= 2 || undefined, 10_000);
  const [unknown, late] = results();
  assert.deepEqual([unknown?.shareStatus, unknown?.late], ["unknown", false]);
  const unknownResult = unknown?.update.case === "result" ? unknown.update.value : undefined;
  assert.equal(unknownResult?.status, "unknown");
  assert.deepEqual(
    [unknownResult?.error?.code, unknownResult?.error?.retryable],
    ["TIMEOUT", false],
  );
  assert.equal(whileUnknown[0]?.outcome, "unknown");
  assert.equal(whileUnknown[0]?.audit?.outcome, "unknown");
  assert.equal(whileUnknown[0]?.audit?.results["edge-a"]?.status, "unknown");
  assert.equal(whileUnknown[0]?.audit?.results["edge-a"]?.retryable, false);

  assert.deepEqual([late?.shareStatus, late?.late], ["failed", true]);
  const record: Json = await getJson(`${cp.httpUrl}/commands/${id}`);
  assert.equal(record.outcome, "failed");
  const share = record.edges["edge-a"];
  assert.deepEqual([share.status, share.late, share.retryable], ["failed", true, false]);
  assert.equal(share.result.error.code, "TIMEOUT");
  assert.match(share.result.error.message, /cancelled at the deadline/);
  assert.ok(share.learnedAtMs >= record.finishedAtMs, "learned after the command first ended");

  const audit: Json = await getJson(`${cp.httpUrl}/audit`);
  const row = audit.records.find((r: Json) => r.commandId === id);
  assert.equal(row.outcome, "failed");
  assert.deepEqual(
    [row.results["edge-a"].status, row.results["edge-a"].late, row.results["edge-a"].errorCode],
    ["failed", true, "TIMEOUT"],
  );
  assert.equal(row.results["edge-a"].learnedAtMs, share.learnedAtMs);

  const report: Json = await getJson(`${cp.httpUrl}/report`);
  assert.equal(report.commands.outcomes.failed, 1);
  assert.deepEqual(report.commands.unknown, []);
  assert.deepEqual(
    report.commands.late.map((l: Json) => [l.commandId, l.edgeId, l.status]),
    [[id, "edge-a", "failed"]],
  );
  const metrics = await (await fetch(`${cp.httpUrl}/metrics`)).text();
  assert.match(metrics, /iop_cp_command_late_results_total\{kind="agent",status="failed"\} 1/);
});

Deno.test("a link lost mid-command makes the share unknown, not retryable, until the Edge's answer arrives over its next link", async () => {
  await using cp = await startCp();
  await using _edge = await startCpEdge({ edgeId: "edge-a", cpAddress: cp.wireAddress });
  await until("edge attached", () => cp.registry.get("edge-a")?.status?.nodes[0]?.connected);
  const token = `lost-${crypto.randomUUID()}`;
  const id = await submit(cp, { run: { adapter: "cli", target: "slow", prompt: token } }, 2_500);
  const command = cp.commands.get(id)!;
  await until(
    "the run prints started",
    () => command.edges.get("edge-a")?.progress.some((p) => p.message === "started"),
  );

  cp.registry.link("edge-a")!.close("test drops the link");
  await until("the share is unknown", () => command.edges.get("edge-a")?.status === "unknown");
  const record: Json = await getJson(`${cp.httpUrl}/commands/${id}`);
  assert.equal(record.outcome, "unknown");
  assert.deepEqual(
    [record.edges["edge-a"].status, record.edges["edge-a"].retryable],
    ["unknown", false],
  );
  assert.equal(record.edges["edge-a"].result.error.code, "UNAVAILABLE");
  assert.match(record.edges["edge-a"].result.summary, /edge link lost while the command ran/);
  const audit: Json = await getJson(`${cp.httpUrl}/audit`);
  const row = audit.records.find((r: Json) => r.commandId === id);
  assert.deepEqual([row.outcome, row.results["edge-a"].status], ["unknown", "unknown"]);
  assert.equal(row.results["edge-a"].retryable, false);
  const report: Json = await getJson(`${cp.httpUrl}/report`);
  assert.deepEqual(
    report.commands.unknown.map((u: Json) => [u.commandId, u.edgeId]),
    [[id, "edge-a"]],
  );
  assert.equal(report.commands.outcomes.unknown, 1);
  assert.ok((await groupsRunning(token)).size > 0, "the Edge keeps running it meanwhile");

  await until(
    "the Edge's answer over its next link",
    () => command.edges.get("edge-a")?.late,
    10_000,
  );
  const share = command.edges.get("edge-a")!;
  assert.equal(share.status, "failed");
  assert.equal(share.result?.error?.code, "TIMEOUT");
  assert.equal(command.outcome, "failed");
  const after: Json = await getJson(`${cp.httpUrl}/audit`);
  const updated = after.records.find((r: Json) => r.commandId === id);
  assert.deepEqual(
    [updated.outcome, updated.results["edge-a"].status, updated.results["edge-a"].late],
    ["failed", "failed", true],
  );
  await until("no process of the run is left", async () => (await groupsRunning(token)).size === 0);
});
