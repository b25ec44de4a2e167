/**
 * Builds the resource-first status snapshot: per node, its provider catalog when it defines
 * one, otherwise its adapters, so that no resource appears twice. A resource whose adapter the
 * connected node refused (its policy, or settings it cannot read) carries the node's reason.
 * @module
 */
import type { NodeRecord } from "./config.ts";
import type { NodeSession } from "./nodes/registry.ts";
import type { NodeStatus, ResourceStatus, StatusSnapshot } from "./ports.ts";

/** Per-provider live counters, supplied by the provider pools when they exist. */
export type ProviderStats = (providerId: string) => { inFlight: number; queued: number };

/** Inputs of {@linkcode buildStatusSnapshot}. */
export interface StatusInputs {
  edgeId: string;
  version: string;
  startedAtMs: number;
  runsInFlight: number;
  records: readonly NodeRecord[];
  sessions: readonly NodeSession[];
  providerStats?: ProviderStats;
}

/** The snapshot of every configured node, connected or not. */
export function buildStatusSnapshot(inputs: StatusInputs): StatusSnapshot {
  const byId = new Map(inputs.sessions.map((s) => [s.id, s]));
  const nodes: NodeStatus[] = inputs.records.map((record) => {
    const session = byId.get(record.id);
    return {
      id: record.id,
      alias: record.alias,
      connected: session !== undefined,
      draining: session?.draining ?? false,
      version: session?.version ?? "",
      hostname: session?.hostname ?? "",
      connectedAtMs: session?.connectedAtMs ?? 0,
      lastSeenMs: session?.lastSeenMs ?? 0,
      inFlight: session?.inFlight ?? 0,
      resources: resourcesOf(record, inputs.providerStats, session?.refused ?? {}),
    };
  });
  return {
    edgeId: inputs.edgeId,
    version: inputs.version,
    startedAtMs: inputs.startedAtMs,
    runsInFlight: inputs.runsInFlight,
    nodes,
  };
}

function resourcesOf(
  record: NodeRecord,
  stats: ProviderStats | undefined,
  refused: Readonly<Record<string, string>>,
): ResourceStatus[] {
  const kindOf = new Map(record.adapters.map((a) => [a.name, a]));
  const reason = (adapter: string) => Object.hasOwn(refused, adapter) ? refused[adapter]! : "";
  if (record.providers.length > 0) {
    return record.providers.map((p) => {
      const live = stats?.(p.id) ?? { inFlight: 0, queued: 0 };
      const adapter = kindOf.get(p.adapter);
      return {
        kind: "provider",
        id: p.id,
        adapter: p.adapter,
        adapterKind: adapter?.kind ?? "",
        target: p.target,
        modelGroup: p.modelGroup,
        maxConcurrency: p.maxConcurrency,
        inFlight: live.inFlight,
        queued: live.queued,
        enabled: adapter?.enabled ?? false,
        refused: reason(p.adapter),
      };
    });
  }
  return record.adapters.map((a) => ({
    kind: "adapter",
    id: a.name,
    adapter: a.name,
    adapterKind: a.kind,
    target: "",
    modelGroup: "",
    maxConcurrency: 0,
    inFlight: 0,
    queued: 0,
    enabled: a.enabled,
    refused: reason(a.name),
  }));
}
