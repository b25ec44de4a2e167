/**
 * The Edge's store of Responses API responses (`store: true`, the default): one SQLite file
 * holding each response's answered object and its normalised input items as JSON, next to the
 * columns that ownership, chaining and retention query; opened and migrated as
 * `sqlite_schema.ts` says.
 *
 * Bounds are read per call from the config in force (`responses.*`): a response older than
 * `retentionMs` is gone (purged as new ones arrive, never answered before); one larger than
 * `maxResponseBytes` is not stored. Then, oldest first, a tenant keeps at most
 * `maxStoredPerTenant` (its own oldest go, so one tenant cannot evict the others'), and the
 * file at most `maxStored` responses and `maxTotalBytes` of JSON.
 *
 * Schema history: 1 = the `responses` table; 2 = the `bytes` column (the size of the row's
 * JSON, computed for older rows) and the index by owner and age.
 * @module
 */
import { dirname } from "node:path";
import { utf8Length } from "../../../shared/utf8.ts";
import type { ResponseStore } from "../ports.ts";
import { openSqlite } from "./sqlite_schema.ts";

export type { ResponseStore, StoredResponse } from "../ports.ts";

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
  `ALTER TABLE responses ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;
   UPDATE responses SET bytes = length(CAST(input AS BLOB)) + length(CAST(response AS BLOB));
   CREATE INDEX responses_by_owner ON responses (owner, created_at_ms);`,
];

/** The bounds of the store, read per call so a config reload applies. */
export interface ResponseLimits {
  maxStored: number;
  /** Responses one tenant keeps at most; its oldest are dropped first. */
  maxStoredPerTenant: number;
  /** The JSON bytes all responses take at most; the oldest are dropped first. */
  maxTotalBytes: number;
  retentionMs: number;
  maxResponseBytes: number;
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
  const db = openSqlite(path, { what: "response store", migrations: MIGRATIONS });
  const insert = db.prepare(
    `INSERT INTO responses
       (id, owner, model, status, previous_response_id, created_at_ms, input, response, bytes)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  const select = db.prepare(
    `SELECT id, owner, model, status, previous_response_id, created_at_ms, input, response
     FROM responses WHERE id = ? AND owner = ? AND created_at_ms >= ?`,
  );
  const exists = db.prepare(
    "SELECT 1 FROM responses WHERE id = ? AND owner = ? AND created_at_ms >= ?",
  );
  // Every delete returns the sizes it freed, so the totals below stay exact without a scan.
  const remove = db.prepare("DELETE FROM responses WHERE id = ? AND owner = ? RETURNING bytes");
  const expire = db.prepare("DELETE FROM responses WHERE created_at_ms < ? RETURNING bytes");
  const countOwner = db.prepare("SELECT COUNT(*) AS n FROM responses WHERE owner = ?");
  const dropOwnerOldest = db.prepare(
    `DELETE FROM responses WHERE rowid IN
       (SELECT rowid FROM responses WHERE owner = ? ORDER BY created_at_ms, rowid LIMIT ?)
     RETURNING bytes`,
  );
  const dropOldest = db.prepare(
    `DELETE FROM responses WHERE rowid IN
       (SELECT rowid FROM responses ORDER BY created_at_ms, rowid LIMIT ?)
     RETURNING bytes`,
  );
  // The newest responses whose sizes add up to at most the budget stay; the older ones go.
  const dropOverBudget = db.prepare(
    `DELETE FROM responses WHERE rowid IN
       (SELECT rowid FROM
         (SELECT rowid, SUM(bytes) OVER (ORDER BY created_at_ms DESC, rowid DESC) AS kept
          FROM responses)
        WHERE kept > ?)
     RETURNING bytes`,
  );
  const totals = db.prepare(
    "SELECT COUNT(*) AS n, COALESCE(SUM(bytes), 0) AS bytes FROM responses",
  );
  // Kept in memory so a put does not scan the table; the Edge is the file's only writer.
  let stored = 0;
  let storedBytes = 0;
  const recount = () => {
    const row = totals.get() as { n: number; bytes: number };
    stored = Number(row.n);
    storedBytes = Number(row.bytes);
  };
  recount();
  const freed = (rows: unknown[]) => {
    stored -= rows.length;
    for (const row of rows as { bytes: number }[]) storedBytes -= Number(row.bytes);
  };
  const cutoff = () => now() - limits().retentionMs;

  return {
    put(r) {
      const input = JSON.stringify(r.input);
      const response = JSON.stringify(r.response);
      // Measured without encoding: the bind below is the one place the JSON is encoded.
      const bytes = utf8Length(input) + utf8Length(response);
      const bounds = limits();
      if (bytes > bounds.maxResponseBytes) return false;
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
          bytes,
        );
        stored += 1;
        storedBytes += bytes;
        freed(expire.all(now() - bounds.retentionMs));
        const own = Number((countOwner.get(r.owner) as { n: number }).n);
        if (own > bounds.maxStoredPerTenant) {
          freed(dropOwnerOldest.all(r.owner, own - bounds.maxStoredPerTenant));
        }
        if (stored > bounds.maxStored) freed(dropOldest.all(stored - bounds.maxStored));
        if (storedBytes > bounds.maxTotalBytes) freed(dropOverBudget.all(bounds.maxTotalBytes));
        db.exec("COMMIT");
      } catch (err) {
        db.exec("ROLLBACK");
        recount();
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
      if (!exists.get(id, owner, cutoff())) return false;
      const rows = remove.all(id, owner);
      freed(rows);
      return rows.length > 0;
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
