/**
 * Who is calling: the tenant an API key belongs to. Built once per config snapshot (a reload
 * builds a new one), so a request hashes its key once and compares it with every stored key in
 * constant time ({@linkcode SecretIndex}).
 * @module
 */
import { SecretIndex } from "../../../shared/secrets.ts";
import type { TenantRecord } from "./tenant.ts";

/** The tenants of one config snapshot, by key and by name. */
export class TenantDirectory {
  readonly #byKey: SecretIndex<TenantRecord>;
  readonly #byName: Map<string, TenantRecord>;
  /** The tenant every request is served as when no tenant has a key; undefined otherwise. */
  readonly keyless: TenantRecord | undefined;

  constructor(tenants: readonly TenantRecord[]) {
    this.#byKey = new SecretIndex(tenants.flatMap((t) => t.keys.map((k) => [k, t] as const)));
    this.#byName = new Map(tenants.map((t) => [t.name, t]));
    this.keyless = this.#byKey.size === 0 ? tenants[0] : undefined;
  }

  /** True when requests must present a key. */
  get keysRequired(): boolean {
    return this.keyless === undefined;
  }

  /** The tenant whose key `presented` is; undefined for none. */
  identify(presented: string): TenantRecord | undefined {
    return this.#byKey.find(presented);
  }

  /** The tenant named `name` in this snapshot. */
  byName(name: string): TenantRecord | undefined {
    return this.#byName.get(name);
  }
}

const directories = new WeakMap<readonly TenantRecord[], TenantDirectory>();

/** The directory of a config snapshot's `tenants` (built on first use, then cached). */
export function tenantDirectory(tenants: readonly TenantRecord[]): TenantDirectory {
  let directory = directories.get(tenants);
  if (!directory) {
    directory = new TenantDirectory(tenants);
    directories.set(tenants, directory);
  }
  return directory;
}
