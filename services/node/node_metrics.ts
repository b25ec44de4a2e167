/**
 * Prometheus metrics of the Node core: runs by how they ended, their duration, runs in flight.
 * @module
 */
import { Counter, Gauge, Histogram, type Registry } from "prom-client";
import type { RunMetrics } from "./ports.ts";

/** Declares `iop_node_runs_total`, `iop_node_run_duration_seconds`, `iop_node_runs_in_flight`. */
export function createRunMetrics(registry: Registry): RunMetrics {
  const registers = [registry];
  const finished = new Counter({
    name: "iop_node_runs_total",
    help: "Runs this node finished, by status (completed, failed, cancelled).",
    labelNames: ["status"],
    registers,
  });
  const duration = new Histogram({
    name: "iop_node_run_duration_seconds",
    help: "Time from a run's start on this node to its end, by status.",
    labelNames: ["status"],
    buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
    registers,
  });
  const inFlight = new Gauge({
    name: "iop_node_runs_in_flight",
    help: "Runs executing on this node now.",
    registers,
  });
  return {
    runFinished: (status, seconds) => {
      finished.labels(status).inc();
      duration.labels(status).observe(seconds);
    },
    runsInFlight: (count) => inFlight.set(count),
  };
}
