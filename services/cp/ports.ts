/**
 * The Control Plane's ports: the audit log the command center writes to. Types only.
 * @module
 */

/** One edge's outcome of a fleet command, as kept in the audit log. */
export interface AuditEdgeResult {
  status: string;
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
  /** running, succeeded, failed, partial or interrupted. */
  outcome: string;
  results: Record<string, AuditEdgeResult>;
}

/** Durable, append-mostly record of fleet commands. */
export interface AuditLog {
  /** Records a command as it is accepted. */
  begin(record: AuditRecord): void;
  /** Records a command's final outcome and per-edge results. */
  finish(
    commandId: string,
    outcome: string,
    finishedAtMs: number,
    results: Record<string, AuditEdgeResult>,
  ): void;
  /** The most recent records, newest first. */
  recent(limit: number): AuditRecord[];
  close(): void;
}
