import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { IopError } from "../../../shared/errors.ts";
import { openSqlite } from "./sqlite_schema.ts";

const SCHEMA = {
  what: "test store",
  migrations: [
    "CREATE TABLE t (id TEXT PRIMARY KEY);",
    "ALTER TABLE t ADD COLUMN n INTEGER NOT NULL DEFAULT 0;",
  ],
};

Deno.test("openSqlite migrates a new file, then opens it in WAL mode with synchronous NORMAL", async () => {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/t.db`;
  const db = openSqlite(path, SCHEMA);
  db.prepare("INSERT INTO t (id, n) VALUES ('a', 1)").run();
  const pragma = (name: string) => Object.values(db.prepare(`PRAGMA ${name}`).get()!)[0];
  assert.equal(pragma("user_version"), 2);
  assert.equal(pragma("journal_mode"), "wal");
  assert.equal(pragma("synchronous"), 1); // NORMAL
  db.close();
  // Reopened at the latest version: no step runs again (the ALTER would fail if it did).
  const again = openSqlite(path, SCHEMA);
  assert.deepEqual({ ...again.prepare("SELECT id, n FROM t").get() }, { id: "a", n: 1 });
  again.close();
  await Deno.remove(dir, { recursive: true });
});

Deno.test("openSqlite refuses a newer file, and rolls back a failing step leaving the old version", async () => {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/t.db`;
  openSqlite(path, { ...SCHEMA, migrations: SCHEMA.migrations.slice(0, 1) }).close();
  const broken = { ...SCHEMA, migrations: [SCHEMA.migrations[0]!, "ALTER TABLE nope ADD x;"] };
  assert.throws(() => openSqlite(path, broken), /no such table: nope/);
  const raw = new DatabaseSync(path);
  assert.equal(Object.values(raw.prepare("PRAGMA user_version").get()!)[0], 1);
  raw.exec("PRAGMA user_version = 9");
  raw.close();
  assert.throws(() => openSqlite(path, SCHEMA), (err: unknown) => {
    assert.ok(err instanceof IopError);
    assert.match(
      err.message,
      /Cannot open test store '.*' as its schema version 9 is newer than this Edge's 2/,
    );
    return true;
  });
  await Deno.remove(dir, { recursive: true });
});
