/**
 * Direct routing: which connected node runs an `adapter + target` submission. Provider pools
 * route model groups separately; this is the path for CLI profiles and pinned runs, which
 * never wait in a queue.
 * @module
 */
import { IopError } from "../../shared/errors.ts";
import type { NodeAdapterRecord, NodeRecord } from "./config.ts";
import type { NodeStore } from "./nodes/node_store.ts";
import type { NodeSession } from "./nodes/registry.ts";
import { adapterHealthy } from "./pools/candidates.ts";
import type { RunSubmission } from "./ports.ts";

/** True when the node record has an enabled adapter that can run this target. */
export function offers(record: NodeRecord, adapter: string, target: string): boolean {
  const a = record.adapters.find((x) => x.name === adapter && x.enabled);
  return a !== undefined && adapterServes(a, target, record);
}

function adapterServes(a: NodeAdapterRecord, target: string, record: NodeRecord): boolean {
  switch (a.kind) {
    case "mock":
      return true;
    case "cli":
      return a.profiles.some((p) => p.name === target);
    default:
      // An HTTP adapter with no declared models lets its backend decide.
      return a.models.length === 0 || a.models.includes(target) ||
        record.providers.some((p) => p.adapter === a.name && p.target === target);
  }
}

let roundRobin = 0;

/**
 * Picks the least-loaded connected, non-draining node offering the submission's adapter and
 * target (ties rotate), or `options.preferNode` when it is one of those (session affinity of
 * a model run). Throws NOT_FOUND when no configured node offers it, UNAVAILABLE when none of
 * those is connected and accepting runs.
 */
export function pickNode(
  sessions: readonly NodeSession[],
  store: NodeStore,
  submission: RunSubmission,
  options: { preferNode?: string } = {},
): NodeSession {
  const { adapter, target } = submission;
  if (submission.node) {
    const session = sessions.find((s) => s.id === submission.node || s.alias === submission.node);
    if (!session) {
      if (store.byName(submission.node)) {
        throw new IopError(
          "UNAVAILABLE",
          `Cannot run on node '${submission.node}' as it is not connected`,
        );
      }
      throw new IopError("NOT_FOUND", `Cannot find node '${submission.node}'`);
    }
    if (!offers(session.record, adapter, target)) {
      throw new IopError(
        "NOT_FOUND",
        `Node '${session.id}' offers no adapter '${adapter}' with target '${target}'`,
      );
    }
    return session;
  }
  const offering = sessions.filter((s) => !s.draining && offers(s.record, adapter, target));
  // A node that reported this adapter (or profile) unhealthy takes no direct run.
  const eligible = offering.filter((s) => adapterHealthy(s, adapter, target));
  if (eligible.length === 0) {
    if (offering.length > 0) {
      throw new IopError(
        "UNAVAILABLE",
        `No healthy node can run adapter '${adapter}' with target '${target}' now: ` +
          unhealthyDetail(offering[0]!, adapter, target),
      );
    }
    if (store.list().some((r) => offers(r, adapter, target))) {
      throw new IopError(
        "UNAVAILABLE",
        `No connected node can run adapter '${adapter}' with target '${target}' now`,
      );
    }
    throw new IopError("NOT_FOUND", `No node offers adapter '${adapter}' with target '${target}'`);
  }
  const preferred = eligible.find((s) => s.id === options.preferNode);
  if (preferred) return preferred;
  const least = Math.min(...eligible.map((s) => s.inFlight));
  const ties = eligible.filter((s) => s.inFlight === least);
  return ties[roundRobin++ % ties.length]!;
}

/** What the node reported about an unhealthy adapter or profile. */
function unhealthyDetail(session: NodeSession, adapter: string, target: string): string {
  const health = session.adapterHealth;
  const profile = health?.get(`${adapter}/${target}`);
  if (profile?.healthy === false) return profile.detail;
  return health?.get(adapter)?.detail ?? "reported unhealthy";
}
