/**
 * The Node's small HTTP face: liveness, readiness (registered with its Edge, at least one
 * adapter probed healthy, and not stopping: a draining node is not ready, so an orchestrator
 * sends it no more work while it finishes its runs) and metrics.
 * @module
 */
import { Hono } from "hono";
import type { Registry } from "prom-client";

/** What the health endpoints read. */
export interface NodeHealth {
  nodeId: string;
  registered(): boolean;
  inFlight(): number;
  /** Why it takes no new run (it is stopping); undefined while it takes them. */
  stopping(): string | undefined;
  /**
   * Adapter health by adapter name (and `<adapter>/<target>`); see `health_monitor.ts`.
   * Absent: readiness is registration alone.
   */
  adapterHealth?(): ReadonlyMap<string, { healthy: boolean; detail: string }>;
}

/** Builds the Node's HTTP app: `/healthz`, `/readyz`, `/metrics`. */
export function createNodeHttp(health: NodeHealth, registry: Registry): Hono {
  const app = new Hono();
  app.get("/healthz", (c) => c.json({ status: "ok", node_id: health.nodeId }));
  app.get("/readyz", (c) => {
    const registered = health.registered();
    const adapters = health.adapterHealth ? adapterRows(health.adapterHealth()) : undefined;
    const healthy = adapters === undefined || adapters.some((a) => a.healthy);
    const stopping = health.stopping();
    const ready = registered && healthy && stopping === undefined;
    return c.json(
      {
        status: ready
          ? "ready"
          : stopping !== undefined
          ? stopping
          : !registered
          ? "not registered with edge"
          : "no healthy adapter",
        node_id: health.nodeId,
        runs_in_flight: health.inFlight(),
        ...(adapters ? { adapters } : {}),
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

/** The adapter-level entries of the health picture (not the per-target ones). */
function adapterRows(
  picture: ReadonlyMap<string, { healthy: boolean; detail: string }>,
): { adapter: string; healthy: boolean; detail: string }[] {
  return [...picture].filter(([key]) => !key.includes("/"))
    .map(([adapter, state]) => ({ adapter, healthy: state.healthy, detail: state.detail }));
}
