/**
 * Prometheus metrics of the provider pools: queue depth and wait per pool, admissions and
 * rejections, and in-flight and queued runs per provider.
 * @module
 */
import { Counter, Gauge, Histogram, type Registry } from "prom-client";

/** What the provider pools record into. */
export interface PoolMetrics {
  queueDepth: Gauge<"pool">;
  queueWait: Histogram<"pool">;
  admissions: Counter<"pool" | "outcome">;
  providerInFlight: Gauge<"provider">;
  providerQueued: Gauge<"provider">;
}

/** Declares the pool metrics in `registry`. */
export function createPoolMetrics(registry: Registry): PoolMetrics {
  const registers = [registry];
  return {
    queueDepth: new Gauge({
      name: "iop_edge_pool_queue_depth",
      help: "Requests waiting in a provider pool's queue.",
      labelNames: ["pool"],
      registers,
    }),
    queueWait: new Histogram({
      name: "iop_edge_pool_queue_wait_seconds",
      help: "Time a request waited in a provider pool's queue before dispatch.",
      labelNames: ["pool"],
      buckets: [0.001, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers,
    }),
    admissions: new Counter({
      name: "iop_edge_pool_admissions_total",
      help:
        "Pool admission outcomes (dispatched, queued, rejected_full, rejected_timeout, rejected_no_provider, retried).",
      labelNames: ["pool", "outcome"],
      registers,
    }),
    providerInFlight: new Gauge({
      name: "iop_edge_provider_in_flight",
      help: "Runs dispatched to a provider and not yet finished.",
      labelNames: ["provider"],
      registers,
    }),
    providerQueued: new Gauge({
      name: "iop_edge_provider_queued",
      help: "Queued requests whose preferred provider is this one.",
      labelNames: ["provider"],
      registers,
    }),
  };
}
