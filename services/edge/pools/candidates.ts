/**
 * Which providers of a model group can take a run now: the provider's node is connected and
 * not draining, its adapter resolves to exactly one enabled adapter on that node (config
 * validation rejects the rest; this check keeps dispatch safe after a reload or a partial
 * config apply), and the node has not reported that adapter unhealthy.
 * @module
 */
import type { NodeRecord, ProviderRecord } from "../config.ts";
import type { NodeSession } from "../nodes/registry.ts";

/** A provider together with the connected session of its node. */
export interface Candidate {
  provider: ProviderRecord;
  session: NodeSession;
}

/** Providers by model group of one node list, built once per config snapshot. */
const byGroup = new WeakMap<readonly NodeRecord[], Map<string, ProviderRecord[]>>();

/**
 * Providers of `group` across every configured node, connected or not. Config snapshots are
 * never changed in place (a reload swaps in a new one), so the index is kept per snapshot: an
 * admission costs a lookup, not a walk over every node of a large group.
 */
export function providersOf(
  records: readonly NodeRecord[],
  group: string,
): readonly ProviderRecord[] {
  let index = byGroup.get(records);
  if (!index) {
    index = new Map();
    for (const provider of records.flatMap((r) => r.providers)) {
      const list = index.get(provider.modelGroup) ?? [];
      list.push(provider);
      index.set(provider.modelGroup, list);
    }
    byGroup.set(records, index);
  }
  return index.get(group) ?? [];
}

/**
 * True when the provider's adapter is exactly one enabled adapter of the node, once the node
 * has reported the adapters it built one of those, and not reported unhealthy.
 */
export function adapterUsable(provider: ProviderRecord, session: NodeSession): boolean {
  const named = session.record.adapters.filter((a) => a.name === provider.adapter);
  if (named.length !== 1 || !named[0]!.enabled) return false;
  if (!adapterHealthy(session, provider.adapter, provider.target)) return false;
  // `refused` is set with the node's config_applied report: from then on only what it built.
  return session.refused === undefined || session.adapters.includes(provider.adapter);
}

/**
 * False when the node reported the adapter (or, given a target, `<adapter>/<target>`)
 * unhealthy; an adapter it never reported on counts as healthy.
 */
export function adapterHealthy(session: NodeSession, adapter: string, target?: string): boolean {
  const health = session.adapterHealth;
  if (!health) return true;
  if (health.get(adapter)?.healthy === false) return false;
  return target === undefined || health.get(`${adapter}/${target}`)?.healthy !== false;
}

/**
 * The connected, usable providers of `group`, skipping the connections in `exclude` (the one a
 * retried run failed on; the same node reconnected is a new connection and is not skipped).
 */
export function candidatesOf(
  sessions: readonly NodeSession[],
  group: string,
  exclude: ReadonlySet<NodeSession> = new Set(),
): Candidate[] {
  const out: Candidate[] = [];
  for (const session of sessions) {
    if (session.draining || exclude.has(session)) continue;
    for (const provider of session.record.providers) {
      if (provider.modelGroup !== group || !adapterUsable(provider, session)) continue;
      out.push({ provider, session });
    }
  }
  return out;
}

/**
 * True when no connected node that accepts runs (not draining, not in `exclude`) declares a
 * provider of `group`: the pool waits for one to connect rather than failing at once. A node
 * that is connected but whose adapter is unusable (unhealthy, refused) does not count as coming.
 */
export function noProviderConnected(
  sessions: readonly NodeSession[],
  group: string,
  exclude: ReadonlySet<NodeSession> = new Set(),
): boolean {
  return !sessions.some((s) =>
    !s.draining && !exclude.has(s) && s.record.providers.some((p) => p.modelGroup === group)
  );
}
