import assert from "node:assert/strict";
import { openAuditStore } from "./audit_store.ts";
import type { AuditRecord } from "../ports.ts";

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
      "edge-a": { status: "succeeded", summary: "ok", errorCode: "" },
      "edge-b": { status: "failed", summary: "down", errorCode: "UNAVAILABLE" },
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
