/**
 * Prometheus metrics of the Control Plane: attached edges, fleet commands by kind and outcome,
 * and late answers that replaced an unknown share. Wire counters come from
 * `shared/wire/wire_metrics.ts`.
 * @module
 */
import { Counter, Gauge, type Registry } from "prom-client";

/** The Control Plane's own metrics. */
export interface CpMetrics {
  edgesConnected: Gauge;
  edgeHellos: Counter<"verdict">;
  commandsFinished: Counter<"kind" | "outcome">;
  commandLateResults: Counter<"kind" | "status">;
}

/** Declares the Control Plane metrics in `registry`. */
export function createCpMetrics(registry: Registry): CpMetrics {
  return {
    edgesConnected: new Gauge({
      name: "iop_cp_edges_connected",
      help: "Edges attached to this Control Plane now.",
      registers: [registry],
    }),
    edgeHellos: new Counter({
      name: "iop_cp_edge_hellos_total",
      help: "Edge hellos by verdict.",
      labelNames: ["verdict"],
      registers: [registry],
    }),
    commandsFinished: new Counter({
      name: "iop_cp_commands_finished_total",
      help: "Fleet commands finished, by kind and first outcome.",
      labelNames: ["kind", "outcome"],
      registers: [registry],
    }),
    commandLateResults: new Counter({
      name: "iop_cp_command_late_results_total",
      help: "Edge answers that arrived after a share was recorded unknown, by kind and status.",
      labelNames: ["kind", "status"],
      registers: [registry],
    }),
  };
}
