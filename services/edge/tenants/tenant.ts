/**
 * Tenants of an Edge: the named holders of API keys, each with the models and agents it may use,
 * its rate and concurrency limits, and its share of a saturated provider pool (weight and
 * priority class). Read from the Edge config's `tenants` list; the older `http.api_keys` list
 * stands for one tenant named `default` with no limits, and an Edge with no key at all serves
 * everyone as the tenant `anonymous`.
 *
 * ```yaml
 * tenants:
 *   - name: research            # unique; the label of its metrics and the owner of its A2A tasks
 *     keys: ["sha256:…"]        # plain or sha256:<hex> (deno task hash-secret); one or more
 *     models: ["llama3*"]       # names or aliases, `*` matches any run of characters; default all
 *     agents: ["*"]             # A2A agent ids, same patterns; default all
 *     requests_per_minute: 600  # 0 = no limit (the default for every limit)
 *     tokens_per_minute: 200000 # input + output tokens of finished runs
 *     concurrent_runs: 16
 *     weight: 2                 # share of a saturated pool relative to other tenants; default 1
 *     priority: normal          # low | normal | high: a higher class is admitted first
 *     max_queued: 32            # waiting runs per pool; default: the pool's own queue length
 *     operator: false           # may read the Edge's operator views (status, node run outputs)
 * ```
 * @module
 */
import { ConfigError, type ConfigReader } from "../../../shared/config.ts";
import { readStoredSecrets, secretFingerprint } from "../../../shared/secrets.ts";

/** Priority classes, lowest first; a waiting run of a higher class is admitted first. */
export const PRIORITY_CLASSES = ["low", "normal", "high"] as const;

/** One of {@linkcode PRIORITY_CLASSES}. */
export type PriorityClass = typeof PRIORITY_CLASSES[number];

/** How a tenant's waiting runs share a saturated pool with other tenants' runs. */
export interface QueueShare {
  /** Tenant name: runs of one tenant wait in one FIFO. */
  name: string;
  /** Relative share of admissions while several tenants wait (> 0). */
  weight: number;
  /** Index into {@linkcode PRIORITY_CLASSES}: higher is admitted first. */
  priority: number;
  /** Waiting runs of this tenant per pool; 0 = bounded only by the pool's queue length. */
  maxQueued: number;
}

/** A tenant as the config declares it. */
export interface TenantRecord extends QueueShare {
  /** Plain or `sha256:<hex>` keys; empty only for the keyless `anonymous` tenant. */
  keys: string[];
  /** Model name patterns this tenant may use (`*` wildcards). */
  models: string[];
  /** A2A agent id patterns this tenant may use. */
  agents: string[];
  /** 0 = no limit. */
  requestsPerMinute: number;
  /** Input plus output tokens of finished runs per minute; 0 = no limit. */
  tokensPerMinute: number;
  /** Runs in flight at once; 0 = no limit. */
  concurrentRuns: number;
  /**
   * May read the Edge's operator views (`/api/iop/status`, node run outputs), which show every
   * tenant's work; `default` (`http.api_keys`) and `anonymous` may, named tenants only when set.
   */
  operator: boolean;
}

/** The tenant an Edge with no API key serves every request as. */
export const ANONYMOUS_TENANT = "anonymous";

/** The tenant `http.api_keys` stands for. */
export const DEFAULT_TENANT = "default";

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** An unlimited tenant that may use everything. */
function openTenant(name: string, keys: string[]): TenantRecord {
  return {
    name,
    keys,
    models: ["*"],
    agents: ["*"],
    requestsPerMinute: 0,
    tokensPerMinute: 0,
    concurrentRuns: 0,
    weight: 1,
    priority: PRIORITY_CLASSES.indexOf("normal"),
    maxQueued: 0,
    operator: true,
  };
}

/**
 * Reads `tenants` plus the legacy `http.api_keys` (as tenant `default`). Names must be unique,
 * and a secret may belong to one tenant only. With no key anywhere, the result is the single
 * keyless `anonymous` tenant.
 */
export function readTenants(root: ConfigReader, http: ConfigReader): TenantRecord[] {
  const tenants = root.list("tenants").map(readTenant);
  const paths = tenants.map((_, i) => `tenants[${i}]`);
  const legacyKeys = readStoredSecrets(http, "api_keys");
  if (legacyKeys.length > 0) {
    const clash = tenants.findIndex((t) => t.name === DEFAULT_TENANT);
    if (clash >= 0) {
      throw new ConfigError(
        root.file,
        `tenants[${clash}].name`,
        `'${DEFAULT_TENANT}' is the tenant http.api_keys stands for: rename this tenant, or move those keys into its keys`,
      );
    }
    tenants.push(openTenant(DEFAULT_TENANT, legacyKeys));
    paths.push("http.api_keys");
  }
  if (tenants.length === 0) return [openTenant(ANONYMOUS_TENANT, [])];
  const names = new Map<string, string>();
  const secrets = new Map<string, string>();
  tenants.forEach((tenant, i) => {
    const where = paths[i]!;
    const first = names.get(tenant.name);
    if (first !== undefined) {
      throw new ConfigError(
        root.file,
        `${where}.name`,
        `duplicate tenant name '${tenant.name}' (first at ${first})`,
      );
    }
    names.set(tenant.name, `${where}.name`);
    tenant.keys.forEach((key, j) => {
      const path = where === "http.api_keys" ? `${where}[${j}]` : `${where}.keys[${j}]`;
      const fingerprint = secretFingerprint(key);
      const owner = secrets.get(fingerprint);
      if (owner !== undefined) {
        throw new ConfigError(
          root.file,
          path,
          `is the same secret as ${owner}: each key belongs to one tenant`,
        );
      }
      secrets.set(fingerprint, path);
    });
  });
  return tenants;
}

function readTenant(r: ConfigReader): TenantRecord {
  const name = r.nonEmpty("name");
  if (!NAME.test(name) || name === ANONYMOUS_TENANT) {
    throw r.error(
      "name",
      `must be 1–64 letters, digits, '.', '_' or '-' (not '${ANONYMOUS_TENANT}'): current value is '${name}'`,
    );
  }
  const keys = readStoredSecrets(r, "keys");
  if (keys.length === 0) throw r.error("keys", "must list at least one key");
  const limit = (key: string) => r.number(key, 0, { min: 0 });
  return {
    name,
    keys,
    models: readPatterns(r, "models"),
    agents: readPatterns(r, "agents"),
    requestsPerMinute: limit("requests_per_minute"),
    tokensPerMinute: limit("tokens_per_minute"),
    concurrentRuns: limit("concurrent_runs"),
    weight: r.number("weight", 1, { min: 0.001, max: 1000, integer: false }),
    priority: PRIORITY_CLASSES.indexOf(r.oneOf("priority", PRIORITY_CLASSES, "normal")),
    maxQueued: limit("max_queued"),
    operator: r.boolean("operator", false),
  };
}

function readPatterns(r: ConfigReader, key: string): string[] {
  if (!r.has(key)) return ["*"];
  const patterns = r.strings(key);
  patterns.forEach((p, i) => {
    if (p.trim() === "") throw r.error(`${key}[${i}]`, "must not be empty");
  });
  return patterns;
}

/**
 * True when `name` matches one of `patterns` (`*` matches any run of characters, none too).
 * Matched without backtracking, so a pattern from the config with many stars cannot be made to
 * take long by a long name from a peer: the literal pieces between the stars are found left to
 * right, each at its first place after the one before (the first leftmost place is always as
 * good as any later one), with the first piece anchored at the start and the last at the end.
 */
export function matchesPattern(patterns: readonly string[], name: string): boolean {
  return patterns.some((p) => globMatches(p, name));
}

function globMatches(pattern: string, name: string): boolean {
  const pieces = pattern.split("*");
  if (pieces.length === 1) return pattern === name;
  const first = pieces[0]!;
  const last = pieces[pieces.length - 1]!;
  if (first.length + last.length > name.length) return false;
  if (!name.startsWith(first) || !name.endsWith(last)) return false;
  let at = first.length;
  const end = name.length - last.length;
  for (const piece of pieces.slice(1, -1)) {
    if (piece === "") continue;
    const found = name.indexOf(piece, at);
    if (found < 0 || found + piece.length > end) return false;
    at = found + piece.length;
  }
  return true;
}

/** True when `tenant` may use the model whose name and aliases are given. */
export function mayUseModel(
  tenant: TenantRecord,
  model: { name: string; aliases: readonly string[] },
): boolean {
  return matchesPattern(tenant.models, model.name) ||
    model.aliases.some((alias) => matchesPattern(tenant.models, alias));
}

/** True when `tenant` may call A2A agent `agentId`. */
export function mayUseAgent(tenant: TenantRecord, agentId: string): boolean {
  return matchesPattern(tenant.agents, agentId);
}
