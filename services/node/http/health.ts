/**
 * The Node's small HTTP face: liveness, readiness (registered with its Edge) and metrics.
 * @module
 */
import { Hono } from "hono";
import type { Registry } from "prom-client";

/** What the health endpoints read. */
export interface NodeHealth {
  nodeId: string;
  registered(): boolean;
  inFlight(): number;
}

/** Builds the Node's HTTP app: `/healthz`, `/readyz`, `/metrics`. */
export function createNodeHttp(health: NodeHealth, registry: Registry): Hono {
  const app = new Hono();
  app.get("/healthz", (c) => c.json({ status: "ok", node_id: health.nodeId }));
  app.get("/readyz", (c) => {
    const ready = health.registered();
    return c.json(
      {
        status: ready ? "ready" : "not registered with edge",
        node_id: health.nodeId,
        runs_in_flight: health.inFlight(),
      },
      ready ? 200 : 503,
    );
  });
  app.get("/metrics", async (c) => {
    c.header("Content-Type", registry.contentType);
    return c.body(await registry.metrics());
  });
  return app;
}
