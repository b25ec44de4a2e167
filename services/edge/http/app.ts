/**
 * The Edge's HTTP app: health, readiness, metrics and the status snapshot. The public API
 * surfaces (OpenAI, Ollama, A2A) are mounted onto it by `main.ts`.
 * @module
 */
import { Hono } from "hono";
import type { Registry } from "prom-client";
import type { RunGateway } from "../ports.ts";

/** Builds the base Edge HTTP app. */
export function createEdgeHttp(service: RunGateway, registry: Registry): Hono {
  const app = new Hono();
  app.get("/healthz", (c) => c.json({ status: "ok", edge_id: service.config.edge.id }));
  app.get("/readyz", (c) => {
    const status = service.status();
    const connected = status.nodes.filter((n) => n.connected).length;
    return c.json({ status: "ready", edge_id: status.edgeId, nodes_connected: connected });
  });
  app.get("/metrics", async (c) => {
    c.header("Content-Type", registry.contentType);
    return c.body(await registry.metrics());
  });
  app.get("/api/iop/status", (c) => c.json(service.status()));
  return app;
}
