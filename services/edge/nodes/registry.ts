/**
 * The connected nodes of this Edge, indexed by id and by alias. It hands out the session
 * objects but never its maps; a newer connection of the same node replaces the older one.
 * @module
 */
import type { NodeRecord } from "../config.ts";
import type { NodeLink } from "../ports.ts";

/** One connected node. The service updates the counters; the transport owns the link. */
export interface NodeSession {
  readonly id: string;
  readonly alias: string;
  readonly record: NodeRecord;
  readonly link: NodeLink;
  readonly version: string;
  readonly hostname: string;
  readonly connectedAtMs: number;
  lastSeenMs: number;
  inFlight: number;
  draining: boolean;
  /** Adapters the node built from its config (from its config_applied report). */
  adapters: string[];
  /**
   * Why the node refused each adapter it did not build, by adapter name (its policy, or
   * settings it cannot read); absent until the node reports its config applied.
   */
  refused?: Readonly<Record<string, string>>;
}

/** Connected nodes by id and alias. */
export class NodeRegistry {
  readonly #byId = new Map<string, NodeSession>();
  readonly #byAlias = new Map<string, NodeSession>();

  /** Adds a session, returning the one it replaced (same node id), if any. */
  add(session: NodeSession): NodeSession | undefined {
    const previous = this.#byId.get(session.id);
    if (previous?.alias) this.#byAlias.delete(previous.alias);
    this.#byId.set(session.id, session);
    if (session.alias) this.#byAlias.set(session.alias, session);
    return previous;
  }

  /** Removes this exact session; a replacement that took its place stays. */
  remove(session: NodeSession): boolean {
    if (this.#byId.get(session.id) !== session) return false;
    this.#byId.delete(session.id);
    if (session.alias && this.#byAlias.get(session.alias) === session) {
      this.#byAlias.delete(session.alias);
    }
    return true;
  }

  /** The session of the node with this id or alias. */
  get(idOrAlias: string): NodeSession | undefined {
    return this.#byId.get(idOrAlias) ?? this.#byAlias.get(idOrAlias);
  }

  /** A snapshot list of the connected sessions. */
  list(): NodeSession[] {
    return [...this.#byId.values()];
  }

  /** Number of connected nodes. */
  get size(): number {
    return this.#byId.size;
  }
}
