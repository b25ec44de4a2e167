/**
 * The Control Plane's HTTP app: health, readiness, metrics, the edge registry views, fleet
 * commands, the fleet report, the dashboard's read routes (series, node history and run output
 * through the edge wire, the filtered audit: `fleet_views.ts`), the `/client` WebSocket and the
 * dashboard. Every
 * route but health, readiness, metrics, the dashboard's files and `/client` (which checks its
 * own callers) needs a named access token (see `access.ts`); writes need the operate role, and
 * commands are audited under the token's name. Everything shown is what edges reported.
 * @module
 */
import {
  cleanTracestate,
  formatTraceparent,
  parseTraceparent,
} from "../../../shared/trace_context.ts";
import { withTrace } from "../../../shared/tracing.ts";
import { create, fromJson, type JsonValue } from "@bufbuild/protobuf";
import { type Context, Hono } from "hono";
import type { Registry } from "prom-client";
import {
  EdgeSelectorSchema,
  EdgeViewSchema,
  RelayedEventSchema,
  SubmitCommandSchema,
} from "../../../proto/gen/iop/v1/control_pb.ts";
import { IopError, toIopError } from "../../../shared/errors.ts";
import type { Logger } from "../../../shared/log.ts";
import type { CommandCenter } from "../commands.ts";
import type { CpConfig } from "../config.ts";
import type { AuditLog } from "../ports.ts";
import type { EdgeRegistry } from "../registry.ts";
import { buildFleetReport } from "../report.ts";
import { serveClientSocket } from "./client_socket.ts";
import type { PushFlowOptions } from "./socket_flow.ts";
import { commandJson, messageJson } from "./json.ts";
import { RefreshLimiter, type RefreshOutcome } from "../refresh_limiter.ts";
import { accessGuard, type CpEnv } from "./access.ts";
import { registerFleetViews } from "./fleet_views.ts";
import { SeriesStore } from "../series.ts";

/** What the HTTP app serves from. */
export interface CpHttpDeps {
  config: CpConfig;
  registry: EdgeRegistry;
  commands: CommandCenter;
  audit: AuditLog;
  metrics: Registry;
  logger: Logger;
  /** The charts' samples; defaults to an empty store (nothing feeds it). */
  series?: SeriesStore;
  /** Clock of the refresh rate limit; defaults to Date.now. */
  now?: () => number;
  /** Bounds of what `/client` sockets hold for slow clients; defaults to DEFAULT_PUSH_FLOW. */
  clientFlow?: PushFlowOptions;
}

/** Fleet-wide status refreshes, rate-limited; shared by the HTTP routes and `/client`. */
export interface FleetRefresher {
  /** Asks every connected edge for a fresh status, unless one did less than the interval ago. */
  fleet(): Promise<RefreshOutcome>;
  /** Asks one edge, with the same rule per edge. NOT_FOUND / UNAVAILABLE pass through. */
  edge(edgeId: string): Promise<RefreshOutcome>;
}

const STATUS_OF: Record<string, 400 | 401 | 404 | 500 | 503 | 504> = {
  INVALID_ARGUMENT: 400,
  UNAUTHENTICATED: 401,
  NOT_FOUND: 404,
  NODE_LOST: 503,
  UNAVAILABLE: 503,
  TIMEOUT: 504,
};

/** Newest audit rows the fleet report summarises. */
const REPORT_COMMANDS = 200;

const DASHBOARD_FILES: Record<string, string> = {
  "/": "dashboard.html",
  "/dashboard.js": "dashboard.js",
  "/dashboard_common.js": "dashboard_common.js",
  "/dashboard_charts.js": "dashboard_charts.js",
  "/dashboard_views.js": "dashboard_views.js",
};

/** Served to anyone: no fleet data (`/client` checks its callers itself). */
const OPEN_PATHS: ReadonlySet<string> = new Set([
  "/healthz",
  "/readyz",
  "/metrics",
  "/client",
  ...Object.keys(DASHBOARD_FILES),
]);

/** Builds the Control Plane HTTP app. */
export function createCpHttp(deps: CpHttpDeps): Hono<CpEnv> {
  const { config, registry, commands, audit } = deps;
  const app = new Hono<CpEnv>();
  const refresh = fleetRefresher(deps);

  app.onError((err, c) => {
    const e = toIopError(err);
    const status = STATUS_OF[e.code] ?? 500;
    if (status === 500) deps.logger.error("request failed", { err, path: c.req.path });
    return c.json({ error: { code: e.code, message: e.message } }, status);
  });

  app.use("*", accessGuard({ access: config.access, open: OPEN_PATHS }));

  app.get("/healthz", (c) => c.json({ status: "ok", control_plane_id: config.controlPlane.id }));
  // A stopping Control Plane (drain.ts) is not ready: it takes no new command.
  app.get("/readyz", (c) =>
    c.json({
      status: commands.refusing ? "stopping" : "ready",
      control_plane_id: config.controlPlane.id,
      edges_connected: registry.connectedCount,
    }, commands.refusing ? 503 : 200));
  app.get("/metrics", async (c) => {
    c.header("Content-Type", deps.metrics.contentType);
    return c.body(await deps.metrics.metrics());
  });

  app.get(
    "/edges",
    (c) => c.json({ edges: registry.list().map((v) => messageJson(EdgeViewSchema, v)) }),
  );
  app.get("/edges/:id", async (c) => {
    const id = c.req.param("id");
    if (wantsRefresh(c)) refreshHeaders(c, await refresh.edge(id));
    const view = registry.get(id);
    if (!view) throw new IopError("NOT_FOUND", `Cannot find edge '${id}'`);
    return c.json(messageJson(EdgeViewSchema, view));
  });
  app.get("/edges/:id/events", (c) => {
    const id = c.req.param("id");
    const limit = Number(c.req.query("limit") ?? config.registry.eventsPerEdge);
    const events = registry.events(id, Number.isInteger(limit) && limit > 0 ? limit : undefined);
    if (!events) throw new IopError("NOT_FOUND", `Cannot find edge '${id}'`);
    return c.json({ edgeId: id, events: events.map((e) => messageJson(RelayedEventSchema, e)) });
  });

  app.post("/commands", async (c) => {
    let submit;
    try {
      submit = fromJson(SubmitCommandSchema, await c.req.json() as JsonValue, {
        ignoreUnknownFields: false,
      });
    } catch (err) {
      throw new IopError("INVALID_ARGUMENT", `Cannot read the command: ${(err as Error).message}`);
    }
    if (!submit.command) throw new IopError("INVALID_ARGUMENT", "Cannot submit without a command");
    const submission = {
      selector: submit.edges ?? create(EdgeSelectorSchema, { all: true }),
      command: submit.command,
      // The token's name, whatever the body's `actor` claims: the audit names who acted.
      actor: c.get("principal").name,
      via: "http" as const,
    };
    // A valid W3C traceparent header makes the command's runs on every edge join its trace.
    const parent = parseTraceparent(c.req.header("traceparent"));
    const command = parent
      ? withTrace({
        traceparent: formatTraceparent(parent),
        tracestate: cleanTracestate(c.req.header("tracestate")),
      }, () => commands.submit(submission))
      : commands.submit(submission);
    return c.json({ commandId: command.commandId, edgeIds: [...command.edges.keys()] }, 202);
  });
  app.get("/commands", (c) => c.json({ commands: commands.list().map(commandJson) }));
  app.get("/commands/:id", (c) => {
    const command = commands.get(c.req.param("id"));
    if (!command) throw new IopError("NOT_FOUND", `Cannot find command '${c.req.param("id")}'`);
    return c.json(commandJson(command));
  });

  app.get("/report", async (c) => {
    const outcome = wantsRefresh(c) ? await refresh.fleet() : undefined;
    if (outcome) refreshHeaders(c, outcome);
    const report = buildFleetReport(registry.list(), Date.now(), audit.recent(REPORT_COMMANDS));
    return c.json(outcome ? { ...report, refresh: outcome } : report);
  });
  registerFleetViews(app, {
    config,
    registry,
    audit,
    series: deps.series ?? new SeriesStore(config.series),
  });

  app.get("/client", (c) => serveClientSocket(c.req.raw, { ...deps, refresh }));

  for (const [path, file] of Object.entries(DASHBOARD_FILES)) {
    app.get(path, async (c) => {
      const body = await Deno.readTextFile(new URL(file, import.meta.url));
      const type = file.endsWith(".html") ? "text/html" : "text/javascript";
      return c.body(body, 200, { "Content-Type": `${type}; charset=utf-8` });
    });
  }
  return app;
}

function wantsRefresh(c: Context<CpEnv>): boolean {
  return ["1", "true"].includes(c.req.query("refresh") ?? "");
}

/**
 * `X-IOP-Refresh: performed` when this request asked the edges, `rate-limited` when it was
 * served from the last refresh (with `X-IOP-Refresh-Next-At-Ms`, when the next one may run).
 */
function refreshHeaders(c: Context<CpEnv>, outcome: RefreshOutcome): void {
  c.header("X-IOP-Refresh", outcome.performed ? "performed" : "rate-limited");
  c.header("X-IOP-Refresh-Last-At-Ms", String(outcome.lastAtMs));
  c.header("X-IOP-Refresh-Next-At-Ms", String(outcome.nextAtMs));
}

/** Status refreshes through one rate limit (`access.refresh_min_interval_ms`). */
function fleetRefresher(deps: CpHttpDeps): FleetRefresher {
  const { registry, config } = deps;
  const limiter = new RefreshLimiter({
    minIntervalMs: config.access.refreshMinIntervalMs,
    ...(deps.now ? { now: deps.now } : {}),
  });
  const timeoutMs = config.registry.statusTimeoutMs;
  return {
    fleet: () =>
      limiter.run("fleet", async () => {
        await Promise.allSettled(
          registry.list().filter((v) => v.connected).map((v) =>
            registry.refresh(v.edgeId, timeoutMs)
          ),
        );
      }),
    async edge(edgeId: string) {
      if (!registry.get(edgeId)) throw new IopError("NOT_FOUND", `Cannot find edge '${edgeId}'`);
      // One edge's failure to answer is its caller's error, as before the limit.
      let failure: unknown;
      const outcome = await limiter.run(`edge:${edgeId}`, async () => {
        await registry.refresh(edgeId, timeoutMs).catch((err) => failure = err);
      });
      if (failure !== undefined) throw failure;
      return outcome;
    },
  };
}
