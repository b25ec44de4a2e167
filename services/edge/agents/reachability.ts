/**
 * Whether a domain agent's command can run now: some connected, non-draining node offers its
 * `adapter + target` (the same test as direct routing, `routing.ts`), has not refused that
 * adapter, and has not reported it unhealthy. When none can, the reason names what stands in
 * the way, node by node.
 * @module
 */
import type { NodeRecord } from "../config.ts";
import type { NodeSession } from "../nodes/registry.ts";
import { offers } from "../routing.ts";

/** What a command needs: an adapter instance and a target on it. */
export interface CommandRoute {
  adapter: string;
  target: string;
}

/**
 * Why no connected node can run `route` now, or undefined when one can. `records` are the
 * configured nodes, to tell "nobody offers it" from "nobody offering it is connected".
 */
export function unreachableReason(
  route: CommandRoute,
  nodes: { sessions: readonly NodeSession[]; records: readonly NodeRecord[] },
): string | undefined {
  const { adapter, target } = route;
  const blocked: string[] = [];
  for (const session of nodes.sessions) {
    if (!offers(session.record, adapter, target)) continue;
    const why = blockOf(session, adapter);
    if (why === undefined) return undefined;
    blocked.push(`node ${session.id} ${why}`);
  }
  if (blocked.length > 0) return blocked.join("; ");
  const offering = nodes.records.filter((r) => offers(r, adapter, target)).map((r) => r.id);
  if (offering.length === 0) return `no node offers ${adapter}/${target}`;
  return `no node offering ${adapter}/${target} is connected (${offering.join(", ")})`;
}

/** Why this connected node, which offers the adapter, cannot take a run on it now. */
function blockOf(session: NodeSession, adapter: string): string | undefined {
  if (session.draining) return "is draining";
  if (session.refused && Object.hasOwn(session.refused, adapter)) {
    return `refused adapter '${adapter}': ${session.refused[adapter]}`;
  }
  const health = session.adapterHealth?.get(adapter);
  if (health?.healthy === false) {
    return `reports adapter '${adapter}' unhealthy` + (health.detail ? `: ${health.detail}` : "");
  }
  return undefined;
}
