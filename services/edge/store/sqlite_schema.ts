/**
 * How the Edge opens each of its SQLite files (the A2A task store, the response store): a
 * 2 s busy timeout, the schema migrated on open from `PRAGMA user_version` (one transaction
 * for all pending steps; a file written by a newer Edge is refused), then write-ahead logging
 * with `synchronous = NORMAL`, so a write commits without an fsync of its own (the log is synced
 * at checkpoints: a power cut may lose the last commits, never corrupt the file).
 * @module
 */
import { DatabaseSync } from "node:sqlite";
import { IopError } from "../../../shared/errors.ts";

/** What {@linkcode openSqlite} opens. */
export interface SqliteSchema {
  /** What the file holds, for errors: `A2A task store`, `response store`. */
  what: string;
  /** Schema steps; entry `i` takes the file from version `i` to `i + 1`. Append, never edit. */
  migrations: readonly string[];
}

function migrate(db: DatabaseSync, path: string, schema: SqliteSchema): void {
  const { user_version: version } = db.prepare("PRAGMA user_version").get() as {
    user_version: number;
  };
  const latest = schema.migrations.length;
  if (version > latest) {
    throw new IopError(
      "INTERNAL",
      `Cannot open ${schema.what} '${path}' as its schema version ${version} is newer than ` +
        `this Edge's ${latest}`,
    );
  }
  if (version === latest) return;
  db.exec("BEGIN");
  try {
    for (const step of schema.migrations.slice(version)) db.exec(step);
    db.exec(`PRAGMA user_version = ${latest}`);
    db.exec("COMMIT");
  } catch (err) {
    db.exec("ROLLBACK");
    throw err;
  }
}

/** Opens (creating or migrating) the SQLite file at `path`; `":memory:"` works too. */
export function openSqlite(path: string, schema: SqliteSchema): DatabaseSync {
  const db = new DatabaseSync(path);
  try {
    db.exec("PRAGMA busy_timeout = 2000");
    migrate(db, path, schema);
    db.exec("PRAGMA journal_mode = WAL");
    db.exec("PRAGMA synchronous = NORMAL");
  } catch (err) {
    db.close();
    throw err;
  }
  return db;
}
