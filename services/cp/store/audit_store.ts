/**
 * The audit log in a SQLite file (Deno's built-in `node:sqlite`): one row per fleet command,
 * written when it is accepted, completed when its last edge answers, and rewritten when an
 * edge's late answer replaces an `unknown` share. Rows left running by a previous process are
 * marked interrupted when the file is opened again.
 * @module
 */
import { DatabaseSync } from "node:sqlite";
import type {
  AuditEdgeResult,
  AuditFilter,
  AuditLog,
  AuditRecord,
  CommandOutcome,
} from "../ports.ts";

const SCHEMA = `CREATE TABLE IF NOT EXISTS audit (
  command_id TEXT PRIMARY KEY,
  actor TEXT NOT NULL,
  via TEXT NOT NULL,
  kind TEXT NOT NULL,
  detail TEXT NOT NULL,
  edges TEXT NOT NULL,
  created_at_ms INTEGER NOT NULL,
  finished_at_ms INTEGER NOT NULL DEFAULT 0,
  outcome TEXT NOT NULL,
  results TEXT NOT NULL DEFAULT '{}'
)`;

interface Row {
  command_id: string;
  actor: string;
  via: string;
  kind: string;
  detail: string;
  edges: string;
  created_at_ms: number;
  finished_at_ms: number;
  /** Written only from {@linkcode CommandOutcome} values. */
  outcome: CommandOutcome;
  results: string;
}

/** Opens (creating if needed) the audit log at `path`; `":memory:"` works too. */
export function openAuditStore(path: string, nowMs: number = Date.now()): AuditLog {
  const db = new DatabaseSync(path);
  try {
    db.exec("PRAGMA busy_timeout = 2000");
    db.exec(SCHEMA);
    db.exec("PRAGMA journal_mode = WAL");
    db.prepare(
      "UPDATE audit SET outcome = 'interrupted', finished_at_ms = ? WHERE outcome = 'running'",
    ).run(nowMs);
  } catch (err) {
    db.close();
    throw err;
  }
  const insert = db.prepare(
    `INSERT INTO audit (command_id, actor, via, kind, detail, edges, created_at_ms, outcome)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  const finish = db.prepare(
    "UPDATE audit SET outcome = ?, finished_at_ms = ?, results = ? WHERE command_id = ?",
  );
  const update = db.prepare("UPDATE audit SET outcome = ?, results = ? WHERE command_id = ?");
  // Each filter is bound as a value or NULL (matches all), so one statement serves them all.
  const recent = db.prepare(
    `SELECT * FROM audit
     WHERE (:actor IS NULL OR actor = :actor)
       AND (:outcome IS NULL OR outcome = :outcome)
       AND (:kind IS NULL OR kind = :kind)
       AND (:before IS NULL OR created_at_ms < :before)
       AND (:edge IS NULL OR EXISTS (SELECT 1 FROM json_each(audit.edges) WHERE value = :edge))
     ORDER BY created_at_ms DESC, rowid DESC LIMIT :limit`,
  );
  const one = db.prepare("SELECT * FROM audit WHERE command_id = ?");
  return {
    begin(r: AuditRecord) {
      insert.run(
        r.commandId,
        r.actor,
        r.via,
        r.kind,
        r.detail,
        JSON.stringify(r.edges),
        r.createdAtMs,
        r.outcome,
      );
    },
    finish(
      commandId: string,
      outcome: CommandOutcome,
      finishedAtMs: number,
      results: Record<string, AuditEdgeResult>,
    ) {
      finish.run(outcome, finishedAtMs, JSON.stringify(results), commandId);
    },
    update(commandId: string, outcome: CommandOutcome, results: Record<string, AuditEdgeResult>) {
      update.run(outcome, JSON.stringify(results), commandId);
    },
    get(commandId: string): AuditRecord | undefined {
      const row = one.get(commandId) as unknown as Row | undefined;
      return row ? fromRow(row) : undefined;
    },
    recent(limit: number, filter: AuditFilter = {}): AuditRecord[] {
      return (recent.all({
        actor: filter.actor ?? null,
        outcome: filter.outcome ?? null,
        kind: filter.kind ?? null,
        before: filter.beforeMs ?? null,
        edge: filter.edge ?? null,
        limit,
      }) as unknown as Row[]).map(fromRow);
    },
    close() {
      if (db.isOpen) db.close();
    },
  };
}

function fromRow(row: Row): AuditRecord {
  const stored = JSON.parse(row.results) as Record<string, Partial<AuditEdgeResult>>;
  const results: Record<string, AuditEdgeResult> = {};
  // Rows written before retryable/late/learnedAtMs were kept read with their defaults.
  for (const [edgeId, r] of Object.entries(stored)) {
    results[edgeId] = {
      status: r.status ?? "failed",
      summary: r.summary ?? "",
      errorCode: r.errorCode ?? "",
      retryable: r.retryable ?? false,
      late: r.late ?? false,
      learnedAtMs: r.learnedAtMs ?? 0,
    };
  }
  return {
    commandId: row.command_id,
    actor: row.actor,
    via: row.via,
    kind: row.kind,
    detail: row.detail,
    edges: JSON.parse(row.edges) as string[],
    createdAtMs: row.created_at_ms,
    finishedAtMs: row.finished_at_ms,
    outcome: row.outcome,
    results,
  };
}
