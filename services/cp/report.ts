/**
 * The fleet report: per edge, its health and what it reported (nodes, providers with
 * in-flight/queued counts, agents), fleet-wide totals from the registry, and how recent fleet
 * commands ended from the audit, with the shares whose outcome is unknown or was learned late.
 * @module
 */
import type { EdgeView } from "../../proto/gen/iop/v1/control_pb.ts";
import type { AuditRecord, CommandOutcome, ShareStatus } from "./ports.ts";

/** Most shares listed under `commands.unknown` and `commands.late`. */
const SHARES_LISTED = 50;

/** One edge's line in the fleet report. */
export interface EdgeReport {
  edgeId: string;
  /**
   * healthy: attached and every known node connected here or `elsewhere`; degraded: attached,
   * some node down.
   */
  health: "healthy" | "degraded" | "disconnected";
  version: string;
  labels: Record<string, string>;
  lastSeenMs: number;
  /**
   * `elsewhere`: known nodes not connected here but to another attached edge, as a standby edge
   * sees the nodes of its active edge (the same node ids); they count as neither down here nor
   * twice in the fleet totals.
   */
  nodes: { connected: number; known: number; draining: number; elsewhere: number };
  providers: { id: string; node: string; target: string; inFlight: number; queued: number }[];
  agents: { id: string; state: string; detail: string }[];
  runsInFlight: number;
}

/** How the most recent fleet commands ended. */
export interface CommandsReport {
  /** Audit rows looked at, newest first. */
  considered: number;
  /** Commands by outcome (running, succeeded, failed, partial, unknown, interrupted). */
  outcomes: Partial<Record<CommandOutcome, number>>;
  /** Shares still unknown (deadline passed or link lost without an answer): check by hand. */
  unknown: { commandId: string; edgeId: string; kind: string; detail: string; sinceMs: number }[];
  /** Shares whose edge answered after they were recorded unknown ("completed late"). */
  late: {
    commandId: string;
    edgeId: string;
    kind: string;
    status: ShareStatus;
    learnedAtMs: number;
  }[];
}

/** The whole fleet report. */
export interface FleetReport {
  generatedAtMs: number;
  edges: { connected: number; known: number };
  nodes: { connected: number; known: number };
  runsInFlight: number;
  agents: Record<string, number>;
  perEdge: EdgeReport[];
  commands: CommandsReport;
}

/** Builds the fleet report from the registry's edge views and the newest audit records. */
export function buildFleetReport(
  views: readonly EdgeView[],
  nowMs: number,
  records: readonly AuditRecord[] = [],
): FleetReport {
  const perEdge = views.map((v): EdgeReport => {
    const nodes = v.status?.nodes ?? [];
    const connected = nodes.filter((n) => n.connected).length;
    const elsewhere = nodes.filter((n) => !n.connected && connectedOnOther(views, v, n.id))
      .length;
    return {
      edgeId: v.edgeId,
      health: !v.connected
        ? "disconnected"
        : connected + elsewhere < nodes.length
        ? "degraded"
        : "healthy",
      version: v.version,
      labels: { ...v.labels },
      lastSeenMs: Number(v.lastSeenMs),
      nodes: {
        connected,
        known: nodes.length,
        draining: nodes.filter((n) => n.draining).length,
        elsewhere,
      },
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
      known: perEdge.reduce((n, e) => n + e.nodes.known - e.nodes.elsewhere, 0),
    },
    runsInFlight: perEdge.reduce((n, e) => n + e.runsInFlight, 0),
    agents,
    perEdge,
    commands: commandsReport(records),
  };
}

/** True when an attached edge other than `self` shows node `id` connected (a standby's case). */
function connectedOnOther(views: readonly EdgeView[], self: EdgeView, id: string): boolean {
  return views.some((v) =>
    v !== self && v.connected && (v.status?.nodes ?? []).some((n) => n.id === id && n.connected)
  );
}

function commandsReport(records: readonly AuditRecord[]): CommandsReport {
  const report: CommandsReport = {
    considered: records.length,
    outcomes: {},
    unknown: [],
    late: [],
  };
  for (const r of records) {
    report.outcomes[r.outcome] = (report.outcomes[r.outcome] ?? 0) + 1;
    for (const [edgeId, share] of Object.entries(r.results)) {
      const base = { commandId: r.commandId, edgeId, kind: r.kind };
      if (share.status === "unknown" && report.unknown.length < SHARES_LISTED) {
        report.unknown.push({ ...base, detail: r.detail, sinceMs: share.learnedAtMs });
      } else if (share.late && report.late.length < SHARES_LISTED) {
        report.late.push({ ...base, status: share.status, learnedAtMs: share.learnedAtMs });
      }
    }
  }
  return report;
}
