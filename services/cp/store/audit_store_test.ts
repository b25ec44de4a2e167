import assert from "node:assert/strict";
import { openAuditStore } from "./audit_store.ts";
import type { AuditEdgeResult, AuditRecord, ShareStatus } from "../ports.ts";

const share = (status: ShareStatus, summary: string, errorCode: string): AuditEdgeResult => ({
  status,
  summary,
  errorCode,
  retryable: false,
  late: false,
  learnedAtMs: 15,
});

const record = (commandId: string, createdAtMs: number): AuditRecord => ({
  commandId,
  actor: "alice",
  via: "http",
  kind: "reload",
  detail: "reload",
  edges: ["edge-a", "edge-b"],
  createdAtMs,
  finishedAtMs: 0,
  outcome: "running",
  results: {},
});

Deno.test("audit rows survive reopening the file, and rows left running are marked interrupted", async () => {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/audit.sqlite`;
  try {
    const first = openAuditStore(path, 1_000);
    first.begin(record("cmd_done", 10));
    first.begin(record("cmd_open", 20));
    first.finish("cmd_done", "partial", 15, {
      "edge-a": share("succeeded", "ok", ""),
      "edge-b": share("failed", "down", "UNAVAILABLE"),
    });
    first.close();

    const second = openAuditStore(path, 2_000);
    const rows = second.recent(10);
    second.close();
    assert.deepEqual(rows.map((r) => [r.commandId, r.outcome, r.finishedAtMs]), [
      ["cmd_open", "interrupted", 2_000],
      ["cmd_done", "partial", 15],
    ]);
    assert.deepEqual(rows[1]!.edges, ["edge-a", "edge-b"]);
    assert.equal(rows[1]!.results["edge-b"]!.errorCode, "UNAVAILABLE");
    assert.equal(rows[1]!.actor, "alice");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("recent() returns the newest audit rows first, at most the limit", () => {
  const store = openAuditStore(":memory:");
  for (let i = 0; i < 5; i++) store.begin(record(`cmd_${i}`, i));
  assert.deepEqual(store.recent(2).map((r) => r.commandId), ["cmd_4", "cmd_3"]);
  store.close();
});

Deno.test("update() rewrites a finished row's outcome and results when a late answer arrives", () => {
  const store = openAuditStore(":memory:");
  store.begin(record("cmd_late", 1));
  store.finish("cmd_late", "unknown", 50, {
    "edge-a": share("succeeded", "ok", ""),
    "edge-b": share("unknown", "no result within 10 ms", "TIMEOUT"),
  });
  assert.equal(store.get("cmd_late")?.outcome, "unknown");
  store.update("cmd_late", "succeeded", {
    "edge-a": share("succeeded", "ok", ""),
    "edge-b": { ...share("succeeded", "deployed", ""), late: true, learnedAtMs: 90 },
  });
  const row = store.get("cmd_late");
  assert.equal(row?.outcome, "succeeded");
  assert.equal(row?.finishedAtMs, 50, "the first end stays");
  assert.deepEqual(row?.results["edge-b"], {
    status: "succeeded",
    summary: "deployed",
    errorCode: "",
    retryable: false,
    late: true,
    learnedAtMs: 90,
  });
  assert.equal(store.get("cmd_none"), undefined);
  store.close();
});

Deno.test("recent() filters by actor, target edge, outcome, kind and time, all at once", () => {
  const audit = openAuditStore(":memory:");
  try {
    audit.begin(record("c1", 1));
    audit.begin({ ...record("c2", 2), actor: "bob", kind: "run", edges: ["edge-b"] });
    audit.begin({ ...record("c3", 3), edges: ["edge-c", "edge-ab"] });
    audit.finish("c1", "succeeded", 5, {});
    audit.finish("c2", "failed", 6, {});
    const ids = (filter: Parameters<typeof audit.recent>[1]) =>
      audit.recent(10, filter).map((r) => r.commandId);
    assert.deepEqual(ids({}), ["c3", "c2", "c1"]);
    assert.deepEqual(ids({ actor: "alice" }), ["c3", "c1"]);
    // An edge is matched as a whole id, never as part of another.
    assert.deepEqual(ids({ edge: "edge-a" }), ["c1"]);
    assert.deepEqual(ids({ edge: "edge-b" }), ["c2", "c1"]);
    assert.deepEqual(ids({ outcome: "running" }), ["c3"]);
    assert.deepEqual(ids({ kind: "run" }), ["c2"]);
    assert.deepEqual(ids({ beforeMs: 3 }), ["c2", "c1"]);
    assert.deepEqual(ids({ actor: "alice", edge: "edge-b", outcome: "succeeded" }), ["c1"]);
    assert.deepEqual(ids({ actor: "bob", outcome: "succeeded" }), []);
    assert.deepEqual(audit.recent(1, { actor: "alice" }).map((r) => r.commandId), ["c3"]);
  } finally {
    audit.close();
  }
});
