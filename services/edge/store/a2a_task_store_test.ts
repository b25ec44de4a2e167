import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { IopError } from "../../../shared/errors.ts";
import type { A2aTask } from "../a2a/task_model.ts";
import { LEGACY_OWNER } from "../a2a/task_model.ts";
import { openA2aTaskStore } from "./a2a_task_store.ts";

function task(id: string, owner: string, state: A2aTask["status"]["state"], atMs: number): A2aTask {
  return {
    id,
    contextId: `ctx-${id}`,
    agentId: "echo",
    owner,
    status: { state, timestampMs: atMs },
    artifacts: [],
    history: [],
    createdAtMs: atMs,
    runId: "",
  };
}

/** A file as an Edge before tenants wrote it: schema version 1, no owner column. */
function writeVersionOne(path: string): void {
  const db = new DatabaseSync(path);
  db.exec(`CREATE TABLE tasks (
     id TEXT PRIMARY KEY,
     agent_id TEXT NOT NULL,
     context_id TEXT NOT NULL,
     state TEXT NOT NULL,
     created_at_ms INTEGER NOT NULL,
     updated_at_ms INTEGER NOT NULL,
     body TEXT NOT NULL
   );
   CREATE INDEX tasks_by_update ON tasks (updated_at_ms);
   PRAGMA user_version = 1;`);
  const { owner: _owner, ...body } = task("old", "", "completed", 1000);
  db.prepare("INSERT INTO tasks VALUES (?, ?, ?, ?, ?, ?, ?)").run(
    "old",
    "echo",
    "ctx-old",
    "completed",
    1000,
    1000,
    JSON.stringify(body),
  );
  db.close();
}

Deno.test("opening a version-1 file adds the owner column, and its old rows get the legacy owner", async () => {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/a2a.db`;
  writeVersionOne(path);
  const store = openA2aTaskStore(path);
  assert.deepEqual(store.loadAll().map((t) => [t.id, t.owner]), [["old", LEGACY_OWNER]]);
  store.put(task("new", "alpha", "working", 2000));
  store.close();

  const db = new DatabaseSync(path);
  const { user_version } = db.prepare("PRAGMA user_version").get() as { user_version: number };
  const columns = (db.prepare("PRAGMA table_info(tasks)").all() as { name: string }[]).map((c) =>
    c.name
  );
  db.close();
  assert.equal(user_version, 2);
  assert.ok(columns.includes("owner"));

  const again = openA2aTaskStore(path);
  assert.deepEqual(again.loadAll().map((t) => [t.id, t.owner]), [["old", ""], ["new", "alpha"]]);
  again.close();
  await Deno.remove(dir, { recursive: true });
});

Deno.test("a task's owner is kept from its first put: a later put cannot move it to another tenant", () => {
  const store = openA2aTaskStore(":memory:");
  store.put(task("t1", "alpha", "working", 1000));
  store.put(task("t1", "beta", "completed", 2000));
  const [stored] = store.loadAll();
  assert.equal(stored?.owner, "alpha");
  assert.equal(stored?.status.state, "completed");
  store.close();
});

Deno.test("deleteFinishedBefore() keeps unfinished tasks however old, and delete() removes by id", () => {
  const store = openA2aTaskStore(":memory:");
  store.put(task("running", "alpha", "working", 1000));
  store.put(task("done", "alpha", "completed", 1000));
  store.put(task("failed", "alpha", "failed", 1000));
  store.put(task("recent", "alpha", "canceled", 5000));
  assert.equal(store.deleteFinishedBefore(2000), 2);
  assert.deepEqual(store.loadAll().map((t) => t.id), ["running", "recent"]);
  assert.equal(store.delete(["recent", "absent"]), 1);
  assert.deepEqual(store.loadAll().map((t) => t.id), ["running"]);
  assert.equal(store.delete([]), 0);
  store.close();
});

Deno.test("a file from a newer Edge is refused with its version named", async () => {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/a2a.db`;
  const db = new DatabaseSync(path);
  db.exec("PRAGMA user_version = 99");
  db.close();
  assert.throws(() => openA2aTaskStore(path), (err: unknown) => {
    assert.ok(err instanceof IopError);
    assert.match(err.message, /schema version 99 is newer than this Edge's 2/);
    return true;
  });
  await Deno.remove(dir, { recursive: true });
});
