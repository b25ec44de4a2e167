/**
 * Assembles a running Control Plane from its config: audit store, edge registry, command
 * center, the series of edge samples with the sampler that asks edges for status, edge wire
 * server and HTTP app. `main.ts` and tests both start it through here.
 * @module
 */
import { Registry } from "prom-client";
import { createLogger, type Logger } from "../../shared/log.ts";
import { createWireMetrics } from "../../shared/wire/wire_metrics.ts";
import { registerProcessMetrics } from "../../shared/process_metrics.ts";
import { CommandCenter } from "./commands.ts";
import type { CpConfig } from "./config.ts";
import { createCpMetrics } from "./cp_metrics.ts";
import { createCpHttp } from "./http/app.ts";
import type { AuditLog } from "./ports.ts";
import { EdgeRegistry } from "./registry.ts";
import { SeriesStore } from "./series.ts";
import { startStatusSampler } from "./status_sampler.ts";
import { openAuditStore } from "./store/audit_store.ts";
import { startEdgeServer } from "./transport/edge_server.ts";
import { loadListenTls, requireLinkSecurity } from "../../shared/wire/tls.ts";

/** A running Control Plane. */
export interface ControlPlane extends AsyncDisposable {
  readonly registry: EdgeRegistry;
  readonly commands: CommandCenter;
  readonly audit: AuditLog;
  /** The charts' samples per edge. */
  readonly series: SeriesStore;
  /** `host:port` edges dial. */
  readonly wireAddress: string;
  /** Base URL of the HTTP API, e.g. `http://127.0.0.1:8090`. */
  readonly httpUrl: string;
  /** Closes the listeners, every edge link and the audit file. */
  stop(): Promise<void>;
}

/** Options of {@linkcode startControlPlane}. */
export interface StartOptions {
  /** Defaults to a logger named "cp". */
  logger?: Logger;
}

/** Starts a Control Plane; the audit file's directory is created when missing. */
export async function startControlPlane(
  config: CpConfig,
  options: StartOptions = {},
): Promise<ControlPlane> {
  const logger = (options.logger ?? createLogger("cp")).with({ cp_id: config.controlPlane.id });
  if (config.audit.path !== ":memory:") {
    const dir = config.audit.path.slice(0, Math.max(0, config.audit.path.lastIndexOf("/")));
    if (dir) await Deno.mkdir(dir, { recursive: true });
  }
  const audit = openAuditStore(config.audit.path);
  const metricsRegistry = new Registry();
  registerProcessMetrics(metricsRegistry);
  const metrics = createCpMetrics(metricsRegistry);
  const registry = new EdgeRegistry({ eventsPerEdge: config.registry.eventsPerEdge });
  const series = new SeriesStore(config.series);
  registry.subscribe((event) => {
    if (event.event.case === "link") metrics.edgesConnected.set(registry.connectedCount);
    if (event.event.case === "status") series.record(event.edgeId, event.event.value, Date.now());
  });
  const commands = new CommandCenter({
    registry,
    audit,
    logger,
    defaultTimeoutMs: config.commands.defaultTimeoutMs,
    resultGraceMs: config.commands.resultGraceMs,
    retained: config.commands.retained,
    onFinished: (kind, outcome) => metrics.commandsFinished.labels(kind, outcome).inc(),
    onLateResult: (kind, status) => metrics.commandLateResults.labels(kind, status).inc(),
  });
  warnAboutAccess(config, logger);
  if (config.wire.edges.length === 0) {
    logger.warn("no edges configured under wire.edges: every edge will be refused");
  }
  const wireTlsFiles = requireLinkSecurity(config.wire.security);
  const wireTls = wireTlsFiles ? await loadListenTls(wireTlsFiles) : undefined;
  if (!wireTls) {
    logger.warn(
      "the edge wire is plaintext (wire.insecure_plaintext: true): edge credentials and fleet " +
        "commands travel unencrypted",
      { edge_wire: `${config.wire.host}:${config.wire.port}` },
    );
  }
  const wire = await startEdgeServer({
    config,
    registry,
    commands,
    logger,
    ...(wireTls ? { tls: wireTls } : {}),
    wireMetrics: createWireMetrics(metricsRegistry, "cp", "edge"),
    onHello: (verdict) => metrics.edgeHellos.labels(verdict).inc(),
  });
  const app = createCpHttp({
    config,
    registry,
    commands,
    audit,
    series,
    metrics: metricsRegistry,
    logger,
  });
  const stopSampling = startStatusSampler({
    registry,
    intervalMs: config.series.sampleIntervalMs,
    timeoutMs: config.registry.statusTimeoutMs,
  });
  const http = Deno.serve({
    hostname: config.http.host,
    port: config.http.port,
    onListen: () => {},
  }, app.fetch);
  const httpUrl = `http://${http.addr.hostname}:${http.addr.port}`;
  const wireAddress = `${wire.hostname}:${wire.port}`;
  logger.info("control plane listening", { http: httpUrl, edge_wire: wireAddress });
  let stopped: Promise<void> | undefined;
  const stop = () =>
    stopped ??= (async () => {
      stopSampling();
      commands.close();
      await wire.close();
      await http.shutdown();
      audit.close();
    })();
  return {
    registry,
    commands,
    audit,
    series,
    wireAddress,
    httpUrl,
    stop,
    [Symbol.asyncDispose]: stop,
  };
}

/** Says at startup what the access config means, and what to change when it is deprecated. */
function warnAboutAccess(config: CpConfig, logger: Logger): void {
  const { tokens } = config.access;
  if (tokens.length === 0) {
    logger.warn(
      "no access tokens configured under access.tokens: every data route and the /client " +
        "socket refuse all callers",
    );
  }
  const legacy = tokens.filter((t) => t.declaredIn === "admin.tokens").map((t) => t.name);
  if (legacy.length > 0) {
    logger.warn(
      "admin.tokens is deprecated: its tokens act as operate tokens named admin-1, admin-2, …; " +
        "list them under access.tokens as { name, token, role: operate } instead",
      { tokens: legacy.join(",") },
    );
  }
  logger.info("access tokens loaded", {
    read: tokens.filter((t) => t.role === "read").length,
    operate: tokens.filter((t) => t.role === "operate").length,
    allowed_origins: config.access.allowedOrigins.join(","),
  });
}
