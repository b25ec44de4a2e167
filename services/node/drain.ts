/**
 * A stopping Node drains: it takes no new run, tells its Edge so (which then routes none here),
 * and lets the runs in flight — model streams and CLI runs alike — finish, logging how many are
 * left as each ends. What is still running at the drain timeout, or when the node is told to
 * stop again, is cancelled with a reason saying why. The link and heartbeats stay up meanwhile,
 * so the Edge keeps receiving those runs' events and does not declare the node dead.
 * @module
 */
import type { Logger } from "../../shared/log.ts";
import type { NodeCore } from "./node.ts";

/** Why the runs still going at the drain timeout end; they reach the client as this reason. */
export const DRAIN_TIMEOUT_REASON = "node stopping: drain timeout";
/** Why the runs still going at a second stop signal end. */
export const STOPPED_AGAIN_REASON = "node stopping: stopped again before its runs finished";

/** Options of {@linkcode drainRuns}. */
export interface DrainOptions {
  core: Pick<NodeCore, "inFlight" | "refuseNewRuns" | "nextRunEnd" | "cancelAll">;
  /** Tells the Edge the node drains, with the time it waits (`EdgeClient.announceDraining`). */
  announce(deadlineMs: number): void;
  /** `shutdown.drain_timeout_ms`: the longest wait before the runs left are cancelled. */
  timeoutMs: number;
  logger: Logger;
  /** Aborted when the node must stop at once (a second signal): the runs left are cancelled. */
  signal: AbortSignal;
}

/** How a drain ended: every run finished, or the rest were cancelled (timeout, stop again). */
export type DrainOutcome = "drained" | "timed_out" | "stopped_again";

/** Drains the node's runs; resolves once none is left. */
export async function drainRuns(options: DrainOptions): Promise<DrainOutcome> {
  const { core, logger, timeoutMs, signal } = options;
  core.refuseNewRuns("stopping: it finishes its runs in flight and takes no new one");
  options.announce(timeoutMs);
  logger.info("node draining", { runs_left: core.inFlight, drain_timeout_ms: timeoutMs });

  let timer: ReturnType<typeof setTimeout> | undefined;
  const timedOut = new Promise<"timed_out">((resolve) => {
    timer = setTimeout(() => resolve("timed_out"), timeoutMs);
  });
  const stoppedAgain = new Promise<"stopped_again">((resolve) => {
    if (signal.aborted) resolve("stopped_again");
    else signal.addEventListener("abort", () => resolve("stopped_again"), { once: true });
  });
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
        await core.cancelAll(reason);
        return outcome;
      }
      if (core.inFlight !== left) logger.info("node draining", { runs_left: core.inFlight });
    }
    logger.info("node drained: every run finished");
    return "drained";
  } finally {
    clearTimeout(timer);
  }
}
