/**
 * Builds the resource-first status snapshot: per node, its providers, then each CLI profile of
 * its CLI adapters, then every other adapter no provider stands for, so that every resource
 * appears once, with the runs in flight on it (pool and direct) and its limit (`maxConcurrency`:
 * a provider's or a CLI profile's `max_concurrency`; 0 on an adapter row, whose runs the Edge
 * does not cap). A resource whose adapter the connected node refused (its policy, or settings it
 * cannot read) carries the node's reason; one whose adapter (or CLI profile) the node reported
 * unhealthy carries `healthy: false` and the probe's detail.
 * @module
 */
import { profileMaxConcurrency } from "../../shared/adapter_kinds/cli.ts";
import type { NodeRecord } from "./config.ts";
import type { NodeSession } from "./nodes/registry.ts";
import type { NodeStatus, ResourceStatus, StatusSnapshot } from "./ports.ts";

/** Per-provider live counters, supplied by the provider pools when they exist. */
export type ProviderStats = (providerId: string) => { inFlight: number; queued: number };

/**
 * Runs in flight on a node's adapter (on one target when given), pool and direct alike; the
 * pools count every run the service dispatches.
 */
export type ResourceUsage = (nodeId: string, adapter: string, target?: string) => number;

/** Inputs of {@linkcode buildStatusSnapshot}. */
export interface StatusInputs {
  edgeId: string;
  version: string;
  startedAtMs: number;
  runsInFlight: number;
  records: readonly NodeRecord[];
  sessions: readonly NodeSession[];
  providerStats?: ProviderStats;
  resourceUsage?: ResourceUsage;
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
      ...(session?.stopping ? { stopping: true } : {}),
      version: session?.version ?? "",
      hostname: session?.hostname ?? "",
      connectedAtMs: session?.connectedAtMs ?? 0,
      lastSeenMs: session?.lastSeenMs ?? 0,
      inFlight: session?.inFlight ?? 0,
      configVersion: session?.configVersion ?? 0,
      wantedConfigVersion: session?.wantedConfigVersion ?? 0,
      ...(record.enrolledBy !== undefined ? { enrolledBy: record.enrolledBy } : {}),
      resources: resourcesOf(
        record,
        inputs.providerStats,
        inputs.resourceUsage,
        session?.refused ?? {},
        session?.adapterHealth,
      ),
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
  usage: ResourceUsage | undefined,
  refused: Readonly<Record<string, string>>,
  health: ReadonlyMap<string, { healthy: boolean; detail: string }> | undefined,
): ResourceStatus[] {
  // A profile's own report, unless its whole adapter is unhealthy.
  const healthOf = (adapter: string, target?: string) => {
    const own = target === undefined ? undefined : health?.get(`${adapter}/${target}`);
    const whole = health?.get(adapter);
    const state = whole?.healthy === false ? whole : own ?? whole;
    return { healthy: state?.healthy ?? true, healthDetail: state?.detail ?? "" };
  };
  const kindOf = new Map(record.adapters.map((a) => [a.name, a]));
  const reason = (adapter: string) => Object.hasOwn(refused, adapter) ? refused[adapter]! : "";
  const inFlight = (adapter: string, target?: string) => usage?.(record.id, adapter, target) ?? 0;
  const providers: ResourceStatus[] = record.providers.map((p) => {
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
      ...healthOf(p.adapter),
    };
  });
  // An adapter its providers already stand for is not listed again; a CLI adapter is its profiles.
  const others = record.adapters.filter((a) => !record.providers.some((p) => p.adapter === a.name));
  return [
    ...providers,
    ...others.flatMap((a): ResourceStatus[] => {
      const base = {
        adapter: a.name,
        adapterKind: a.kind,
        modelGroup: "",
        maxConcurrency: 0,
        queued: 0,
        enabled: a.enabled,
        refused: reason(a.name),
      };
      if (a.kind === "cli" && a.profiles.length > 0) {
        return a.profiles.map((profile) => ({
          ...base,
          kind: "profile",
          id: `${a.name}/${profile.name}`,
          target: profile.name,
          maxConcurrency: profileMaxConcurrency(profile),
          inFlight: inFlight(a.name, profile.name),
          ...healthOf(a.name, profile.name),
        }));
      }
      return [{
        ...base,
        kind: "adapter",
        id: a.name,
        target: "",
        inFlight: inFlight(a.name),
        ...healthOf(a.name),
      }];
    }),
  ];
}
