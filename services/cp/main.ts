/**
 * Starts the Control Plane: reads its config and serves the edge wire, the HTTP API, the
 * `/client` WebSocket and the dashboard. Usage: `deno task cp [--config deploy/config/cp.yaml]`.
 * @module
 */
import { configPathFromArgs } from "../../shared/config.ts";
import { createLogger } from "../../shared/log.ts";
import { startupFailed } from "../../shared/startup.ts";
import { setUpTracing, shutdownTracing } from "../../shared/tracing.ts";
import { IOP_VERSION } from "../../shared/version.ts";
import { loadCpConfig } from "./config.ts";
import { startControlPlane } from "./control_plane.ts";

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

let stopping = false;
const shutdown = async (signal: string) => {
  if (stopping) return;
  stopping = true;
  logger.info("control plane stopping", { signal });
  await cp.stop();
  await shutdownTracing();
  Deno.exit(0);
};
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  Deno.addSignalListener(signal, () => void shutdown(signal));
}
