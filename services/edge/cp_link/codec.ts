/**
 * Converts the Edge's own status, events and agent views into the Control Plane contract.
 * Only summaries cross: a node's token, address and host, and the Edge's configuration, are
 * never copied into these messages. A node's reasons for refusing adapters do cross: they
 * quote the pushed value they refuse (a command, a backend host:port, a variable name), never
 * a key or token.
 * @module
 */
import { create } from "@bufbuild/protobuf";
import {
  type EdgeStatusResponse,
  EdgeStatusResponseSchema,
  type RelayedEvent,
  RelayedEventSchema,
} from "../../../proto/gen/iop/v1/control_pb.ts";
import type { AgentStateChange, AgentView } from "../agents/domain_agents.ts";
import type { EdgeEvent, StatusSnapshot } from "../ports.ts";
import { BUCKET_BOUNDS_MS, type PoolTally } from "./run_counters.ts";

/**
 * Builds the status report from the service's snapshot, the domain agents' views and, when
 * given, the run counters per pool (with each pool's in-flight runs and its providers' queue).
 */
export function toStatusResponse(
  snapshot: StatusSnapshot,
  agents: readonly AgentView[],
  nowMs: number,
  pools: readonly PoolTally[] = [],
): EdgeStatusResponse {
  return create(EdgeStatusResponseSchema, {
    reportedAtMs: BigInt(nowMs),
    pools: poolCounters(snapshot, pools),
    bucketBoundsMs: [...BUCKET_BOUNDS_MS],
    edge: {
      edgeId: snapshot.edgeId,
      version: snapshot.version,
      startedAtMs: BigInt(snapshot.startedAtMs),
      runsInFlight: snapshot.runsInFlight,
      nodesConnected: snapshot.nodes.filter((n) => n.connected).length,
      nodesKnown: snapshot.nodes.length,
    },
    nodes: snapshot.nodes.map((n) => ({
      id: n.id,
      alias: n.alias,
      connected: n.connected,
      draining: n.draining,
      version: n.version,
      connectedAtMs: BigInt(n.connectedAtMs),
      lastSeenMs: BigInt(n.lastSeenMs),
      inFlight: n.inFlight,
      resources: n.resources.map((r) => ({
        kind: r.kind,
        id: r.id,
        adapter: r.adapter,
        adapterKind: r.adapterKind,
        target: r.target,
        modelGroup: r.modelGroup,
        maxConcurrency: r.maxConcurrency,
        inFlight: r.inFlight,
        queued: r.queued,
        // The contract has no refusal field: a resource its node refused is not enabled there,
        // and the reason reaches the Control Plane in the node's adapters_applied event.
        enabled: r.enabled && r.refused === "",
        unhealthy: r.healthy === false,
        healthDetail: r.healthDetail ?? "",
      })),
    })),
    agents: agents.map((a) => ({
      id: a.id,
      name: a.name,
      description: a.description,
      state: a.state,
      commands: a.commands,
      detail: a.detail,
      lastCommand: a.lastCommand,
      lastStatus: a.lastStatus,
      lastFinishedAtMs: BigInt(a.lastFinishedAtMs),
    })),
  });
}

/** Every pool that ran something or has a provider, with its counters and gauges. */
function poolCounters(snapshot: StatusSnapshot, tallies: readonly PoolTally[]) {
  const queued = new Map<string, number>();
  for (const n of snapshot.nodes) {
    for (const r of n.resources) {
      if (r.kind !== "provider") continue;
      const pool = r.modelGroup || r.id;
      queued.set(pool, (queued.get(pool) ?? 0) + r.queued);
    }
  }
  const byPool = new Map(tallies.map((t) => [t.pool, t]));
  const names = [...new Set([...byPool.keys(), ...queued.keys()])].sort();
  const empty = new Array<bigint>(BUCKET_BOUNDS_MS.length + 1).fill(0n);
  return names.map((pool) => {
    const t = byPool.get(pool);
    return {
      pool,
      runsStarted: BigInt(t?.runsStarted ?? 0),
      runsFinished: BigInt(t?.runsFinished ?? 0),
      runsFailed: BigInt(t?.runsFailed ?? 0),
      tokensOut: BigInt(t?.tokensOut ?? 0),
      latencyBuckets: t ? t.latencyBuckets.map(BigInt) : empty,
      ttftBuckets: t ? t.ttftBuckets.map(BigInt) : empty,
      inFlight: t ? Math.max(0, t.runsStarted - t.runsFinished) : 0,
      queued: queued.get(pool) ?? 0,
    };
  });
}

/**
 * Converts a bus event into a relayed event; undefined for events that stay on the Edge (a
 * refused registration carries a peer address, so it is not relayed).
 */
export function toRelayedEvent(event: EdgeEvent): RelayedEvent | undefined {
  const atMs = BigInt(event.atMs);
  const node = (nodeId: string, kind: string, detail: string) =>
    create(RelayedEventSchema, { atMs, event: { case: "node", value: { nodeId, kind, detail } } });
  switch (event.type) {
    case "node_registered":
      return node(event.nodeId, "registered", `version ${event.version}`);
    case "node_disconnected":
      return node(event.nodeId, "disconnected", event.reason);
    case "node_drain_changed":
      return node(
        event.nodeId,
        event.draining ? "draining" : "undrained",
        event.draining ? "no new runs" : "accepting runs",
      );
    case "node_config_applied":
      return node(event.nodeId, "adapters_applied", appliedDetail(event.adapters, event.rejected));
    case "adapter_health":
      return node(
        event.nodeId,
        event.healthy ? "adapter_healthy" : "adapter_unhealthy",
        `${event.adapter}: ${event.detail}`,
      );
    case "run_started":
      return create(RelayedEventSchema, {
        atMs,
        event: {
          case: "run",
          value: {
            runId: event.runId,
            nodeId: event.nodeId,
            adapter: event.adapter,
            target: event.target,
            status: "started",
          },
        },
      });
    case "run_finished":
      return create(RelayedEventSchema, {
        atMs,
        event: {
          case: "run",
          value: {
            runId: event.runId,
            nodeId: event.nodeId,
            adapter: event.adapter,
            target: event.target,
            status: event.status,
            durationMs: BigInt(Math.max(0, event.durationMs)),
            errorCode: event.errorCode,
          },
        },
      });
    case "config_reloaded":
      return create(RelayedEventSchema, {
        atMs,
        event: { case: "reload", value: { ok: event.ok, detail: event.detail } },
      });
    case "node_refused":
      return undefined;
  }
}

/** `mock, cli; refused ollama: <why>; refused x: <why>`: what a node built and refused, why. */
function appliedDetail(adapters: readonly string[], rejected: Record<string, string>): string {
  const built = adapters.length > 0 ? adapters.join(", ") : "no adapters";
  const refused = Object.entries(rejected).map(([name, why]) => `refused ${name}: ${why}`);
  return [built, ...refused].join("; ");
}

/** Converts an agent state change into a relayed event. */
export function agentRelayedEvent(change: AgentStateChange, nowMs: number): RelayedEvent {
  return create(RelayedEventSchema, {
    atMs: BigInt(nowMs),
    event: { case: "agent", value: change },
  });
}
