/**
 * Starts an Edge: reads its config, serves the node wire and HTTP, and (with `--console` or an
 * interactive terminal) the ops console on stdin. Usage: `deno task edge [--config FILE]`.
 * @module
 */
import { Registry } from "prom-client";
import { configPathFromArgs } from "../../shared/config.ts";
import { createLogger } from "../../shared/log.ts";
import { startupStep } from "../../shared/startup.ts";
import { setUpTracing, shutdownTracing } from "../../shared/tracing.ts";
import { IOP_VERSION } from "../../shared/version.ts";
import { loadDialTls, loadListenTls, requireLinkSecurity } from "../../shared/wire/tls.ts";
import { createWireMetrics } from "../../shared/wire/wire_metrics.ts";
import { registerProcessMetrics } from "../../shared/process_metrics.ts";
import { startMemoryTrim } from "../../shared/memory_trim.ts";
import { openA2aTasks } from "./a2a/open.ts";
import { DomainAgents } from "./agents/domain_agents.ts";
import { loadEdgeConfig } from "./config.ts";
import { startCpLink } from "./cp_link/cp_link.ts";
import { OpsConsole } from "./console/console.ts";
import { createEdgeMetrics } from "./edge_metrics.ts";
import { createEdgeHttp } from "./http/app.ts";
import { mountSurfaces } from "./http/surfaces.ts";
import { createTenantMetrics } from "./tenants/tenant_metrics.ts";
import { createPoolMetrics } from "./pools/pool_metrics.ts";
import { EdgeService } from "./service.ts";
import { openResponseStoreFile } from "./store/response_store.ts";
import { startNodeServer } from "./transport/node_server.ts";

const logger = createLogger("edge");
const file = configPathFromArgs(Deno.args, "deploy/config/edge.yaml");
let config;
let wireTls;
try {
  config = await loadEdgeConfig(file);
  const wireTlsFiles = requireLinkSecurity(config.wire.security);
  wireTls = wireTlsFiles ? await loadListenTls(wireTlsFiles) : undefined;
  // Checked up front so a wrong path stops the start; the link reads them again per dial.
  if (config.controlPlane.address) {
    const cpTls = requireLinkSecurity(config.controlPlane.security);
    if (cpTls) await loadDialTls(cpTls);
  }
} catch (err) {
  logger.error("cannot start edge: invalid config", { err });
  Deno.exit(2);
}
if (!wireTls) {
  logger.warn(
    "the node wire is plaintext (wire.insecure_plaintext: true): node tokens, pushed " +
      "configuration and runs travel unencrypted",
    { node_wire: `${config.wire.host}:${config.wire.port}` },
  );
}
if (config.controlPlane.address && !config.controlPlane.security.tls) {
  logger.warn(
    "the control plane link is plaintext (control_plane.insecure_plaintext: true): the edge " +
      "credential and fleet commands travel unencrypted",
    { control_plane: config.controlPlane.address },
  );
}

await setUpTracing({ serviceName: "iop-edge", serviceVersion: IOP_VERSION, logger });
const registry = new Registry();
registerProcessMetrics(registry);
// Native memory a burst of load freed goes back to the OS (glibc keeps it otherwise).
startMemoryTrim();
const metrics = createEdgeMetrics(registry);
const service = new EdgeService({
  config,
  logger: logger.with({ edge_id: config.edge.id }),
  version: IOP_VERSION,
  metrics,
  poolMetrics: createPoolMetrics(registry),
  tenantMetrics: createTenantMetrics(registry),
  // A reload may re-point the Control Plane link; one that leaves it unsecured is refused.
  loadConfig: async () => {
    const next = await loadEdgeConfig(file);
    if (next.controlPlane.address) requireLinkSecurity(next.controlPlane.security);
    return next;
  },
});

const wire = await startupStep(
  logger,
  `listen for nodes on ${config.wire.host}:${config.wire.port}`,
  () =>
    startNodeServer({
      hostname: config.wire.host,
      port: config.wire.port,
      ...(wireTls ? { tls: wireTls } : {}),
      service,
      logger: createLogger("edge.transport").with({ edge_id: config.edge.id }),
      wireMetrics: createWireMetrics(registry, "edge", "node"),
      metrics,
    }),
);

const a2aTasks = await openA2aTasks(
  config,
  service,
  createLogger("edge.a2a").with({ edge_id: config.edge.id }),
);
// Bounds are read from the config in force at each use, so a reload applies them.
const responses = await startupStep(
  logger,
  `open the response store ${config.responses.storePath}`,
  () => openResponseStoreFile(config.responses.storePath, () => service.config.responses),
);
const app = createEdgeHttp(service, registry);
mountSurfaces(app, {
  service,
  registry,
  logger: createLogger("edge.http").with({ edge_id: config.edge.id }),
  a2aTasks,
  version: IOP_VERSION,
  responses,
});
const http = startupStep(
  logger,
  `serve HTTP on ${config.http.host}:${config.http.port}`,
  () =>
    Deno.serve(
      { hostname: config.http.host, port: config.http.port, onListen: () => {} },
      app.fetch,
    ),
);

logger.info("edge listening", {
  edge_id: config.edge.id,
  http: `${http.addr.hostname}:${http.addr.port}`,
  node_wire: `${wire.hostname}:${wire.port}`,
  node_wire_tls: !wireTls ? "off" : wireTls.clientCa ? "mutual" : "server",
  nodes_configured: config.nodes.length,
});

// One set of domain agents for the Control Plane link and the console, so both see one state.
const agents = new DomainAgents(service);

// The Control Plane link is optional: the Edge serves everything without it. The link always
// runs and idles while `control_plane.address` is empty, so a reload can attach, move or detach
// the Control Plane.
const cpLink = startCpLink({
  service,
  agents,
  version: IOP_VERSION,
  logger: createLogger("edge.cp_link").with({ edge_id: config.edge.id }),
  wireMetrics: createWireMetrics(registry, "edge", "control_plane"),
});

/** How long a stopping Edge lets the requests in flight finish (compose gives it 30 s). */
const DRAIN_MS = 25_000;

let stopping = false;
const shutdown = async (reason: string) => {
  if (stopping) return;
  stopping = true;
  logger.info("edge stopping", { reason, runs_in_flight: service.status().runsInFlight });
  // Stop taking requests first and let those in flight (streams included) finish while the node
  // wire still carries their runs; only then close the links.
  let timer: ReturnType<typeof setTimeout> | undefined;
  const drained = await Promise.race([
    http.shutdown().then(() => true),
    new Promise<false>((resolve) => timer = setTimeout(() => resolve(false), DRAIN_MS)),
  ]);
  clearTimeout(timer);
  if (!drained) {
    logger.warn("edge stopped before its requests finished", {
      drain_ms: DRAIN_MS,
      runs_in_flight: service.status().runsInFlight,
    });
  }
  await cpLink.stop();
  await wire.close();
  a2aTasks.close();
  responses.close();
  await shutdownTracing();
  Deno.exit(0);
};
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  Deno.addSignalListener(signal, () => void shutdown(signal));
}

if (
  Deno.args.includes("--console") ||
  (Deno.stdin.isTerminal() && !Deno.args.includes("--no-console"))
) {
  const encoder = new TextEncoder();
  const console = new OpsConsole(
    service,
    (text) => Deno.stdout.writeSync(encoder.encode(text)),
    agents,
  );
  await console.serve(Deno.stdin.readable);
  if (!Deno.args.includes("--stay")) await shutdown("console closed");
}
