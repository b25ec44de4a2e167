/**
 * Pre-registered node records, loaded once per config snapshot and never changed afterwards;
 * a reload builds a new store. Looks records up by id or alias (`admission.ts` checks a
 * registering node against its record). A record's token is plain or `sha256:<hex>`; two records
 * may not stand for the same secret, however each stores it, except nodes enrolled under one
 * rule, which share the rule's token.
 * @module
 */
import { secretFingerprint, storedSecretProblem } from "../../../shared/secrets.ts";
import type { NodeRecord } from "../config.ts";

/** An immutable set of node records with unique ids, aliases and tokens. */
export class NodeStore {
  readonly #byId = new Map<string, NodeRecord>();
  readonly #byName = new Map<string, NodeRecord>();
  readonly #records: readonly NodeRecord[];
  /** Names of `cli` adapters, anywhere and per node id: CLI runs keep sessions on their node. */
  readonly #cliAdapters = new Set<string>();
  readonly #cliAdaptersOf = new Map<string, Set<string>>();

  /** Throws TypeError on an empty or duplicate id, alias or token, or a malformed hash. */
  constructor(records: readonly NodeRecord[]) {
    // Fingerprint → whose secret it is: a listed node's, or an enrollment rule's.
    const owners = new Map<string, string>();
    for (const r of records) {
      if (!r.id.trim()) throw new TypeError("Cannot load node record as its id is empty");
      if (!r.token.trim()) {
        throw new TypeError(`Cannot load node '${r.id}' as its token is empty`);
      }
      const problem = storedSecretProblem(r.token);
      if (problem) throw new TypeError(`Cannot load node '${r.id}' as its token ${problem}`);
      const fingerprint = secretFingerprint(r.token);
      const owner = r.enrolledBy === undefined ? `node/${r.id}` : `enroll/${r.enrolledBy}`;
      if ((owners.get(fingerprint) ?? owner) !== owner) {
        throw new TypeError(`Cannot load node '${r.id}' as its token is already used`);
      }
      owners.set(fingerprint, owner);
      for (const name of new Set([r.id, r.alias].filter((n) => n !== ""))) {
        if (this.#byName.has(name)) {
          throw new TypeError(`Cannot load node '${r.id}' as the name '${name}' is already used`);
        }
        this.#byName.set(name, r);
      }
      this.#byId.set(r.id, r);
      const cli = new Set(r.adapters.filter((a) => a.kind === "cli").map((a) => a.name));
      this.#cliAdaptersOf.set(r.id, cli);
      for (const name of cli) this.#cliAdapters.add(name);
    }
    this.#records = Object.freeze([...records]);
  }

  /** The record with this id (never an alias). */
  byId(id: string): NodeRecord | undefined {
    return this.#byId.get(id);
  }

  /** The record with this id or alias. */
  byName(idOrAlias: string): NodeRecord | undefined {
    return this.#byName.get(idOrAlias);
  }

  /** True when `adapter` is a `cli` adapter on the node named (id or alias), or on any node. */
  isCliAdapter(adapter: string, node?: string): boolean {
    if (!node) return this.#cliAdapters.has(adapter);
    const record = this.#byName.get(node);
    return record !== undefined && this.#cliAdaptersOf.get(record.id)!.has(adapter);
  }

  /** Every record, in config order. */
  list(): readonly NodeRecord[] {
    return this.#records;
  }
}
