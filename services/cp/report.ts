/**
 * The fleet report: per edge, its health and what it reported (nodes, providers with
 * in-flight/queued counts, agents), and fleet-wide totals. Built only from the registry.
 * @module
 */
import type { EdgeView } from "../../proto/gen/iop/v1/control_pb.ts";

/** One edge's line in the fleet report. */
export interface EdgeReport {
  edgeId: string;
  /** healthy: attached and every known node connected; degraded: attached, some node down. */
  health: "healthy" | "degraded" | "disconnected";
  version: string;
  labels: Record<string, string>;
  lastSeenMs: number;
  nodes: { connected: number; known: number; draining: number };
  providers: { id: string; node: string; target: string; inFlight: number; queued: number }[];
  agents: { id: string; state: string; detail: string }[];
  runsInFlight: number;
}

/** The whole fleet report. */
export interface FleetReport {
  generatedAtMs: number;
  edges: { connected: number; known: number };
  nodes: { connected: number; known: number };
  runsInFlight: number;
  agents: Record<string, number>;
  perEdge: EdgeReport[];
}

/** Builds the fleet report from the registry's edge views. */
export function buildFleetReport(views: readonly EdgeView[], nowMs: number): FleetReport {
  const perEdge = views.map((v): EdgeReport => {
    const nodes = v.status?.nodes ?? [];
    const connected = nodes.filter((n) => n.connected).length;
    return {
      edgeId: v.edgeId,
      health: !v.connected ? "disconnected" : connected < nodes.length ? "degraded" : "healthy",
      version: v.version,
      labels: { ...v.labels },
      lastSeenMs: Number(v.lastSeenMs),
      nodes: { connected, known: nodes.length, draining: nodes.filter((n) => n.draining).length },
      providers: nodes.flatMap((n) =>
        n.resources.filter((r) => r.kind === "provider").map((r) => ({
          id: r.id,
          node: n.id,
          target: r.target,
          inFlight: r.inFlight,
          queued: r.queued,
        }))
      ),
      agents: (v.status?.agents ?? []).map((a) => ({ id: a.id, state: a.state, detail: a.detail })),
      runsInFlight: v.status?.edge?.runsInFlight ?? 0,
    };
  });
  const agents: Record<string, number> = {};
  for (const e of perEdge) for (const a of e.agents) agents[a.state] = (agents[a.state] ?? 0) + 1;
  return {
    generatedAtMs: nowMs,
    edges: { connected: views.filter((v) => v.connected).length, known: views.length },
    nodes: {
      connected: perEdge.reduce((n, e) => n + e.nodes.connected, 0),
      known: perEdge.reduce((n, e) => n + e.nodes.known, 0),
    },
    runsInFlight: perEdge.reduce((n, e) => n + e.runsInFlight, 0),
    agents,
    perEdge,
  };
}
