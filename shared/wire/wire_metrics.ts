/**
 * Prometheus counters for a service's proto-socket links:
 * `iop_<svc>_wire_frames_total`, `iop_<svc>_wire_bytes_total` and
 * `iop_<svc>_wire_rejected_connections_total`.
 * @module
 */
import { Counter, type Registry } from "prom-client";
import type { WireMetrics } from "./connection.ts";

/** Declares the wire counters of service `svc` (e.g. "edge") in `registry`. */
export function createWireMetrics(registry: Registry, svc: string, link: string): WireMetrics {
  const frames = new Counter({
    name: `iop_${svc}_wire_frames_total`,
    help: "Protocol frames sent and received.",
    labelNames: ["link", "direction"],
    registers: [registry],
  });
  const bytes = new Counter({
    name: `iop_${svc}_wire_bytes_total`,
    help: "Bytes sent and received on proto-socket links.",
    labelNames: ["link", "direction"],
    registers: [registry],
  });
  const rejected = new Counter({
    name: `iop_${svc}_wire_rejected_connections_total`,
    help: "Connections closed because of what the peer sent, by reason.",
    labelNames: ["link", "reason"],
    registers: [registry],
  });
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
