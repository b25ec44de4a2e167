/**
 * The Edge's HTTP app: health, readiness, metrics, and the operator views (the status snapshot
 * and run outputs, `run_output.ts`, for operator tenants only). The public API surfaces (OpenAI, Ollama, A2A) are mounted onto it by
 * `main.ts`. Every route, mounted ones included, first passes the `Host` allow-list (DNS
 * rebinding) and the browser `Origin` check, then gets its trace (`trace_requests.ts`).
 * @module
 */
import { Hono } from "hono";
import type { Registry } from "prom-client";
import { hostGuard } from "./host_guard.ts";
import { originGuard } from "./origin_guard.ts";
import {
  operatorGuards,
  RUN_OUTPUT_PATH,
  type RunOutputGateway,
  runOutputRoute,
} from "./run_output.ts";
import { servableModels } from "../servable.ts";
import { traceRequests } from "./trace_requests.ts";

/** Builds the base Edge HTTP app. */
export function createEdgeHttp(service: RunOutputGateway, registry: Registry): Hono {
  const app = new Hono();
  // Registered before any route, so they run for every route added later too.
  app.use("*", hostGuard(() => service.config));
  app.use("*", originGuard(() => service.config.http.cors.allowedOrigins));
  app.use("*", traceRequests());
  app.get("/healthz", (c) => c.json({ status: "ok", edge_id: service.config.edge.id }));
  // Ready while some model can run now: a connected, non-draining node with a healthy resource.
  app.get("/readyz", (c) => {
    const status = service.status();
    const connected = status.nodes.filter((n) => n.connected).length;
    const models = servableModels(service.config.models, status);
    const ready = models.length > 0;
    return c.json({
      status: ready ? "ready" : "no model can be served",
      edge_id: status.edgeId,
      nodes_connected: connected,
      models_servable: models.length,
    }, ready ? 200 : 503);
  });
  app.get("/metrics", async (c) => {
    c.header("Content-Type", registry.contentType);
    return c.body(await registry.metrics());
  });
  // The status names every node, model and run count: an operator view, like run outputs.
  app.get("/api/iop/status", ...operatorGuards(service), (c) => c.json(service.status()));
  app.get(RUN_OUTPUT_PATH, ...runOutputRoute(service));
  return app;
}
