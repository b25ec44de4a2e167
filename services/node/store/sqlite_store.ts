/**
 * The Node's run history in a SQLite file, via Deno's built-in `node:sqlite` (no native download).
 *
 * The file runs in WAL mode so history reads never block the run that is being recorded. Its
 * schema version lives in `PRAGMA user_version`: opening applies every migration above the
 * file's version in one transaction, and refuses a file written by a newer Node.
 *
 * Writes happen behind the runs, off their critical path: starts and outcomes are queued and
 * written together in one transaction a few milliseconds later (a run that starts and ends in
 * that window is one INSERT). Reads and `close` write the queue first, so a history read sees
 * every run and a graceful stop loses nothing; a crash of the Node process loses at most the
 * last {@linkcode WRITE_BEHIND_MS} of rows, and the runs whose start was written are marked
 * `interrupted` at the next start.
 *
 * Besides the summary, each row keeps the run's whole output up to a cap (`output_cap_bytes`,
 * 1 MiB by default); a cut output ends with a line saying so and has `output_truncated` set.
 * History reads leave that column out; {@linkcode RunStore.runOutput} reads it for one run.
 * @module
 */
import { DatabaseSync, type SQLInputValue } from "node:sqlite";
import { IopError } from "../../../shared/errors.ts";
import { capOutput, DEFAULT_OUTPUT_CAP_BYTES } from "../output_cap.ts";
import type {
  RunOutcome,
  RunRecord,
  RunStart,
  RunStatus,
  RunStore,
  StoredOutput,
} from "../ports.ts";

/** How many characters of a run's output the store keeps. */
export const OUTPUT_SUMMARY_CHARS = 2_000;

/** How long a queued write waits for others to share its transaction. */
export const WRITE_BEHIND_MS = 20;

/** A schema step: SQL, or a function for a step that must look at the file first. */
type Migration = string | ((db: DatabaseSync) => void);

/** Schema steps; entry `i` takes the file from version `i` to `i + 1`. Append, never edit. */
const MIGRATIONS: readonly Migration[] = [
  `CREATE TABLE runs (
     run_id TEXT PRIMARY KEY,
     adapter TEXT NOT NULL,
     target TEXT NOT NULL,
     status TEXT NOT NULL,
     started_at_ms INTEGER NOT NULL,
     first_output_at_ms INTEGER,
     finished_at_ms INTEGER,
     input_tokens INTEGER,
     output_tokens INTEGER,
     error_code TEXT,
     error_message TEXT,
     error_retryable INTEGER,
     output_summary TEXT NOT NULL DEFAULT '',
     exit_code INTEGER
   );
   CREATE INDEX runs_by_start ON runs (started_at_ms DESC);
   CREATE INDEX runs_by_status ON runs (status);`,
  addOutputColumns,
  addTraceIdColumn,
  // Version 4: only running rows in the status index. It serves the one query by status
  // (marking runs interrupted at start), and a run that starts and ends within the write-behind
  // delay, most runs, is written finished and so never costs an update of it.
  `DROP INDEX IF EXISTS runs_by_status;
   CREATE INDEX IF NOT EXISTS runs_running ON runs (status) WHERE status = 'running';`,
];

/**
 * Version 3: each run's W3C trace id. A run recorded before has none (NULL); a column already
 * there (a file a newer build touched, then rolled back) is kept.
 */
function addTraceIdColumn(db: DatabaseSync): void {
  const rows = db.prepare("PRAGMA table_info(runs)").all() as unknown as { name: string }[];
  if (rows.some((r) => r.name === "trace_id")) return;
  db.exec("ALTER TABLE runs ADD COLUMN trace_id TEXT");
}

/**
 * Version 2: the whole output beside the summary. Columns already there are kept; a run recorded
 * before has only its summary, which becomes its output (marked cut when it filled the summary).
 */
function addOutputColumns(db: DatabaseSync): void {
  const rows = db.prepare("PRAGMA table_info(runs)").all() as unknown as { name: string }[];
  const columns = new Set(rows.map((r) => r.name));
  if (!columns.has("output")) {
    db.exec("ALTER TABLE runs ADD COLUMN output TEXT NOT NULL DEFAULT ''");
  }
  if (!columns.has("output_truncated")) {
    db.exec("ALTER TABLE runs ADD COLUMN output_truncated INTEGER NOT NULL DEFAULT 0");
  }
  db.prepare(
    `UPDATE runs SET output = output_summary || CASE WHEN length(output_summary) >= ?
       THEN char(10) || ? ELSE '' END, output_truncated = (length(output_summary) >= ?)
     WHERE output = ''`,
  ).run(
    OUTPUT_SUMMARY_CHARS,
    `[output truncated at ${OUTPUT_SUMMARY_CHARS} characters: ` +
      "recorded before whole outputs were kept]\n",
    OUTPUT_SUMMARY_CHARS,
  );
}

/** The history columns; the whole output is read only by `runOutput`. */
const RECORD_COLUMNS = `run_id, adapter, target, status, started_at_ms, first_output_at_ms,
  finished_at_ms, input_tokens, output_tokens, error_code, error_message, error_retryable,
  output_summary, exit_code, trace_id`;

/** The schema version this code writes. */
export const SCHEMA_VERSION = MIGRATIONS.length;

interface RunRow {
  run_id: string;
  adapter: string;
  target: string;
  status: string;
  started_at_ms: number;
  first_output_at_ms: number | null;
  finished_at_ms: number | null;
  input_tokens: number | null;
  output_tokens: number | null;
  error_code: string | null;
  error_message: string | null;
  error_retryable: number | null;
  output_summary: string;
  exit_code: number | null;
  trace_id: string | null;
}

function migrate(db: DatabaseSync, path: string): void {
  const row = db.prepare("PRAGMA user_version").get() as { user_version: number };
  const version = row.user_version;
  if (version > SCHEMA_VERSION) {
    throw new IopError(
      "INTERNAL",
      `Cannot open run store '${path}' as its schema version ${version} is newer than this ` +
        `Node's ${SCHEMA_VERSION}`,
    );
  }
  if (version === SCHEMA_VERSION) return;
  db.exec("BEGIN IMMEDIATE");
  try {
    for (const step of MIGRATIONS.slice(version)) {
      if (typeof step === "string") db.exec(step);
      else step(db);
    }
    // PRAGMA takes no bound parameters; the value is our own integer constant.
    db.exec(`PRAGMA user_version = ${SCHEMA_VERSION}`);
    db.exec("COMMIT");
  } catch (err) {
    db.exec("ROLLBACK");
    throw err;
  }
}

/** Cuts `text` to the summary length without splitting a surrogate pair. */
function summary(text: string): string {
  if (text.length <= OUTPUT_SUMMARY_CHARS) return text;
  const cut = text.slice(0, OUTPUT_SUMMARY_CHARS);
  const last = cut.charCodeAt(cut.length - 1);
  return last >= 0xd800 && last <= 0xdbff ? cut.slice(0, -1) : cut;
}

function toRecord(row: RunRow): RunRecord {
  const record: RunRecord = {
    runId: row.run_id,
    adapter: row.adapter,
    target: row.target,
    status: row.status as RunStatus,
    startedAtMs: row.started_at_ms,
    outputSummary: row.output_summary,
  };
  if (row.first_output_at_ms !== null) record.firstOutputAtMs = row.first_output_at_ms;
  if (row.finished_at_ms !== null) record.finishedAtMs = row.finished_at_ms;
  if (row.input_tokens !== null && row.output_tokens !== null) {
    record.usage = { inputTokens: row.input_tokens, outputTokens: row.output_tokens };
  }
  if (row.error_code !== null) {
    record.error = {
      code: row.error_code,
      message: row.error_message ?? "",
      retryable: row.error_retryable === 1,
    };
  }
  if (row.exit_code !== null) record.exitCode = row.exit_code;
  if (row.trace_id !== null) record.traceId = row.trace_id;
  return record;
}

/** Options of {@linkcode openRunStore}. */
export interface RunStoreOptions {
  /**
   * Arranges for `flush` to run once, later; returns how to call that off. Defaults to a timer
   * of {@linkcode WRITE_BEHIND_MS}; tests pass one they fire by hand instead of waiting.
   */
  scheduleFlush?: (flush: () => void) => () => void;
  /**
   * Told when a scheduled write fails (a full disk, say); the runs stay queued for the next
   * write. Absent = not reported. Reads and `close` throw such failures to their caller.
   */
  onWriteError?: (err: unknown) => void;
  /**
   * Most bytes (UTF-8) of one run's whole output kept; more is cut and marked. Defaults to
   * {@linkcode DEFAULT_OUTPUT_CAP_BYTES} (node.yaml `history.output_cap_bytes`).
   */
  outputCapBytes?: number;
}

const timerFlush = (flush: () => void) => {
  const timer = setTimeout(flush, WRITE_BEHIND_MS);
  return () => clearTimeout(timer);
};

/** Opens (creating or migrating as needed) the run store at `path`; `":memory:"` works too. */
export function openRunStore(path: string, options: RunStoreOptions = {}): RunStore {
  const capBytes = options.outputCapBytes ?? DEFAULT_OUTPUT_CAP_BYTES;
  if (!Number.isInteger(capBytes) || capBytes < 0) {
    throw new RangeError(
      `Cannot open run store as 'outputCapBytes' must be a non-negative integer: current value is ${capBytes}`,
    );
  }
  const db = new DatabaseSync(path);
  try {
    // A second Node process on the same file waits briefly instead of failing at once.
    db.exec("PRAGMA busy_timeout = 2000");
    // Migrating first leaves a file from a newer Node exactly as it was.
    migrate(db, path);
    db.exec("PRAGMA journal_mode = WAL");
    // In WAL mode NORMAL still survives a process crash (kill -9); it only skips the fsync per
    // commit that would otherwise put two disk syncs on every run's path.
    db.exec("PRAGMA synchronous = NORMAL");
  } catch (err) {
    db.close();
    throw err;
  }

  const insert = db.prepare(
    `INSERT INTO runs (run_id, adapter, target, status, started_at_ms, trace_id)
     VALUES (?, ?, ?, 'running', ?, ?)`,
  );
  const insertFinished = db.prepare(
    `INSERT INTO runs (run_id, adapter, target, started_at_ms, trace_id, status, finished_at_ms,
       first_output_at_ms, input_tokens, output_tokens, error_code, error_message,
       error_retryable, output_summary, exit_code, output, output_truncated)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  const complete = db.prepare(
    `UPDATE runs SET status = ?, finished_at_ms = ?, first_output_at_ms = ?, input_tokens = ?,
       output_tokens = ?, error_code = ?, error_message = ?, error_retryable = ?,
       output_summary = ?, exit_code = ?, output = ?, output_truncated = ?
     WHERE run_id = ?`,
  );
  const exists = db.prepare("SELECT 1 FROM runs WHERE run_id = ?");
  const recent = db.prepare(
    `SELECT ${RECORD_COLUMNS} FROM runs ORDER BY started_at_ms DESC, rowid DESC LIMIT ?`,
  );
  const outputOf = db.prepare("SELECT output, output_truncated FROM runs WHERE run_id = ?");
  const interrupt = db.prepare(
    "UPDATE runs SET status = 'interrupted', finished_at_ms = ? WHERE status = 'running'",
  );
  let open = true;
  /** Queued writes by run id, in arrival order; `written` once the start row is in the file. */
  const queued = new Map<string, QueuedRun>();
  const scheduleFlush = options.scheduleFlush ?? timerFlush;
  let unschedule: (() => void) | undefined;

  const flush = () => {
    unschedule?.();
    unschedule = undefined;
    if (queued.size === 0) return;
    const runs = [...queued.values()];
    queued.clear();
    try {
      db.exec("BEGIN");
      for (const run of runs) writeRun(run);
      db.exec("COMMIT");
    } catch (err) {
      if (db.isTransaction) db.exec("ROLLBACK");
      // Nothing was written: keep every run for the next attempt.
      for (const run of runs) queued.set(run.start.runId, run);
      throw new IopError("INTERNAL", `Cannot write ${runs.length} runs to the history`, {
        cause: err,
      });
    }
  };
  // A scheduled write runs from a timer, where a throw would end the process.
  const scheduledFlush = () => {
    try {
      flush();
    } catch (err) {
      options.onWriteError?.(err);
    }
  };
  const writeRun = ({ start, outcome, written }: QueuedRun) => {
    if (!outcome) {
      insert.run(
        start.runId,
        start.adapter,
        start.target,
        start.startedAtMs,
        start.traceId ?? null,
      );
      return;
    }
    const values = outcomeValues(outcome, capBytes);
    if (written) complete.run(...values, start.runId);
    else {
      insertFinished.run(
        start.runId,
        start.adapter,
        start.target,
        start.startedAtMs,
        start.traceId ?? null,
        ...values,
      );
    }
  };
  const schedule = () => {
    unschedule ??= scheduleFlush(scheduledFlush);
  };
  const known = (runId: string) => queued.has(runId) || exists.get(runId) !== undefined;

  return {
    startRun(start) {
      if (known(start.runId)) {
        throw new IopError(
          "INVALID_ARGUMENT",
          `Cannot start run '${start.runId}' as it is already recorded`,
        );
      }
      queued.set(start.runId, { start, written: false });
      schedule();
    },
    completeRun(runId: string, outcome: RunOutcome) {
      const run = queued.get(runId);
      if (run) {
        run.outcome = outcome;
      } else if (exists.get(runId) !== undefined) {
        queued.set(runId, {
          start: { runId, adapter: "", target: "", startedAtMs: 0 },
          outcome,
          written: true,
        });
      } else {
        throw new IopError("NOT_FOUND", `Cannot complete run '${runId}' as it was never started`);
      }
      schedule();
    },
    history(limit: number): RunRecord[] {
      if (!Number.isInteger(limit) || limit < 0) {
        throw new RangeError(
          `Cannot read run history as 'limit' must be a non-negative integer: current value is ${limit}`,
        );
      }
      flush();
      return (recent.all(limit) as unknown as RunRow[]).map(toRecord);
    },
    runOutput(runId: string): StoredOutput | undefined {
      flush();
      const row = outputOf.get(runId) as { output: string; output_truncated: number } | undefined;
      return row && { output: row.output, truncated: row.output_truncated === 1 };
    },
    markInterrupted(finishedAtMs: number): number {
      flush();
      return Number(interrupt.run(finishedAtMs).changes);
    },
    close() {
      if (!open) return;
      open = false;
      flush();
      db.close();
    },
  };
}

interface QueuedRun {
  start: RunStart;
  outcome?: RunOutcome;
  /** The start row is already in the file: the outcome is an UPDATE. */
  written: boolean;
}

function outcomeValues(outcome: RunOutcome, capBytes: number): SQLInputValue[] {
  const whole = capOutput(outcome.output ?? outcome.outputSummary, capBytes, {
    alreadyCut: outcome.outputTruncated ?? false,
  });
  return [
    outcome.status,
    outcome.finishedAtMs,
    outcome.firstOutputAtMs ?? null,
    outcome.usage?.inputTokens ?? null,
    outcome.usage?.outputTokens ?? null,
    outcome.error?.code ?? null,
    outcome.error?.message ?? null,
    outcome.error === undefined ? null : outcome.error.retryable ? 1 : 0,
    summary(outcome.outputSummary),
    outcome.exitCode ?? null,
    whole.output,
    whole.truncated ? 1 : 0,
  ];
}
