/**
 * Pre-registered node records, loaded once per config snapshot and never changed afterwards;
 * a reload builds a new store. Looks records up by token (registration) and by id or alias.
 * @module
 */
import type { NodeRecord } from "../config.ts";

/** An immutable set of node records with unique ids, aliases and tokens. */
export class NodeStore {
  readonly #byToken = new Map<string, NodeRecord>();
  readonly #byName = new Map<string, NodeRecord>();
  readonly #records: readonly NodeRecord[];

  /** Throws TypeError on an empty or duplicate id, alias or token. */
  constructor(records: readonly NodeRecord[]) {
    for (const r of records) {
      if (!r.id.trim()) throw new TypeError("Cannot load node record as its id is empty");
      if (!r.token.trim()) {
        throw new TypeError(`Cannot load node '${r.id}' as its token is empty`);
      }
      if (this.#byToken.has(r.token)) {
        throw new TypeError(`Cannot load node '${r.id}' as its token is already used`);
      }
      for (const name of new Set([r.id, r.alias].filter((n) => n !== ""))) {
        if (this.#byName.has(name)) {
          throw new TypeError(`Cannot load node '${r.id}' as the name '${name}' is already used`);
        }
        this.#byName.set(name, r);
      }
      this.#byToken.set(r.token, r);
    }
    this.#records = Object.freeze([...records]);
  }

  /** The record a registering node's token belongs to. */
  byToken(token: string): NodeRecord | undefined {
    return token ? this.#byToken.get(token) : undefined;
  }

  /** The record with this id or alias. */
  byName(idOrAlias: string): NodeRecord | undefined {
    return this.#byName.get(idOrAlias);
  }

  /** Every record, in config order. */
  list(): readonly NodeRecord[] {
    return this.#records;
  }
}
