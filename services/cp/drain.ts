/**
 * A stopping Control Plane drains its fleet commands: it accepts no new one (HTTP and `/client`
 * submissions get UNAVAILABLE, `/readyz` answers 503) and waits for the results of the shares in
 * flight, which edges still send over the open edge wire, logging how many are left as each
 * ends. Reads keep working meanwhile. At the drain timeout, or when told to stop again, every
 * share still running is recorded `unknown` with {@linkcode STOPPED_REASON} in the audit, as
 * the work may still happen on its edge.
 * @module
 */
import type { Logger } from "../../shared/log.ts";
import type { CommandCenter } from "./commands.ts";

/** The error message of a command submitted while the Control Plane stops. */
export const STOPPING_MESSAGE = "Cannot accept the command as the control plane is stopping";
/** The result summary of a share still running when the Control Plane stops. */
export const STOPPED_REASON = "outcome unknown: the control plane stopped while the command ran";

/** Options of {@linkcode drainCommands}. */
export interface DrainOptions {
  commands: Pick<
    CommandCenter,
    "refuseNew" | "inFlight" | "nextShareEnd" | "settleRunning"
  >;
  /** `shutdown.drain_timeout_ms`: the longest wait before the shares left are unknown. */
  timeoutMs: number;
  logger: Logger;
  /** Aborted when the Control Plane must stop at once (a second signal): the wait ends. */
  signal: AbortSignal;
}

/**
 * How a drain ended: every share got its result (`drained`), or the shares left were recorded
 * unknown at the timeout or a second signal.
 */
export type DrainOutcome = "drained" | "timed_out" | "stopped_again";

/** Drains the fleet commands in flight; resolves once none is running. */
export async function drainCommands(options: DrainOptions): Promise<DrainOutcome> {
  const { commands, logger, timeoutMs, signal } = options;
  commands.refuseNew(STOPPING_MESSAGE);
  const first = commands.inFlight();
  logger.info("control plane draining", {
    commands_left: first.commands,
    shares_left: first.shares,
    drain_timeout_ms: timeoutMs,
  });
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timedOut = new Promise<"timed_out">((resolve) => {
    timer = setTimeout(() => resolve("timed_out"), timeoutMs);
  });
  const stoppedAgain = new Promise<"stopped_again">((resolve) => {
    if (signal.aborted) resolve("stopped_again");
    else signal.addEventListener("abort", () => resolve("stopped_again"), { once: true });
  });
  try {
    let left = first.shares;
    while (left > 0) {
      const outcome = await Promise.race([
        commands.nextShareEnd().then(() => "ended" as const),
        timedOut,
        stoppedAgain,
      ]);
      if (outcome !== "ended") {
        const { commands: commandsLeft } = commands.inFlight();
        const settled = commands.settleRunning(STOPPED_REASON);
        logger.warn("control plane stopped before some commands finished: recorded unknown", {
          commands_left: commandsLeft,
          shares_left: settled,
          reason: outcome === "timed_out"
            ? `drain timeout (${timeoutMs} ms)`
            : "signal received again during the drain",
        });
        return outcome;
      }
      const now = commands.inFlight();
      if (now.shares !== left && now.shares > 0) {
        logger.info("control plane draining", {
          commands_left: now.commands,
          shares_left: now.shares,
        });
      }
      left = now.shares;
    }
    logger.info("control plane drained: every command in flight finished", {
      commands: first.commands,
    });
    return "drained";
  } finally {
    clearTimeout(timer);
  }
}
