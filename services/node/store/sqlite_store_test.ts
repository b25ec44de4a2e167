import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { IopError } from "../../../shared/errors.ts";
import {
  openRunStore,
  OUTPUT_SUMMARY_CHARS,
  SCHEMA_VERSION,
  WRITE_BEHIND_MS,
} from "./sqlite_store.ts";

async function tempDbPath(): Promise<{ path: string } & AsyncDisposable> {
  const dir = await Deno.makeTempDir({ prefix: "iop_run_store_" });
  return {
    path: `${dir}/runs.db`,
    [Symbol.asyncDispose]: () => Deno.remove(dir, { recursive: true }),
  };
}

const run = (runId: string, startedAtMs: number) => ({
  runId,
  adapter: "mock",
  target: "echo",
  startedAtMs,
});

Deno.test("a completed run is read back with every recorded field", async () => {
  await using tmp = await tempDbPath();
  const store = openRunStore(tmp.path);
  store.startRun(run("r1", 1_000));
  store.completeRun("r1", {
    status: "completed",
    finishedAtMs: 1_500,
    firstOutputAtMs: 1_100,
    usage: { inputTokens: 3, outputTokens: 7 },
    outputSummary: "hello world",
    exitCode: 0,
  });
  assert.deepEqual(store.history(10), [{
    runId: "r1",
    adapter: "mock",
    target: "echo",
    status: "completed",
    startedAtMs: 1_000,
    firstOutputAtMs: 1_100,
    finishedAtMs: 1_500,
    usage: { inputTokens: 3, outputTokens: 7 },
    outputSummary: "hello world",
    exitCode: 0,
  }]);
  store.close();
});

Deno.test("a failed run keeps its error code, message and retryability", async () => {
  await using tmp = await tempDbPath();
  const store = openRunStore(tmp.path);
  store.startRun(run("r1", 1_000));
  store.completeRun("r1", {
    status: "failed",
    finishedAtMs: 2_000,
    error: new IopError("BACKEND_ERROR", "CLI profile 'x' exited with code 3: boom", {
      exitCode: 3,
    }),
    outputSummary: "",
    exitCode: 3,
  });
  store.startRun(run("r2", 3_000));
  store.completeRun("r2", {
    status: "failed",
    finishedAtMs: 3_100,
    error: new IopError("UNAVAILABLE", "backend down"),
    outputSummary: "",
  });
  const [second, first] = store.history(10);
  assert.deepEqual(first?.error, {
    code: "BACKEND_ERROR",
    message: "CLI profile 'x' exited with code 3: boom",
    retryable: false,
  });
  assert.equal(first?.exitCode, 3);
  assert.deepEqual(second?.error, {
    code: "UNAVAILABLE",
    message: "backend down",
    retryable: true,
  });
  assert.equal(second?.usage, undefined);
  store.close();
});

Deno.test("a running run has only its start fields", async () => {
  await using tmp = await tempDbPath();
  const store = openRunStore(tmp.path);
  store.startRun(run("r1", 1_000));
  assert.deepEqual(store.history(1), [{
    runId: "r1",
    adapter: "mock",
    target: "echo",
    status: "running",
    startedAtMs: 1_000,
    outputSummary: "",
  }]);
  store.close();
});

Deno.test("history lists the newest runs first, up to the limit", async () => {
  await using tmp = await tempDbPath();
  const store = openRunStore(tmp.path);
  store.startRun(run("old", 1_000));
  store.startRun(run("newest", 3_000));
  store.startRun(run("middle", 2_000));
  assert.deepEqual(store.history(2).map((r) => r.runId), ["newest", "middle"]);
  assert.deepEqual(store.history(10).map((r) => r.runId), ["newest", "middle", "old"]);
  assert.deepEqual(store.history(0), []);
  assert.throws(() => store.history(-1), RangeError);
  store.close();
});

Deno.test("runs survive closing and reopening the file", async () => {
  await using tmp = await tempDbPath();
  const first = openRunStore(tmp.path);
  first.startRun(run("r1", 1_000));
  first.completeRun("r1", { status: "completed", finishedAtMs: 1_200, outputSummary: "ok" });
  first.close();
  const second = openRunStore(tmp.path);
  second.startRun(run("r2", 2_000));
  assert.deepEqual(second.history(10).map((r) => [r.runId, r.status]), [
    ["r2", "running"],
    ["r1", "completed"],
  ]);
  second.close();
});

Deno.test("markInterrupted ends runs left running by a previous process", async () => {
  await using tmp = await tempDbPath();
  const crashed = openRunStore(tmp.path);
  crashed.startRun(run("done", 1_000));
  crashed.completeRun("done", { status: "completed", finishedAtMs: 1_100, outputSummary: "" });
  crashed.startRun(run("left-a", 2_000));
  crashed.startRun(run("left-b", 3_000));
  crashed.close();

  const restarted = openRunStore(tmp.path);
  assert.equal(restarted.markInterrupted(9_000), 2);
  const byId = new Map(restarted.history(10).map((r) => [r.runId, r]));
  assert.equal(byId.get("left-a")?.status, "interrupted");
  assert.equal(byId.get("left-b")?.finishedAtMs, 9_000);
  assert.equal(byId.get("done")?.status, "completed");
  assert.equal(byId.get("done")?.finishedAtMs, 1_100);
  assert.equal(restarted.markInterrupted(9_500), 0);
  restarted.close();
});

Deno.test("the output summary keeps the first 2,000 characters", async () => {
  await using tmp = await tempDbPath();
  const store = openRunStore(tmp.path);
  store.startRun(run("r1", 1_000));
  const output = "a".repeat(OUTPUT_SUMMARY_CHARS - 1) + "😀" + "tail";
  store.completeRun("r1", { status: "completed", finishedAtMs: 1_001, outputSummary: output });
  const summary = store.history(1)[0]?.outputSummary ?? "";
  // The emoji straddles the limit: the summary drops it instead of keeping half a pair.
  assert.equal(summary, "a".repeat(OUTPUT_SUMMARY_CHARS - 1));
  store.close();
});

Deno.test("starting a run twice is INVALID_ARGUMENT; completing an unknown one NOT_FOUND", async () => {
  await using tmp = await tempDbPath();
  const store = openRunStore(tmp.path);
  store.startRun(run("r1", 1_000));
  assert.throws(() => store.startRun(run("r1", 1_001)), (e) => {
    assert.ok(e instanceof IopError);
    assert.equal(e.code, "INVALID_ARGUMENT");
    assert.equal(e.message, "Cannot start run 'r1' as it is already recorded");
    return true;
  });
  assert.throws(
    () => store.completeRun("nope", { status: "cancelled", finishedAtMs: 1, outputSummary: "" }),
    (e) => e instanceof IopError && e.code === "NOT_FOUND" && /'nope'/.test(e.message),
  );
  store.close();
});

Deno.test("the file is in WAL mode and carries the schema version", async () => {
  await using tmp = await tempDbPath();
  openRunStore(tmp.path).close();
  const db = new DatabaseSync(tmp.path);
  try {
    assert.deepEqual({ ...db.prepare("PRAGMA journal_mode").get() }, { journal_mode: "wal" });
    assert.deepEqual({ ...db.prepare("PRAGMA user_version").get() }, {
      user_version: SCHEMA_VERSION,
    });
  } finally {
    db.close();
  }
});

Deno.test("opening a file written by a newer schema fails without touching it", async () => {
  await using tmp = await tempDbPath();
  const db = new DatabaseSync(tmp.path);
  db.exec(`PRAGMA user_version = ${SCHEMA_VERSION + 1}`);
  db.close();
  assert.throws(() => openRunStore(tmp.path), (e) => {
    assert.ok(e instanceof IopError);
    assert.equal(e.code, "INTERNAL");
    assert.match(
      e.message,
      new RegExp(
        `schema version ${SCHEMA_VERSION + 1} is newer than this Node's ${SCHEMA_VERSION}`,
      ),
    );
    return true;
  });
  const check = new DatabaseSync(tmp.path);
  try {
    assert.deepEqual({ ...check.prepare("PRAGMA user_version").get() }, {
      user_version: SCHEMA_VERSION + 1,
    });
    assert.deepEqual({ ...check.prepare("PRAGMA journal_mode").get() }, { journal_mode: "delete" });
    assert.equal(check.prepare("SELECT name FROM sqlite_master").all().length, 0);
  } finally {
    check.close();
  }
});

Deno.test("close is idempotent", () => {
  const store = openRunStore(":memory:");
  store.close();
  store.close();
});

/** Rows of the file as another process sees them. */
function rowsOnDisk(path: string): { run_id: string; status: string }[] {
  const db = new DatabaseSync(path, { readOnly: true });
  try {
    const rows = db.prepare("SELECT run_id, status FROM runs ORDER BY rowid").all();
    return rows.map((r) => ({ run_id: String(r.run_id), status: String(r.status) }));
  } finally {
    db.close();
  }
}

Deno.test("runs are written behind, together, when the write-behind flush comes", async () => {
  await using tmp = await tempDbPath();
  const due: (() => void)[] = [];
  const store = openRunStore(tmp.path, {
    scheduleFlush: (flush) => {
      due.push(flush);
      return () => {};
    },
  });
  for (let i = 0; i < 50; i++) {
    store.startRun(run(`r${i}`, 1_000 + i));
    if (i % 2 === 0) {
      store.completeRun(`r${i}`, { status: "completed", finishedAtMs: 2_000, outputSummary: "" });
    }
  }
  assert.deepEqual(rowsOnDisk(tmp.path), [], "nothing is written on the runs' path");
  assert.equal(due.length, 1, "one flush is scheduled for the whole burst");
  due.shift()!();
  const rows = rowsOnDisk(tmp.path);
  assert.equal(rows.length, 50);
  assert.equal(rows.filter((r) => r.status === "completed").length, 25);
  assert.equal(rows.filter((r) => r.status === "running").length, 25);
  // Runs whose start is already on disk are completed by an update.
  store.completeRun("r1", { status: "failed", finishedAtMs: 3_000, outputSummary: "" });
  assert.equal(store.history(100).find((r) => r.runId === "r1")?.status, "failed");
  store.close();
});

Deno.test("the default write-behind timer writes the queue within its delay", async () => {
  await using tmp = await tempDbPath();
  const store = openRunStore(tmp.path);
  store.startRun(run("r1", 1_000));
  await new Promise((resolve) => setTimeout(resolve, WRITE_BEHIND_MS * 3));
  assert.deepEqual(rowsOnDisk(tmp.path), [{ run_id: "r1", status: "running" }]);
  store.close();
});

Deno.test("close writes the queued runs, so a graceful stop loses none", async () => {
  await using tmp = await tempDbPath();
  const store = openRunStore(tmp.path);
  store.startRun(run("queued", 1_000));
  store.completeRun("queued", { status: "cancelled", finishedAtMs: 1_100, outputSummary: "x" });
  store.startRun(run("open", 1_200));
  store.close();
  assert.deepEqual(rowsOnDisk(tmp.path), [
    { run_id: "queued", status: "cancelled" },
    { run_id: "open", status: "running" },
  ]);
});

Deno.test("a scheduled write that fails is reported, not thrown, and its runs are kept", async () => {
  await using tmp = await tempDbPath();
  const due: (() => void)[] = [];
  const errors: unknown[] = [];
  const store = openRunStore(tmp.path, {
    scheduleFlush: (flush) => {
      due.push(flush);
      return () => {};
    },
    onWriteError: (err) => errors.push(err),
  });
  store.startRun(run("r1", 1_000));
  // Another process holds the write lock longer than the store waits for it.
  const other = new DatabaseSync(tmp.path);
  other.exec("PRAGMA busy_timeout = 0");
  other.exec("BEGIN EXCLUSIVE");
  try {
    due.shift()!();
  } finally {
    other.exec("ROLLBACK");
    other.close();
  }
  assert.equal(errors.length, 1);
  assert.ok(errors[0] instanceof IopError && errors[0].code === "INTERNAL", String(errors[0]));
  assert.deepEqual(store.history(10).map((r) => [r.runId, r.status]), [["r1", "running"]]);
  store.close();
});

Deno.test("runOutput returns the whole output beside the summary; an unknown run is undefined", async () => {
  await using tmp = await tempDbPath();
  const store = openRunStore(tmp.path);
  const whole = "line of build output\n".repeat(500);
  store.startRun(run("r1", 1_000));
  store.completeRun("r1", {
    status: "completed",
    finishedAtMs: 1_500,
    outputSummary: whole.slice(0, OUTPUT_SUMMARY_CHARS),
    output: whole,
  });
  assert.deepEqual(store.runOutput("r1"), { output: whole, truncated: false });
  assert.equal(store.history(1)[0]?.outputSummary.length, OUTPUT_SUMMARY_CHARS);
  assert.equal(store.runOutput("nope"), undefined);
  store.close();
});

Deno.test("an output beyond the cap is cut at the cap on a character boundary and marked", async () => {
  await using tmp = await tempDbPath();
  const store = openRunStore(tmp.path, { outputCapBytes: 10 });
  store.startRun(run("r1", 1_000));
  // "ab" + four 3-byte characters: the cut at 10 bytes keeps "ab" and two of them (8 bytes).
  store.completeRun("r1", {
    status: "completed",
    finishedAtMs: 1_500,
    outputSummary: "",
    output: "ab€€€€",
  });
  assert.deepEqual(store.runOutput("r1"), {
    output: "ab€€\n[output truncated at 10 bytes]\n",
    truncated: true,
  });
  store.close();
});

Deno.test("an output the core already cut is marked even when it fits the cap", async () => {
  await using tmp = await tempDbPath();
  const store = openRunStore(tmp.path, { outputCapBytes: 1024 });
  store.startRun(run("r1", 1_000));
  store.completeRun("r1", {
    status: "failed",
    finishedAtMs: 1_500,
    outputSummary: "",
    output: "partial\n",
    outputTruncated: true,
  });
  assert.deepEqual(store.runOutput("r1"), {
    output: "partial\n[output truncated at 1024 bytes]\n",
    truncated: true,
  });
  store.close();
});

Deno.test("a history file of schema 1 opens, gains the output columns and keeps its runs", async () => {
  await using tmp = await tempDbPath();
  const old = new DatabaseSync(tmp.path);
  old.exec(`CREATE TABLE runs (
     run_id TEXT PRIMARY KEY, adapter TEXT NOT NULL, target TEXT NOT NULL, status TEXT NOT NULL,
     started_at_ms INTEGER NOT NULL, first_output_at_ms INTEGER, finished_at_ms INTEGER,
     input_tokens INTEGER, output_tokens INTEGER, error_code TEXT, error_message TEXT,
     error_retryable INTEGER, output_summary TEXT NOT NULL DEFAULT '', exit_code INTEGER);
   CREATE INDEX runs_by_start ON runs (started_at_ms DESC);
   CREATE INDEX runs_by_status ON runs (status);
   PRAGMA user_version = 1;`);
  const insert = old.prepare(
    "INSERT INTO runs (run_id, adapter, target, status, started_at_ms, output_summary) " +
      "VALUES (?, 'cli', 'build', 'completed', ?, ?)",
  );
  insert.run("short", 1_000, "done\n");
  insert.run("long", 2_000, "x".repeat(OUTPUT_SUMMARY_CHARS));
  old.close();

  const store = openRunStore(tmp.path);
  assert.deepEqual(store.history(10).map((r) => r.runId), ["long", "short"]);
  assert.deepEqual(store.runOutput("short"), { output: "done\n", truncated: false });
  const long = store.runOutput("long");
  assert.equal(long?.truncated, true);
  assert.match(long?.output ?? "", /^x{2000}\n\[output truncated at 2000 characters: .*\]\n$/);
  store.startRun(run("new", 3_000));
  store.completeRun("new", {
    status: "completed",
    finishedAtMs: 3_100,
    outputSummary: "n",
    output: "n",
  });
  assert.deepEqual(store.runOutput("new"), { output: "n", truncated: false });
  store.close();

  const db = new DatabaseSync(tmp.path);
  try {
    const columns = (db.prepare("PRAGMA table_info(runs)").all() as { name: string }[])
      .map((c) => c.name);
    assert.ok(columns.includes("output") && columns.includes("output_truncated"), `${columns}`);
    assert.deepEqual({ ...db.prepare("PRAGMA user_version").get() }, {
      user_version: SCHEMA_VERSION,
    });
  } finally {
    db.close();
  }
});

Deno.test("a run's trace id is recorded and read back; a run without one has none", async () => {
  await using tmp = await tempDbPath();
  const store = openRunStore(tmp.path);
  const traceId = "0af7651916cd43dd8448eb211c80319c";
  store.startRun({ ...run("traced", 1_000), traceId });
  store.history(10); // written as running first: the outcome is an UPDATE that keeps it
  store.completeRun("traced", { status: "completed", finishedAtMs: 1_100, outputSummary: "" });
  store.startRun({ ...run("quick", 2_000), traceId });
  store.completeRun("quick", { status: "completed", finishedAtMs: 2_100, outputSummary: "" });
  store.startRun(run("plain", 3_000));
  const rows = store.history(10);
  assert.deepEqual(rows.map((r) => [r.runId, r.traceId]), [
    ["plain", undefined],
    ["quick", traceId],
    ["traced", traceId],
  ]);
  assert.ok(!("traceId" in rows[0]!));
  store.close();
});

Deno.test("a history file of schema 2 opens, gains the trace_id column and keeps its runs", async () => {
  await using tmp = await tempDbPath();
  // A file the previous Node wrote: schema 2, no trace ids.
  const before = openRunStore(tmp.path);
  before.startRun(run("old", 1_000));
  before.completeRun("old", { status: "completed", finishedAtMs: 1_100, outputSummary: "o" });
  before.close();
  const old = new DatabaseSync(tmp.path);
  old.exec("ALTER TABLE runs DROP COLUMN trace_id; PRAGMA user_version = 2;");
  old.close();

  const store = openRunStore(tmp.path);
  store.startRun({ ...run("new", 2_000), traceId: "4bf92f3577b34da6a3ce929d0e0e4736" });
  assert.deepEqual(store.history(10).map((r) => [r.runId, r.traceId, r.outputSummary]), [
    ["new", "4bf92f3577b34da6a3ce929d0e0e4736", ""],
    ["old", undefined, "o"],
  ]);
  store.close();
  const db = new DatabaseSync(tmp.path);
  try {
    assert.deepEqual({ ...db.prepare("PRAGMA user_version").get() }, {
      user_version: SCHEMA_VERSION,
    });
  } finally {
    db.close();
  }
});

Deno.test("a history file of schema 3 opens, and the runs it left running are marked interrupted", async () => {
  await using tmp = await tempDbPath();
  // A file the previous Node wrote: schema 3, every row in a status index.
  const before = openRunStore(tmp.path);
  before.startRun(run("done", 1_000));
  before.completeRun("done", { status: "completed", finishedAtMs: 1_100, outputSummary: "" });
  before.startRun(run("left", 2_000));
  before.close();
  const old = new DatabaseSync(tmp.path);
  old.exec(`DROP INDEX runs_running; CREATE INDEX runs_by_status ON runs (status);
    PRAGMA user_version = 3;`);
  old.close();

  const store = openRunStore(tmp.path);
  assert.equal(store.markInterrupted(9_000), 1);
  store.startRun(run("new", 10_000));
  assert.deepEqual(store.history(10).map((r) => [r.runId, r.status]), [
    ["new", "running"],
    ["left", "interrupted"],
    ["done", "completed"],
  ]);
  store.close();
  const reopened = openRunStore(tmp.path);
  assert.equal(reopened.markInterrupted(11_000), 1, "the run left running by the second process");
  reopened.close();
});
