/**
 * The Control Plane's HTTP app: health, readiness, metrics, the edge registry views, fleet
 * commands, the fleet report, the audit log, the `/client` WebSocket and the dashboard. Write
 * endpoints need an admin bearer token; everything shown is what edges reported.
 * @module
 */
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
import { commandJson, messageJson } from "./json.ts";
import { matchesAnySecret } from "../../../shared/secrets.ts";

/** What the HTTP app serves from. */
export interface CpHttpDeps {
  config: CpConfig;
  registry: EdgeRegistry;
  commands: CommandCenter;
  audit: AuditLog;
  metrics: Registry;
  logger: Logger;
}

const STATUS_OF: Record<string, 400 | 401 | 404 | 500 | 503 | 504> = {
  INVALID_ARGUMENT: 400,
  UNAUTHENTICATED: 401,
  NOT_FOUND: 404,
  UNAVAILABLE: 503,
  TIMEOUT: 504,
};

/** Newest audit rows the fleet report summarises. */
const REPORT_COMMANDS = 200;

const DASHBOARD_FILES: Record<string, string> = {
  "/": "dashboard.html",
  "/dashboard.js": "dashboard.js",
};

/** Builds the Control Plane HTTP app. */
export function createCpHttp(deps: CpHttpDeps): Hono {
  const { config, registry, commands, audit } = deps;
  const app = new Hono();

  app.onError((err, c) => {
    const e = toIopError(err);
    const status = STATUS_OF[e.code] ?? 500;
    if (status === 500) deps.logger.error("request failed", { err, path: c.req.path });
    return c.json({ error: { code: e.code, message: e.message } }, status);
  });

  app.get("/healthz", (c) => c.json({ status: "ok", control_plane_id: config.controlPlane.id }));
  app.get("/readyz", (c) =>
    c.json({
      status: "ready",
      control_plane_id: config.controlPlane.id,
      edges_connected: registry.connectedCount,
    }));
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
    const refresh = ["1", "true"].includes(c.req.query("refresh") ?? "");
    const view = refresh
      ? await registry.refresh(id, config.registry.statusTimeoutMs)
      : registry.get(id);
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
    authorize(c, config);
    let submit;
    try {
      submit = fromJson(SubmitCommandSchema, await c.req.json() as JsonValue, {
        ignoreUnknownFields: false,
      });
    } catch (err) {
      throw new IopError("INVALID_ARGUMENT", `Cannot read the command: ${(err as Error).message}`);
    }
    if (!submit.command) throw new IopError("INVALID_ARGUMENT", "Cannot submit without a command");
    const command = commands.submit({
      selector: submit.edges ?? create(EdgeSelectorSchema, { all: true }),
      command: submit.command,
      actor: submit.actor || c.req.header("x-iop-actor") || "admin",
      via: "http",
    });
    return c.json({ commandId: command.commandId, edgeIds: [...command.edges.keys()] }, 202);
  });
  app.get("/commands", (c) => c.json({ commands: commands.list().map(commandJson) }));
  app.get("/commands/:id", (c) => {
    const command = commands.get(c.req.param("id"));
    if (!command) throw new IopError("NOT_FOUND", `Cannot find command '${c.req.param("id")}'`);
    return c.json(commandJson(command));
  });

  app.get(
    "/report",
    (c) => c.json(buildFleetReport(registry.list(), Date.now(), audit.recent(REPORT_COMMANDS))),
  );
  app.get("/audit", (c) => {
    const limit = Number(c.req.query("limit") ?? 100);
    return c.json({ records: audit.recent(Number.isInteger(limit) && limit > 0 ? limit : 100) });
  });

  app.get("/client", (c) => serveClientSocket(c.req.raw, deps));

  for (const [path, file] of Object.entries(DASHBOARD_FILES)) {
    app.get(path, async (c) => {
      const body = await Deno.readTextFile(new URL(file, import.meta.url));
      const type = file.endsWith(".html") ? "text/html" : "text/javascript";
      return c.body(body, 200, { "Content-Type": `${type}; charset=utf-8` });
    });
  }
  return app;
}

/** Throws UNAUTHENTICATED unless the request carries one of the configured admin tokens. */
function authorize(c: Context, config: CpConfig): void {
  if (config.admin.tokens.length === 0) {
    throw new IopError("UNAUTHENTICATED", "Write endpoints are disabled: no admin tokens set");
  }
  const header = c.req.header("authorization") ?? "";
  const token = header.startsWith("Bearer ") ? header.slice("Bearer ".length).trim() : "";
  if (!matchesAnySecret(token, config.admin.tokens)) {
    throw new IopError(
      "UNAUTHENTICATED",
      "Cannot accept the request: missing or wrong admin token",
    );
  }
}
