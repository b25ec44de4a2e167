/**
 * The Edge's A2A task store: one SQLite file holding each task as JSON next to the columns that
 * retention, recovery and ownership query, opened and migrated as `sqlite_schema.ts` says.
 *
 * Schema history: 1 = the `tasks` table; 2 = the `owner` column (the tenant that created the
 * task). Rows of a version-1 file get the owner `''` (`LEGACY_OWNER`: readable by the tenants
 * `default` and `anonymous`, which are the callers that could reach them before tenants).
 * @module
 */
import { openSqlite } from "./sqlite_schema.ts";
import type { A2aTaskStore } from "../a2a/task_store.ts";
import type { A2aTask } from "../a2a/task_model.ts";

/** Schema steps; entry `i` takes the file from version `i` to `i + 1`. Append, never edit. */
const MIGRATIONS: readonly string[] = [
  `CREATE TABLE tasks (
     id TEXT PRIMARY KEY,
     agent_id TEXT NOT NULL,
     context_id TEXT NOT NULL,
     state TEXT NOT NULL,
     created_at_ms INTEGER NOT NULL,
     updated_at_ms INTEGER NOT NULL,
     body TEXT NOT NULL
   );
   CREATE INDEX tasks_by_update ON tasks (updated_at_ms);`,
  `ALTER TABLE tasks ADD COLUMN owner TEXT NOT NULL DEFAULT '';
   CREATE INDEX tasks_by_owner ON tasks (owner, agent_id);`,
];

/** States after which a task never changes (as `task_model.ts` spells them). */
const FINISHED_STATES = "('completed', 'canceled', 'failed', 'rejected')";

/** Opens (creating or migrating) the task store at `path`; `":memory:"` works too. */
export function openA2aTaskStore(path: string): A2aTaskStore {
  const db = openSqlite(path, { what: "A2A task store", migrations: MIGRATIONS });
  // The owner is written once: a later put never moves a task to another tenant.
  const upsert = db.prepare(
    `INSERT INTO tasks (id, agent_id, context_id, state, created_at_ms, updated_at_ms, body, owner)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?)
     ON CONFLICT (id) DO UPDATE SET state = excluded.state,
       updated_at_ms = excluded.updated_at_ms, body = excluded.body`,
  );
  const all = db.prepare("SELECT owner, body FROM tasks ORDER BY created_at_ms, rowid");
  const purge = db.prepare(
    `DELETE FROM tasks WHERE updated_at_ms < ? AND state IN ${FINISHED_STATES}`,
  );
  const remove = db.prepare("DELETE FROM tasks WHERE id = ?");
  return {
    put(task: A2aTask) {
      const { owner, ...body } = task;
      upsert.run(
        task.id,
        task.agentId,
        task.contextId,
        task.status.state,
        task.createdAtMs,
        task.status.timestampMs,
        JSON.stringify(body),
        owner,
      );
    },
    loadAll() {
      return (all.all() as { owner: string; body: string }[]).map((row) => ({
        ...(JSON.parse(row.body) as Omit<A2aTask, "owner">),
        owner: row.owner,
      }));
    },
    deleteFinishedBefore(ms: number) {
      return Number(purge.run(ms).changes);
    },
    delete(ids: readonly string[]) {
      if (ids.length === 0) return 0;
      let n = 0;
      db.exec("BEGIN");
      try {
        for (const id of ids) n += Number(remove.run(id).changes);
        db.exec("COMMIT");
      } catch (err) {
        db.exec("ROLLBACK");
        throw err;
      }
      return n;
    },
    close() {
      if (db.isOpen) db.close();
    },
  };
}
