/**
 * The rules that turn a fleet command's per-edge share statuses into its outcome. A known
 * failure outweighs what is unknown: a command with a failed share did not succeed everywhere,
 * whatever the unknown shares did; without one, an unknown share makes the whole command
 * unknown, since it may have succeeded or not.
 * @module
 */
import type { EdgeCommandResult } from "../../proto/gen/iop/v1/control_pb.ts";
import {
  type AuditEdgeResult,
  type CommandOutcome,
  SHARE_STATUSES,
  type ShareStatus,
} from "./ports.ts";

/**
 * The outcome of a command whose shares stand as `statuses`:
 *
 * | shares                                         | outcome   |
 * | ---------------------------------------------- | --------- |
 * | any running                                    | running   |
 * | every one succeeded                            | succeeded |
 * | some unknown, none failed or cancelled         | unknown   |
 * | some failed or cancelled, none succeeded       | failed    |
 * | some failed or cancelled, some succeeded       | partial   |
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(commandOutcome(["succeeded", "unknown"]), "unknown");
 * assert.equal(commandOutcome(["failed", "unknown"]), "failed");
 * ```
 */
export function commandOutcome(statuses: readonly ShareStatus[]): CommandOutcome {
  if (statuses.includes("running")) return "running";
  const succeeded = statuses.filter((s) => s === "succeeded").length;
  if (succeeded === statuses.length) return "succeeded";
  const failed = statuses.filter((s) => s === "failed" || s === "cancelled").length;
  if (failed === 0) return "unknown";
  return succeeded === 0 ? "failed" : "partial";
}

/** One share as the audit keeps it (the summary cut to 500 characters). */
export function auditResult(
  result: EdgeCommandResult | undefined,
  status: ShareStatus,
  late: boolean,
  learnedAtMs: number,
): AuditEdgeResult {
  return {
    status,
    summary: (result?.summary ?? "").slice(0, 500),
    errorCode: result?.error?.code ?? "",
    retryable: result?.error?.retryable ?? false,
    late,
    learnedAtMs,
  };
}

/**
 * An edge's reported status as a share status; one this Control Plane does not know fails, and
 * so do `running` and `unknown`, which only this Control Plane may give a share.
 */
export function shareStatusOf(status: string): ShareStatus {
  const known = SHARE_STATUSES.find((s) => s === status);
  return known === undefined || known === "running" || known === "unknown" ? "failed" : known;
}
