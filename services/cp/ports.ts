/**
 * The Control Plane's ports: the audit log the command center writes to. Types only.
 * @module
 */

/** How one edge's share of a fleet command stands: running until the edge answers. */
export type ShareStatus = "running" | "succeeded" | "failed" | "cancelled";

/** Every {@linkcode ShareStatus}. */
export const SHARE_STATUSES: readonly ShareStatus[] = [
  "running",
  "succeeded",
  "failed",
  "cancelled",
];

/**
 * How a fleet command stands: running, then succeeded (every edge), failed (none) or partial;
 * interrupted when the Control Plane stopped before it ended.
 */
export type CommandOutcome = "running" | "succeeded" | "failed" | "partial" | "interrupted";

/** One edge's outcome of a fleet command, as kept in the audit log. */
export interface AuditEdgeResult {
  status: ShareStatus;
  summary: string;
  errorCode: string;
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
  /** The most recent records, newest first. */
  recent(limit: number): AuditRecord[];
  close(): void;
}
