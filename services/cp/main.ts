/**
 * Starts the Control Plane: reads its config and serves the edge wire, the HTTP API, the
 * `/client` WebSocket and the dashboard. Usage: `deno task cp [--config deploy/config/cp.yaml]`.
 * On SIGTERM or SIGINT it drains its fleet commands (`drain.ts`), closes its listeners, links and
 * audit file, and exits 0.
 * @module
 */
import { configPathFromArgs } from "../../shared/config.ts";
import { createLogger } from "../../shared/log.ts";
import { startupFailed } from "../../shared/startup.ts";
import { setUpTracing, shutdownTracing } from "../../shared/tracing.ts";
import { IOP_VERSION } from "../../shared/version.ts";
import { loadCpConfig } from "./config.ts";
import { startControlPlane } from "./control_plane.ts";
import { drainCommands } from "./drain.ts";

const logger = createLogger("cp");
const file = configPathFromArgs(Deno.args, "deploy/config/cp.yaml");
let config;
try {
  config = await loadCpConfig(file);
} catch (err) {
  logger.error("cannot start control plane: invalid config", { err });
  Deno.exit(2);
}

await setUpTracing({ serviceName: "iop-cp", serviceVersion: IOP_VERSION, logger });
const cp = await startControlPlane(config, { logger }).catch((err) =>
  startupFailed(
    logger,
    `serve HTTP on ${config.http.host}:${config.http.port} and the edge wire on ${config.wire.host}:${config.wire.port}`,
    err,
  )
);

// A stop signal drains (drain.ts): no new command, those in flight get their results for up to
// shutdown.drain_timeout_ms over the still open edge wire, then the rest are recorded unknown.
// A second signal during the drain ends the wait at once; one after it exits at once.
let stopping: AbortController | undefined;
let drained = false;
const onSignal = (signal: string) => {
  if (!stopping) {
    stopping = new AbortController();
    shutdown(signal, stopping.signal).catch((err) => {
      logger.error("control plane cannot stop cleanly; exiting", { err });
      Deno.exit(1);
    });
    return;
  }
  if (!drained && !stopping.signal.aborted) {
    logger.warn("control plane stopping at once: signal received again during the drain", {
      signal,
      shares_left: cp.commands.inFlight().shares,
    });
    stopping.abort();
    return;
  }
  logger.warn("control plane exiting at once: signal received again while it stops", { signal });
  Deno.exit(1);
};

const shutdown = async (signal: string, stopAtOnce: AbortSignal) => {
  logger.info("control plane stopping", { signal });
  await drainCommands({
    commands: cp.commands,
    timeoutMs: config.shutdown.drainTimeoutMs,
    logger: logger.with({ cp_id: config.controlPlane.id }),
    signal: stopAtOnce,
  });
  drained = true;
  // Every command has its final outcome in the audit: closing the store writes it out.
  await cp.stop();
  await shutdownTracing();
  logger.info("control plane stopped");
  Deno.exit(0);
};
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  Deno.addSignalListener(signal, () => onSignal(signal));
}
