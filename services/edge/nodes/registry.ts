/**
 * The connected nodes of this Edge, indexed by id and by alias. It hands out the session
 * objects but never its maps; a newer connection of the same node replaces the older one.
 * @module
 */
import type { NodeRecord } from "../config.ts";
import type { NodeLink } from "../ports.ts";
import type { Seat } from "./admission.ts";

/**
 * One connected node. The service updates the counters; the transport owns the link. `alias` and
 * `record` change only through {@linkcode NodeRegistry.replaceRecord} (a config reload).
 */
export interface NodeSession {
  readonly id: string;
  readonly alias: string;
  /** The node's record in the configuration in force; routing, pools and status read it. */
  readonly record: NodeRecord;
  readonly link: NodeLink;
  readonly version: string;
  readonly hostname: string;
  readonly connectedAtMs: number;
  lastSeenMs: number;
  inFlight: number;
  /** No new run goes to it: an operator drained it, or it is stopping (`stopping`). */
  draining: boolean;
  /**
   * The node said on this link that it is stopping (EdgeNodeEvent.draining): it drains itself
   * and refuses new runs, so an operator cannot undrain it. Absent: false.
   */
  stopping?: boolean;
  /**
   * The node said on this link that it gives up on it (EdgeNodeEvent.link_abandoned) and will
   * come back with its runs: the Edge closes the link as a blip, not the node's exit.
   */
  abandoned?: boolean;
  /** Its hold on its id (an enrolled node's entry follows it); absent: it holds none. */
  seat?: Seat;
  /** Adapters the node built from its config (from its config_applied report). */
  adapters: string[];
  /**
   * Why the node refused each adapter it did not build, by adapter name (its policy, or
   * settings it cannot read); absent until the node reports its config applied.
   */
  refused?: Readonly<Record<string, string>>;
  /** The last health each adapter reported, by adapter name; absent until one reports. */
  adapterHealth?: Map<string, { healthy: boolean; detail: string }>;
  /** Version of the config the Edge sent the node last (at registration or by a reload). */
  wantedConfigVersion: number;
  /** Version of the config the node last acknowledged applying; 0 until it does. */
  configVersion: number;
  /**
   * The flow-control window this connection's registration answer gave the node (node.proto,
   * "Flow control"): its runs count their acks in it. Absent: 0, no window.
   */
  runWindowBytes?: number;
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

  /**
   * Gives a connected session the record of a new configuration (same node id), re-indexing its
   * alias; false when the session is no longer the node's connected one.
   */
  replaceRecord(session: NodeSession, record: NodeRecord): boolean {
    if (this.#byId.get(session.id) !== session || record.id !== session.id) return false;
    if (session.alias && this.#byAlias.get(session.alias) === session) {
      this.#byAlias.delete(session.alias);
    }
    const mutable = session as { alias: string; record: NodeRecord };
    mutable.record = record;
    mutable.alias = record.alias;
    if (record.alias) this.#byAlias.set(record.alias, session);
    return true;
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
