/**
 * Prometheus counters for a service's proto-socket links:
 * `iop_<svc>_wire_frames_total`, `iop_<svc>_wire_bytes_total` and
 * `iop_<svc>_wire_rejected_connections_total`.
 * @module
 */
import { Counter, type Registry } from "prom-client";
import type { WireMetrics } from "./connection.ts";

/**
 * Wire counters of service `svc` (e.g. "edge") for one `link` (e.g. "node"); a service with
 * several links shares the counters, told apart by the `link` label.
 */
export function createWireMetrics(registry: Registry, svc: string, link: string): WireMetrics {
  const counter = (name: string, help: string, labelNames: string[]) =>
    (registry.getSingleMetric(name) as Counter | undefined) ??
      new Counter({ name, help, labelNames, registers: [registry] });
  const frames = counter(`iop_${svc}_wire_frames_total`, "Protocol frames sent and received.", [
    "link",
    "direction",
  ]);
  const bytes = counter(
    `iop_${svc}_wire_bytes_total`,
    "Bytes sent and received on proto-socket links.",
    ["link", "direction"],
  );
  const rejected = counter(
    `iop_${svc}_wire_rejected_connections_total`,
    "Connections closed because of what the peer sent, by reason.",
    ["link", "reason"],
  );
  const framesIn = frames.labels(link, "in");
  const framesOut = frames.labels(link, "out");
  const bytesIn = bytes.labels(link, "in");
  const bytesOut = bytes.labels(link, "out");
  return {
    frame: (direction) => (direction === "in" ? framesIn : framesOut).inc(),
    bytes: (direction, count) => (direction === "in" ? bytesIn : bytesOut).inc(count),
    rejected: (reason) => rejected.labels(link, reason).inc(),
  };
}
