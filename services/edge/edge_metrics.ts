/**
 * Prometheus metrics of the Edge core: connected nodes, registrations and runs.
 * @module
 */
import { Counter, Gauge, Histogram, type Registry } from "prom-client";

/** Counters and gauges the service and transport record into. */
export interface EdgeMetrics {
  nodesConnected: Gauge;
  registrations: Counter<"outcome">;
  /** Refused registrations by why (`nodes/admission.ts` lists the reasons). */
  registrationRefusals: Counter<"reason">;
  /** Nodes holding a record under each enrollment rule, connected or kept while away. */
  enrolledNodes: Gauge<"rule">;
  runsStarted: Counter;
  runsFinished: Counter<"status">;
  runDuration: Histogram<"status">;
  runsInFlight: Gauge;
}

/** Declares the Edge core metrics in `registry`. */
export function createEdgeMetrics(registry: Registry): EdgeMetrics {
  const registers = [registry];
  return {
    nodesConnected: new Gauge({
      name: "iop_edge_nodes_connected",
      help: "Nodes currently registered with this Edge.",
      registers,
    }),
    registrations: new Counter({
      name: "iop_edge_node_registrations_total",
      help: "Node registration attempts by outcome (accepted, refused).",
      labelNames: ["outcome"],
      registers,
    }),
    registrationRefusals: new Counter({
      name: "iop_edge_node_registration_refusals_total",
      help: "Refused node registrations by reason (unknown_node, wrong_token, certificate, " +
        "id_not_admitted, invalid_id, rule_full, duplicate, name_taken, template, protocol, " +
        "no_register).",
      labelNames: ["reason"],
      registers,
    }),
    enrolledNodes: new Gauge({
      name: "iop_edge_enrolled_nodes",
      help: "Nodes enrolled under each enrollment rule (connected or kept while disconnected).",
      labelNames: ["rule"],
      registers,
    }),
    runsStarted: new Counter({
      name: "iop_edge_runs_started_total",
      help: "Runs dispatched to nodes.",
      registers,
    }),
    runsFinished: new Counter({
      name: "iop_edge_runs_finished_total",
      help: "Runs finished, by status (completed, failed, cancelled).",
      labelNames: ["status"],
      registers,
    }),
    runDuration: new Histogram({
      name: "iop_edge_run_duration_seconds",
      help: "Time from dispatch to the terminal event, by status.",
      labelNames: ["status"],
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
      registers,
    }),
    runsInFlight: new Gauge({
      name: "iop_edge_runs_in_flight",
      help: "Runs dispatched and not yet finished.",
      registers,
    }),
  };
}
