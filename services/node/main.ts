/**
 * Starts a Node: reads its config, opens its run history, dials its Edge, serves health and
 * metrics; on SIGTERM or SIGINT it drains its runs (`drain.ts`) and exits 0 (1 when some run
 * did not end when cancelled, or a signal came again after the drain).
 * Usage: `deno task node [--config deploy/config/node.yaml]`.
 * @module
 */
import { Registry } from "prom-client";
import { configPathFromArgs } from "../../shared/config.ts";
import { createLogger } from "../../shared/log.ts";
import { startupFailed, startupStep } from "../../shared/startup.ts";
import { setUpTracing, shutdownTracing } from "../../shared/tracing.ts";
import { IOP_VERSION } from "../../shared/version.ts";
import { loadDialTls, requireLinkSecurity } from "../../shared/wire/tls.ts";
import { createWireMetrics } from "../../shared/wire/wire_metrics.ts";
import { registerProcessMetrics } from "../../shared/process_metrics.ts";
import { startMemoryTrim } from "../../shared/memory_trim.ts";
import { createAdapterMetrics } from "./adapters/adapter_metrics.ts";
import { adapterCatalog } from "./adapters/catalog.ts";
import { reapOrphanedGroups } from "./adapters/group_reaper.ts";
import { buildAdapterRegistry } from "./adapters/registry.ts";
import { loadNodeConfig } from "./config.ts";
import { drainRuns } from "./drain.ts";
import { HealthMonitor, probeOnFailure } from "./health_monitor.ts";
import { createNodeHttp } from "./http/health.ts";
import { NodeCore } from "./node.ts";
import { loadNodeKey } from "./node_key.ts";
import { createRunMetrics } from "./node_metrics.ts";
import { logNodePolicy } from "./policy.ts";
import { openRunStore } from "./store/sqlite_store.ts";
import { startEdgeClient } from "./transport/edge_client.ts";

const logger = createLogger("node");
const file = configPathFromArgs(Deno.args, "deploy/config/node.yaml");
let config;
let edgeTls;
try {
  config = await loadNodeConfig(file);
  edgeTls = requireLinkSecurity(config.edge.security);
  // Read the certificate files once up front so a wrong path stops the start, not each dial.
  if (edgeTls) await loadDialTls(edgeTls);
} catch (err) {
  logger.error("cannot start node: invalid config", { err });
  Deno.exit(2);
}
if (!edgeTls) {
  logger.warn(
    "the link to the edge is plaintext (edge.insecure_plaintext: true): the node token and " +
      "every run travel unencrypted, and whoever answers at the edge address is obeyed",
    { edge: config.edge.address },
  );
}

logNodePolicy(logger.with({ node_id: config.node.id }), config.policy);
await setUpTracing({ serviceName: "iop-node", serviceVersion: IOP_VERSION, logger });

const registry = new Registry();
registerProcessMetrics(registry);
// Native memory a burst of load freed goes back to the OS (glibc keeps it otherwise).
startMemoryTrim();
const adapterMetrics = createAdapterMetrics(registry);
const store = await Deno.mkdir(dirOf(config.history.path), { recursive: true })
  .then(() =>
    openRunStore(config.history.path, {
      onWriteError: (err) => logger.error("cannot write run history", { err }),
      outputCapBytes: config.history.outputCapBytes,
    })
  )
  .catch((err) => startupFailed(logger, `open the run history at ${config.history.path}`, err));
const interrupted = store.markInterrupted(Date.now());
if (interrupted > 0) {
  logger.warn("runs left unfinished by a previous process marked interrupted", {
    count: interrupted,
  });
}

// CLI runs whose Node died hard (kill -9, OOM) keep running; stop them before taking new work.
// The node's own secret, beside its history: an Edge that enrolls it binds its id to it.
const nodeKeyFile = `${dirOf(config.history.path)}/node.key`;
const nodeKey = await loadNodeKey(nodeKeyFile)
  .catch((err) => startupFailed(logger, `read or make the node key at ${nodeKeyFile}`, err));

const cliGroupsDir = `${dirOf(config.history.path)}/cli-groups`;
await reapOrphanedGroups(cliGroupsDir, { logger: logger.with({ node_id: config.node.id }) });

// Probes each adapter's backend at every config applied, periodically, and after a failed run.
const health = new HealthMonitor({
  intervalMs: config.health.intervalMs,
  probeTimeoutMs: config.health.probeTimeoutMs,
  logger: logger.with({ node_id: config.node.id }),
});
const factories = probeOnFailure(
  adapterCatalog({
    metrics: adapterMetrics,
    cliStateDir: cliGroupsDir,
    nodeId: config.node.id,
  }),
  (adapter) => void health.check(adapter),
);

const core = new NodeCore({
  nodeId: config.node.id,
  store,
  logger: logger.with({ node_id: config.node.id }),
  metrics: createRunMetrics(registry),
  policy: config.policy,
  outputCapBytes: config.history.outputCapBytes,
  buildAdapters: (configs) => {
    const built = buildAdapterRegistry(configs, factories);
    health.track(built.adapters.list());
    return built;
  },
});
health.start();

const client = startEdgeClient({
  edgeAddress: config.edge.addresses,
  failbackMs: config.edge.failbackMs,
  tls: edgeTls,
  nodeId: config.node.id,
  token: config.node.token,
  nodeKey,
  version: IOP_VERSION,
  core,
  logger: logger.with({ node_id: config.node.id }),
  maxFrameBytes: config.edge.maxFrameBytes,
  resumeGraceMs: config.edge.resumeGraceMs,
  backoffInitialMs: config.edge.backoffInitialMs,
  backoffMaxMs: config.edge.backoffMaxMs,
  wireMetrics: createWireMetrics(registry, "node", "edge"),
  health,
});

const app = createNodeHttp({
  nodeId: config.node.id,
  registered: () => client.registered,
  inFlight: () => core.inFlight,
  stopping: () => core.stopping,
  adapterHealth: () => health.current(),
}, registry);
const server = startupStep(
  logger,
  `serve HTTP on ${config.http.host}:${config.http.port}`,
  () =>
    Deno.serve({
      hostname: config.http.host,
      port: config.http.port,
      onListen: ({ hostname, port }) =>
        logger.info("node listening", {
          node_id: config.node.id,
          http: `${hostname}:${port}`,
          edge: config.edge.address,
          history: config.history.path,
        }),
    }, app.fetch),
);

// A stop signal drains (drain.ts): no new runs, those in flight finish for up to
// shutdown.drain_timeout_ms while the link stays up, then the rest are cancelled. A second
// signal during the drain cancels them at once; one after it (or a third) exits at once.
let stopping: AbortController | undefined;
let drained = false;
const onSignal = (signal: string) => {
  if (!stopping) {
    stopping = new AbortController();
    shutdown(signal, stopping.signal).catch((err) => {
      logger.error("node cannot stop cleanly; exiting", { node_id: config.node.id, err });
      Deno.exit(1);
    });
    return;
  }
  if (!drained && !stopping.signal.aborted) {
    logger.warn("node stopping at once: signal received again during the drain", {
      signal,
      runs_left: core.inFlight,
    });
    stopping.abort();
    return;
  }
  logger.warn("node exiting at once: signal received again while it stops", {
    node_id: config.node.id,
    signal,
  });
  Deno.exit(1);
};

const shutdown = async (signal: string, stopAtOnce: AbortSignal) => {
  logger.info("node stopping", { signal, runs_in_flight: core.inFlight });
  const outcome = await drainRuns({
    core,
    announce: (deadlineMs) => client.announceDraining(deadlineMs),
    timeoutMs: config.shutdown.drainTimeoutMs,
    logger: logger.with({ node_id: config.node.id }),
    signal: stopAtOnce,
  });
  drained = true;
  if (outcome === "abandoned") {
    // Runs that ignored their cancellation would hold every step below; the next start marks
    // them interrupted in the history.
    logger.error("node exiting with runs that did not end", {
      node_id: config.node.id,
      runs_left: core.inFlight,
    });
    Deno.exit(1);
  }
  await client.stop();
  health.stop();
  await core.close();
  await server.shutdown();
  // Every run has ended and been recorded: closing the store writes the history out.
  store.close();
  await shutdownTracing();
  logger.info("node stopped", { node_id: config.node.id });
  Deno.exit(0);
};
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  Deno.addSignalListener(signal, () => onSignal(signal));
}

function dirOf(path: string): string {
  const i = path.lastIndexOf("/");
  return i <= 0 ? "." : path.slice(0, i);
}
