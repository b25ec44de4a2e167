/**
 * The Control Plane's ports: the audit log the command center writes to. Types only.
 * @module
 */

/**
 * How one edge's share of a fleet command stands: running until the edge answers; `unknown`
 * when the Control Plane cannot know (no answer by its deadline, or the link was lost while it
 * ran): the work may have happened, so it is never retryable. A late answer replaces `unknown`.
 */
export type ShareStatus = "running" | "succeeded" | "failed" | "cancelled" | "unknown";

/** Every {@linkcode ShareStatus}. */
export const SHARE_STATUSES: readonly ShareStatus[] = [
  "running",
  "succeeded",
  "failed",
  "cancelled",
  "unknown",
];

/**
 * How a fleet command stands, from its shares (see `commandOutcome` in `outcome.ts`): running
 * while any share runs; then succeeded (every share), unknown (some unknown, none failed or
 * cancelled), failed (none succeeded) or partial (some succeeded, some failed or cancelled);
 * interrupted when the Control Plane stopped before it ended.
 */
export type CommandOutcome =
  | "running"
  | "succeeded"
  | "failed"
  | "partial"
  | "unknown"
  | "interrupted";

/** One edge's outcome of a fleet command, as kept in the audit log. */
export interface AuditEdgeResult {
  status: ShareStatus;
  summary: string;
  errorCode: string;
  /** Whether the edge (or the Control Plane, for a share it failed itself) says a retry may help. */
  retryable: boolean;
  /** True when the edge's answer replaced `unknown`: it came after the deadline or a lost link. */
  late: boolean;
  /** When the Control Plane learned this status; 0 in rows written before it was kept. */
  learnedAtMs: number;
}

/** One audited fleet command: who asked what of which edges, when, and how it ended. */
export interface AuditRecord {
  commandId: string;
  actor: string;
  /** Where the request came from: `http` or `client`. */
  via: string;
  /** run, cancel, drain, reload or agent. */
  kind: string;
  /** The command's arguments, as a short human-readable text. */
  detail: string;
  edges: string[];
  createdAtMs: number;
  /** 0 while running. */
  finishedAtMs: number;
  outcome: CommandOutcome;
  results: Record<string, AuditEdgeResult>;
}

/** Which audit records to list; every field given must match, an absent one matches all. */
export interface AuditFilter {
  /** The token name that asked. */
  actor?: string;
  /** One of the command's target edges. */
  edge?: string;
  /** The command's outcome (running, succeeded, failed, partial, unknown, interrupted). */
  outcome?: string;
  /** run, cancel, drain, reload or agent. */
  kind?: string;
  /** Only records created before this time (ms), to page back. */
  beforeMs?: number;
}

/** Durable, append-mostly record of fleet commands. */
export interface AuditLog {
  /** Records a command as it is accepted. */
  begin(record: AuditRecord): void;
  /** Records a command's final outcome and per-edge results. */
  finish(
    commandId: string,
    outcome: CommandOutcome,
    finishedAtMs: number,
    results: Record<string, AuditEdgeResult>,
  ): void;
  /**
   * Rewrites a finished command's outcome and per-edge results when a late answer changed them;
   * finishedAtMs stays when the command first ended.
   */
  update(
    commandId: string,
    outcome: CommandOutcome,
    results: Record<string, AuditEdgeResult>,
  ): void;
  /** One record by command id. */
  get(commandId: string): AuditRecord | undefined;
  /** The most recent records, newest first; with a filter, only those matching all of it. */
  recent(limit: number, filter?: AuditFilter): AuditRecord[];
  close(): void;
}
