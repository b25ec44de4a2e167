/**
 * A stopping Node drains: it takes no new run, tells its Edge so (which then routes none here),
 * and lets the runs in flight — model streams and CLI runs alike — finish, logging how many are
 * left as each ends. What is still running at the drain timeout, or when the node is told to
 * stop again, is cancelled with a reason saying why. The link and heartbeats stay up meanwhile,
 * so the Edge keeps receiving those runs' events and does not declare the node dead.
 *
 * Cancelled runs get `cancelGraceMs` to end; a run whose adapter ignores its cancellation, or a
 * further stop signal during that wait, ends the drain without it (`abandoned`): the node then
 * exits with the run unrecorded, and its next start marks the run interrupted.
 * @module
 */
import type { Logger } from "../../shared/log.ts";
import type { NodeCore } from "./node.ts";

/** Why a draining node takes no new run (its runs' refusals and `/readyz` say so). */
export const DRAINING_REASON = "stopping: it finishes its runs in flight and takes no new one";
/** Why the runs still going at the drain timeout end; they reach the client as this reason. */
export const DRAIN_TIMEOUT_REASON = "node stopping: drain timeout";
/** Why the runs still going at a second stop signal end. */
export const STOPPED_AGAIN_REASON = "node stopping: stopped again before its runs finished";
/** How long cancelled runs may take to end before the node stops without them. */
export const CANCEL_GRACE_MS = 5_000;

/** Options of {@linkcode drainRuns}. */
export interface DrainOptions {
  core: Pick<NodeCore, "inFlight" | "refuseNewRuns" | "nextRunEnd" | "cancelAll" | "endedRuns">;
  /** Tells the Edge the node drains, with the time it waits (`EdgeClient.announceDraining`). */
  announce(deadlineMs: number): void;
  /** `shutdown.drain_timeout_ms`: the longest wait before the runs left are cancelled. */
  timeoutMs: number;
  /** How long cancelled runs may take to end; default {@linkcode CANCEL_GRACE_MS}. */
  cancelGraceMs?: number;
  logger: Logger;
  /**
   * Aborted when the node must stop at once (a second signal): the runs left are cancelled, and
   * a cancellation under way is no longer waited for.
   */
  signal: AbortSignal;
}

/**
 * How a drain ended: every run ended by itself (`drained`), the rest were cancelled at the
 * timeout or a second signal, or some runs did not end when cancelled (`abandoned`).
 */
export type DrainOutcome = "drained" | "timed_out" | "stopped_again" | "abandoned";

/** Drains the node's runs; resolves once none is left, or the runs left were abandoned. */
export async function drainRuns(options: DrainOptions): Promise<DrainOutcome> {
  const { core, logger, timeoutMs, signal } = options;
  core.refuseNewRuns(DRAINING_REASON);
  options.announce(timeoutMs);
  const before = core.endedRuns();
  logger.info("node draining", { runs_left: core.inFlight, drain_timeout_ms: timeoutMs });

  const timers: ReturnType<typeof setTimeout>[] = [];
  const after = <T>(ms: number, value: T) =>
    new Promise<T>((resolve) => timers.push(setTimeout(() => resolve(value), ms)));
  const stoppedAgain = new Promise<"stopped_again">((resolve) => {
    if (signal.aborted) resolve("stopped_again");
    else signal.addEventListener("abort", () => resolve("stopped_again"), { once: true });
  });
  const timedOut = after(timeoutMs, "timed_out" as const);
  try {
    while (core.inFlight > 0) {
      const left = core.inFlight;
      const outcome = await Promise.race([
        core.nextRunEnd().then(() => "ended" as const),
        timedOut,
        stoppedAgain,
      ]);
      if (outcome !== "ended") {
        const reason = outcome === "timed_out" ? DRAIN_TIMEOUT_REASON : STOPPED_AGAIN_REASON;
        logger.warn("node cancelling the runs left", { runs_left: core.inFlight, reason });
        const settled = await Promise.race([
          core.cancelAll(reason).then(() => "ended" as const),
          after(options.cancelGraceMs ?? CANCEL_GRACE_MS, "grace_over" as const),
          // Told to stop again while cancelling: the wait is over at once.
          ...(outcome === "timed_out" ? [stoppedAgain] : []),
        ]);
        if (settled !== "ended") {
          logger.error("node stopping without the runs that did not end when cancelled", {
            runs_left: core.inFlight,
            reason: settled === "grace_over"
              ? "their adapters ignored the cancellation"
              : "signal received again during the drain",
            ...endedSince(before, core.endedRuns()),
          });
          return "abandoned";
        }
        logger.info("node drain ended", { outcome, ...endedSince(before, core.endedRuns()) });
        return outcome;
      }
      if (core.inFlight !== left) logger.info("node draining", { runs_left: core.inFlight });
    }
    const ended = endedSince(before, core.endedRuns());
    if (ended.cancelled === 0) logger.info("node drained: every run finished", ended);
    // The link to the Edge dropped (its runs are cancelled then), or the Edge cancelled some.
    else logger.warn("node drained: some runs were cancelled before they finished", ended);
    return "drained";
  } finally {
    for (const timer of timers) clearTimeout(timer);
  }
}

/** How the runs that ended during the drain ended. */
function endedSince(
  before: ReturnType<DrainOptions["core"]["endedRuns"]>,
  now: ReturnType<DrainOptions["core"]["endedRuns"]>,
): { completed: number; failed: number; cancelled: number } {
  return {
    completed: now.completed - before.completed,
    failed: now.failed - before.failed,
    cancelled: now.cancelled - before.cancelled,
  };
}
