/**
 * The Edge's store of Responses API responses (`store: true`, the default): one SQLite file
 * (WAL) holding each response's answered object and its normalised input items as JSON, next to
 * the columns that ownership, chaining and retention query. Schema version in
 * `PRAGMA user_version`, migrated on open; a file written by a newer Edge is refused.
 *
 * Bounds are read per call from the config in force (`responses.*`): a response older than
 * `retentionMs` is gone (purged as new ones arrive, never answered before), at most `maxStored`
 * are kept (the oldest dropped first), and one larger than `maxResponseBytes` is not stored.
 *
 * Schema history: 1 = the `responses` table.
 * @module
 */
import { DatabaseSync } from "node:sqlite";
import { dirname } from "node:path";
import { IopError } from "../../../shared/errors.ts";

/** Schema steps; entry `i` takes the file from version `i` to `i + 1`. Append, never edit. */
const MIGRATIONS: readonly string[] = [
  `CREATE TABLE responses (
     id TEXT PRIMARY KEY,
     owner TEXT NOT NULL,
     model TEXT NOT NULL,
     status TEXT NOT NULL,
     previous_response_id TEXT,
     created_at_ms INTEGER NOT NULL,
     input TEXT NOT NULL,
     response TEXT NOT NULL
   );
   CREATE INDEX responses_by_age ON responses (created_at_ms);`,
];

/** One stored response. */
export interface StoredResponse {
  /** The response id (`resp_…`). */
  id: string;
  /** The tenant that created it; only it can read, delete or continue it. */
  owner: string;
  model: string;
  /** When it was created, in ms since the epoch (retention counts from here). */
  createdAtMs: number;
  /** `completed`, `incomplete`, `failed` or `cancelled`. */
  status: string;
  previousResponseId: string | null;
  /** Its input items as given, normalised (each with an id), in order; instructions are not items. */
  input: Record<string, unknown>[];
  /** The `response` object as it was answered (its `output` items, `usage`, ...). */
  response: Record<string, unknown>;
}

/** The bounds of the store, read per call so a config reload applies. */
export interface ResponseLimits {
  maxStored: number;
  retentionMs: number;
  maxResponseBytes: number;
}

/** The stored responses; every read is scoped by owner, so another tenant's id is absent. */
export interface ResponseStore {
  /**
   * Stores `response` (its id must be new) and drops what the bounds no longer keep; returns
   * false, storing nothing, when it is larger than `maxResponseBytes`.
   */
  put(response: StoredResponse): boolean;
  /** The response `id` of `owner`; undefined when absent, expired or another tenant's. */
  get(id: string, owner: string): StoredResponse | undefined;
  /** Deletes the response `id` of `owner`; false when there was none to delete. */
  delete(id: string, owner: string): boolean;
  /** How many responses the file holds (expired ones not yet purged included). */
  count(): number;
  close(): void;
}

function migrate(db: DatabaseSync, path: string): void {
  const { user_version: version } = db.prepare("PRAGMA user_version").get() as {
    user_version: number;
  };
  if (version > MIGRATIONS.length) {
    throw new IopError(
      "INTERNAL",
      `Cannot open response store '${path}' as its schema version ${version} is newer than ` +
        `this Edge's ${MIGRATIONS.length}`,
    );
  }
  if (version === MIGRATIONS.length) return;
  db.exec("BEGIN");
  try {
    for (const step of MIGRATIONS.slice(version)) db.exec(step);
    db.exec(`PRAGMA user_version = ${MIGRATIONS.length}`);
    db.exec("COMMIT");
  } catch (err) {
    db.exec("ROLLBACK");
    throw err;
  }
}

interface Row {
  id: string;
  owner: string;
  model: string;
  status: string;
  previous_response_id: string | null;
  created_at_ms: number;
  input: string;
  response: string;
}

const encoder = new TextEncoder();

/** Options of {@linkcode openResponseStore}. */
export interface ResponseStoreOptions {
  /** The clock retention is measured with (default `Date.now`). */
  now?: () => number;
}

/** Opens (creating or migrating) the response store at `path`; `":memory:"` works too. */
export function openResponseStore(
  path: string,
  limits: () => ResponseLimits,
  options: ResponseStoreOptions = {},
): ResponseStore {
  const now = options.now ?? Date.now;
  const db = new DatabaseSync(path);
  try {
    db.exec("PRAGMA busy_timeout = 2000");
    migrate(db, path);
    db.exec("PRAGMA journal_mode = WAL");
  } catch (err) {
    db.close();
    throw err;
  }
  const insert = db.prepare(
    `INSERT INTO responses
       (id, owner, model, status, previous_response_id, created_at_ms, input, response)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  const select = db.prepare(
    "SELECT * FROM responses WHERE id = ? AND owner = ? AND created_at_ms >= ?",
  );
  const remove = db.prepare("DELETE FROM responses WHERE id = ? AND owner = ?");
  const expire = db.prepare("DELETE FROM responses WHERE created_at_ms < ?");
  const dropOldest = db.prepare(
    `DELETE FROM responses WHERE rowid IN
       (SELECT rowid FROM responses ORDER BY created_at_ms, rowid LIMIT ?)`,
  );
  const countAll = db.prepare("SELECT COUNT(*) AS n FROM responses");
  const counted = () => Number((countAll.get() as { n: number }).n);
  // Kept in memory so a put does not count the table; the Edge is the file's only writer.
  let stored = counted();
  const cutoff = () => now() - limits().retentionMs;

  return {
    put(r) {
      const input = JSON.stringify(r.input);
      const response = JSON.stringify(r.response);
      const bounds = limits();
      if (
        encoder.encode(input).length + encoder.encode(response).length > bounds.maxResponseBytes
      ) {
        return false;
      }
      db.exec("BEGIN");
      try {
        insert.run(
          r.id,
          r.owner,
          r.model,
          r.status,
          r.previousResponseId,
          r.createdAtMs,
          input,
          response,
        );
        stored += 1;
        stored -= Number(expire.run(now() - bounds.retentionMs).changes);
        if (stored > bounds.maxStored) {
          stored -= Number(dropOldest.run(stored - bounds.maxStored).changes);
        }
        db.exec("COMMIT");
      } catch (err) {
        db.exec("ROLLBACK");
        stored = counted();
        throw err;
      }
      return true;
    },
    get(id, owner) {
      const row = select.get(id, owner, cutoff()) as Row | undefined;
      if (!row) return undefined;
      return {
        id: row.id,
        owner: row.owner,
        model: row.model,
        createdAtMs: row.created_at_ms,
        status: row.status,
        previousResponseId: row.previous_response_id,
        input: JSON.parse(row.input),
        response: JSON.parse(row.response),
      };
    },
    delete(id, owner) {
      // An expired response is already gone for its owner: deleting it answers "not found".
      if (!(select.get(id, owner, cutoff()))) return false;
      const n = Number(remove.run(id, owner).changes);
      stored -= n;
      return n > 0;
    },
    count() {
      return stored;
    },
    close() {
      if (db.isOpen) db.close();
    },
  };
}

/** Opens the store at `path`, creating its directory first (for `responses.store_path`). */
export async function openResponseStoreFile(
  path: string,
  limits: () => ResponseLimits,
): Promise<ResponseStore> {
  if (path !== ":memory:") await Deno.mkdir(dirname(path), { recursive: true });
  return openResponseStore(path, limits);
}
