/**
 * Direct routing: which connected node runs an `adapter + target` submission. Provider pools
 * route model groups separately; this is the path for CLI profiles and pinned runs, which
 * never wait in a queue. A CLI profile takes at most its `max_concurrency` runs per node: a run
 * goes to a node whose profile has a free slot, and is refused at once with OVERLOADED when
 * every node that could take it is full (a run pinned to a node, such as a session's follow-up,
 * is refused when that node is full; it never moves).
 * @module
 */
import { CLI_RETRY_AFTER_SECONDS, profileMaxConcurrency } from "../../shared/adapter_kinds/cli.ts";
import { IopError, OverloadedError } from "../../shared/errors.ts";
import type { CliProfileRecord, NodeAdapterRecord, NodeRecord } from "./config.ts";
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

/** The profile `target` of an enabled CLI adapter `adapter` of the record; else undefined. */
export function cliProfileOf(
  record: NodeRecord,
  adapter: string,
  target: string,
): CliProfileRecord | undefined {
  const a = record.adapters.find((x) => x.name === adapter && x.enabled);
  return a?.kind === "cli" ? a.profiles.find((p) => p.name === target) : undefined;
}

/** Runs in flight on a node's `adapter + target` (the provider pools' `usage`). */
export type TargetUsage = (nodeId: string, adapter: string, target: string) => number;

/** Options of {@linkcode pickNode}. */
export interface PickOptions {
  /** A node to take when it is eligible and has room (session affinity of a model run). */
  preferNode?: string;
  /**
   * Runs in flight per node resource; with it, a CLI profile at its `max_concurrency` on a node
   * takes no run there. Absent = no slot check.
   */
  usage?: TargetUsage;
  /** The session a pinned run continues, named in an OVERLOADED refusal. */
  heldSession?: string;
}

/** A CLI profile's slots on one node, when the submission runs a CLI profile there. */
function slotsOn(
  session: NodeSession,
  submission: RunSubmission,
  usage: TargetUsage | undefined,
): { used: number; max: number } | undefined {
  if (!usage) return undefined;
  const profile = cliProfileOf(session.record, submission.adapter, submission.target);
  if (!profile) return undefined;
  return {
    used: usage(session.id, submission.adapter, submission.target),
    max: profileMaxConcurrency(profile),
  };
}

function hasRoom(session: NodeSession, submission: RunSubmission, usage?: TargetUsage): boolean {
  const slots = slotsOn(session, submission, usage);
  return slots === undefined || slots.used < slots.max;
}

/** OVERLOADED for a CLI profile full on every one of `full`. */
function profileFull(
  submission: RunSubmission,
  full: readonly NodeSession[],
  options: PickOptions,
): OverloadedError {
  const each = full.map((s) => {
    const slots = slotsOn(s, submission, options.usage)!;
    return `node '${s.id}' runs ${slots.used} of max_concurrency ${slots.max}`;
  }).join(", ");
  const where = full.length === 1 ? "on its node" : "on every node offering it";
  const held = options.heldSession
    ? `; session '${options.heldSession}' stays on that node, retry later`
    : "";
  return new OverloadedError(
    `Cannot run CLI profile '${submission.target}' of adapter '${submission.adapter}' as it is ` +
      `at its limit ${where}: ${each}${held}`,
    CLI_RETRY_AFTER_SECONDS,
  );
}

let roundRobin = 0;

/**
 * Picks the least-loaded connected, non-draining node offering the submission's adapter and
 * target (ties rotate), or `options.preferNode` when it is one of those (session affinity of
 * a model run). Throws NOT_FOUND when no configured node offers it, UNAVAILABLE when none of
 * those is connected and accepting runs, OVERLOADED ({@linkcode OverloadedError}) when it is a
 * CLI profile at its `max_concurrency` on every one of those (with `options.usage`).
 */
export function pickNode(
  sessions: readonly NodeSession[],
  store: NodeStore,
  submission: RunSubmission,
  options: PickOptions = {},
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
    if (!hasRoom(session, submission, options.usage)) {
      throw profileFull(submission, [session], options);
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
  const free = eligible.filter((s) => hasRoom(s, submission, options.usage));
  if (free.length === 0) throw profileFull(submission, eligible, options);
  const preferred = free.find((s) => s.id === options.preferNode);
  if (preferred) return preferred;
  const least = Math.min(...free.map((s) => s.inFlight));
  const ties = free.filter((s) => s.inFlight === least);
  return ties[roundRobin++ % ties.length]!;
}

/** What the node reported about an unhealthy adapter or profile. */
function unhealthyDetail(session: NodeSession, adapter: string, target: string): string {
  const health = session.adapterHealth;
  const profile = health?.get(`${adapter}/${target}`);
  if (profile?.healthy === false) return profile.detail;
  return health?.get(adapter)?.detail ?? "reported unhealthy";
}
