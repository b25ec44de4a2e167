/**
 * Session affinity: which node holds each session, and where a run that carries a session id
 * must (or should) go.
 *
 * A CLI agent keeps its session on the node that ran it (its files live there), so a follow-up
 * of a CLI session is **pinned** to that node. When that node is not connected (or is
 * draining) the follow-up fails with UNAVAILABLE naming the session and the node — retryable,
 * since the node may come back — instead of silently starting a fresh session elsewhere, unless
 * the submission says `onSessionLost: "start_new"`: then the session starts anew under the same
 * id on whichever node routing picks. A model run is stateless (its history travels in its
 * messages), so its session is only a **preference**: the node that served it last, when that
 * node is eligible and has a free slot; any node may serve it otherwise.
 *
 * Every CLI run has a session from its first turn: a run without one gets a generated id (a
 * UUID, which session-taking CLIs accept). The node is told whether a run starts its session
 * (the profile's `args`, `{session}` already set) or continues one (its `resume_args`) through
 * the run metadata key {@linkcode SESSION_STATE_KEY}; a session the Edge does not know (new, or
 * forgotten after its idle expiry or a restart) starts anew. Ids are substituted into command
 * lines, so a client-chosen one must match {@linkcode SESSION_ID_PATTERN} (never a leading `-`).
 *
 * The holder map is in memory, bounded ({@linkcode SessionAffinityOptions.maxSessions}, least
 * recently used evicted first) and forgets a session idle for
 * {@linkcode SessionAffinityOptions.idleMs}. A2A sessions survive an Edge restart because the
 * A2A task store keeps each task's session and node, and the task manager re-seeds this map.
 * @module
 */
import { IopError } from "../../shared/errors.ts";
import { SESSION_STATE_KEY } from "../../shared/run.ts";
import type { RunSubmission } from "./ports.ts";

export { SESSION_STATE_KEY };

/** What a session id may look like: a letter or digit, then up to 127 of `A-Za-z0-9._:-`. */
export const SESSION_ID_PATTERN: RegExp = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

/** Default bound of {@linkcode SessionAffinityOptions.maxSessions}. */
export const DEFAULT_MAX_SESSIONS = 10_000;

/** Default of {@linkcode SessionAffinityOptions.idleMs}: one day. */
export const DEFAULT_SESSION_IDLE_MS = 24 * 60 * 60 * 1000;

/** Throws INVALID_ARGUMENT unless `id` matches {@linkcode SESSION_ID_PATTERN}. */
export function checkSessionId(id: string): void {
  if (SESSION_ID_PATTERN.test(id)) return;
  const shown = id.length > 40 ? `${id.slice(0, 40)}…` : id;
  throw new IopError(
    "INVALID_ARGUMENT",
    `Cannot use session id '${shown}' as it must start with a letter or digit and hold at most ` +
      "128 of A-Z a-z 0-9 . _ : -",
  );
}

/** A new session id, as the Edge assigns them: a UUID. */
export function newSessionId(): string {
  return crypto.randomUUID();
}

/** Options of {@linkcode SessionAffinity}. */
export interface SessionAffinityOptions {
  /** Sessions remembered at most; the least recently used go first. Default 10,000. */
  maxSessions?: number;
  /** A session unused this long is forgotten. Default one day. */
  idleMs?: number;
  /** Defaults to Date.now. */
  now?: () => number;
}

/** Session id → the node holding it, bounded with LRU eviction and an idle expiry. */
export class SessionAffinity {
  /** Insertion order is recency order: a touched entry is re-inserted at the end. */
  readonly #holders = new Map<string, { nodeId: string; lastUsedMs: number }>();
  readonly #max: number;
  readonly #idleMs: number;
  readonly #now: () => number;

  constructor(options: SessionAffinityOptions = {}) {
    this.#max = options.maxSessions ?? DEFAULT_MAX_SESSIONS;
    this.#idleMs = options.idleMs ?? DEFAULT_SESSION_IDLE_MS;
    this.#now = options.now ?? Date.now;
    if (!Number.isInteger(this.#max) || this.#max < 1) {
      throw new RangeError(
        `Cannot keep sessions as 'maxSessions' must be a positive integer: current value is ${this.#max}`,
      );
    }
  }

  /** Sessions remembered now (expired ones included until next looked up or evicted). */
  get size(): number {
    return this.#holders.size;
  }

  /** The node holding `sessionId`, or undefined when unknown or idle too long; marks it used. */
  holder(sessionId: string): string | undefined {
    const entry = this.#holders.get(sessionId);
    if (!entry) return undefined;
    this.#holders.delete(sessionId);
    const now = this.#now();
    if (now - entry.lastUsedMs > this.#idleMs) return undefined;
    entry.lastUsedMs = now;
    this.#holders.set(sessionId, entry);
    return entry.nodeId;
  }

  /** Records that `nodeId` holds `sessionId`, last used at `atMs` (default now). */
  remember(sessionId: string, nodeId: string, atMs = this.#now()): void {
    if (this.#now() - atMs > this.#idleMs) return;
    this.#holders.delete(sessionId);
    this.#holders.set(sessionId, { nodeId, lastUsedMs: atMs });
    while (this.#holders.size > this.#max) {
      this.#holders.delete(this.#holders.keys().next().value!);
    }
  }

  /** Forgets `sessionId`. */
  forget(sessionId: string): void {
    this.#holders.delete(sessionId);
  }
}

/** Where a node stands for a session routed to it. */
export type HolderState = "connected" | "draining" | "gone";

/** What {@linkcode planSession} decided for a submission. */
export interface SessionPlan {
  /** The submission to route: session id set, and for a CLI run its session state. */
  submission: RunSubmission;
  /** A CLI follow-up: the run must go to this node. */
  pin?: string;
  /** A model run: prefer this node when it has room. */
  prefer?: string;
}

/**
 * Decides a submission's session: checks a client-chosen id, assigns one to a CLI run without,
 * and pins a CLI follow-up to the node holding its session or throws the documented error
 * (module doc). `stateful` says whether the run's adapter keeps sessions on its node (CLI).
 */
export function planSession(
  affinity: SessionAffinity,
  submission: RunSubmission,
  facts: {
    stateful: boolean;
    holderState: (nodeId: string) => HolderState;
    /** A node's id from its id or alias; defaults to the name itself. */
    nodeIdOf?: (name: string) => string | undefined;
  },
): SessionPlan {
  const given = submission.sessionId;
  if (given !== "") checkSessionId(given);
  if (!facts.stateful) {
    const prefer = given === "" ? undefined : affinity.holder(given);
    return prefer === undefined ? { submission } : { submission, prefer };
  }
  const sessionId = given === "" ? newSessionId() : given;
  const holder = given === "" ? undefined : affinity.holder(given);
  const state = (s: "new" | "resume"): RunSubmission => ({
    ...submission,
    sessionId,
    metadata: { ...submission.metadata, [SESSION_STATE_KEY]: s },
  });
  if (holder === undefined) return { submission: state("new") };
  const where = facts.holderState(holder);
  if (where === "connected") {
    const pinned = submission.node === undefined
      ? holder
      : (facts.nodeIdOf?.(submission.node) ?? submission.node);
    if (pinned !== holder) {
      throw new IopError(
        "INVALID_ARGUMENT",
        `Cannot run session '${sessionId}' on node '${submission.node}' as it lives on node '${holder}'`,
      );
    }
    return { submission: state("resume"), pin: holder };
  }
  if (submission.onSessionLost === "start_new") {
    affinity.forget(sessionId);
    return { submission: state("new") };
  }
  throw new IopError(
    "UNAVAILABLE",
    `Cannot continue session '${sessionId}' as it lives on node '${holder}', which is ` +
      (where === "draining" ? "draining" : "not connected"),
  );
}
