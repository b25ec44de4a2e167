/**
 * The Node's own policy: what configuration pushed by its Edge may use on this host. Whoever
 * answers as the Edge chooses the adapters, so the Node's owner lists in `node.yaml` which
 * adapter kinds, commands, working directories, environment variables and backend hosts those
 * adapters may use:
 *
 * ```yaml
 * policy:
 *   adapter_kinds: [mock, cli, ollama]      # default [mock]
 *   cli:
 *     commands: [sh, /usr/local/bin/claude] # exact match of a profile's `command`
 *     cwd: [/srv/work, "."]                 # and their subdirectories; "." = the node's own
 *   api_key_env: [OPENAI_API_KEY]           # variables an adapter may read as api_key_env
 *   backend_hosts: [127.0.0.1:11434, ollama] # host:port, or host for any port
 *   max_active_runs: 64                     # runs executing at once on this node (default 64)
 * ```
 *
 * `max_active_runs` caps the runs this node executes at once, whatever its Edge sends: one more
 * is refused with OVERLOADED. The Edge cannot see this cap; it is the node's own safety net.
 *
 * A node without a `policy` section runs only `mock` adapters. A pushed adapter outside the
 * policy is refused as a whole, with a reason naming the pushed key and the policy key; the
 * other adapters keep serving. Paths are compared after `.` and `..` are resolved, not after
 * symbolic links are: a link inside an allowed directory leads where it points.
 * @module
 */
import { resolve, sep } from "node:path";
import {
  ADAPTER_KIND_NAMES,
  adapterKind,
  type AdapterKindName,
} from "../../shared/adapter_kinds/catalog.ts";
import type { ConfigReader } from "../../shared/config.ts";
import type { Logger } from "../../shared/log.ts";
import type { AdapterConfig, CliProfile, HttpModelSettings } from "./ports.ts";

/** What configuration pushed by the Edge may use on this host. */
export interface NodePolicy {
  /** Adapter kinds the Edge may configure here. */
  adapterKinds: readonly AdapterKindName[];
  cli: {
    /** Executables a CLI profile may run: exact matches of its `command`. */
    commands: readonly string[];
    /** Directories (and their subdirectories) a profile may run in; "." = the node's own. */
    cwd: readonly string[];
  };
  /** Node environment variables a model adapter may read as its `api_key_env`. */
  apiKeyEnv: readonly string[];
  /** `host:port`, or `host` for any port, a model adapter's `base_url` may point at. */
  backendHosts: readonly string[];
  /**
   * Most runs executing at once on this node (`max_active_runs`); absent means
   * {@linkcode DEFAULT_MAX_ACTIVE_RUNS} (read it with {@linkcode maxActiveRuns}).
   */
  maxActiveRuns?: number;
  /** True when `node.yaml` has no `policy` section and these are the defaults. */
  isDefault: boolean;
}

/**
 * Runs a node executes at once when `policy.max_active_runs` is not set: far above what one
 * host's CLI profiles (2 each by default) and model providers normally need, low enough that a
 * runaway or hostile Edge cannot make the node start processes and streams without bound.
 */
export const DEFAULT_MAX_ACTIVE_RUNS = 64;

/** The most runs the node executes at once under `policy`. */
export function maxActiveRuns(policy: NodePolicy): number {
  return policy.maxActiveRuns ?? DEFAULT_MAX_ACTIVE_RUNS;
}

/** The policy of a node whose `node.yaml` has no `policy` section: `mock` adapters only. */
export const DEFAULT_NODE_POLICY: NodePolicy = Object.freeze({
  adapterKinds: Object.freeze(["mock"] as const),
  cli: Object.freeze({ commands: Object.freeze([]), cwd: Object.freeze([]) }),
  apiKeyEnv: Object.freeze([]),
  backendHosts: Object.freeze([]),
  isDefault: true,
});

const POLICY_KEYS = ["adapter_kinds", "cli", "api_key_env", "backend_hosts", "max_active_runs"];
const CLI_KEYS = ["commands", "cwd"];
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
/** Variables the dynamic loader reads: setting one runs code the node never allowed. */
const LOADER_ENV = /^(LD_|DYLD_)/;

/** Reads the `policy` section of the Node config at `root`; the defaults when it is absent. */
export function readNodePolicy(root: ConfigReader): NodePolicy {
  if (!root.has("policy")) return DEFAULT_NODE_POLICY;
  const r = root.section("policy");
  rejectUnknownKeys(r, POLICY_KEYS);
  const cli = r.section("cli");
  rejectUnknownKeys(cli, CLI_KEYS);
  const adapterKinds = r.has("adapter_kinds")
    ? entries(r, "adapter_kinds", (value, at) => {
      if (!(ADAPTER_KIND_NAMES as readonly string[]).includes(value)) {
        throw r.error(
          at,
          `must be one of ${ADAPTER_KIND_NAMES.join(", ")}: current value is '${value}'`,
        );
      }
      return value as AdapterKindName;
    })
    : DEFAULT_NODE_POLICY.adapterKinds;
  return {
    adapterKinds,
    cli: {
      commands: entries(cli, "commands", (value) => value),
      cwd: entries(cli, "cwd", (value) => value),
    },
    apiKeyEnv: entries(r, "api_key_env", (value, at) => {
      if (!ENV_NAME.test(value)) {
        throw r.error(at, `must be an environment variable name: current value is '${value}'`);
      }
      if (value.startsWith("IOP_")) {
        throw r.error(at, `must not name an IOP_ variable: those configure the node itself`);
      }
      return value;
    }),
    backendHosts: entries(r, "backend_hosts", (value, at) => {
      const host = parseHostEntry(value);
      if (host === undefined) {
        throw r.error(at, `must be host:port or host: current value is '${value}'`);
      }
      return host.port === undefined ? host.host : `${host.host}:${host.port}`;
    }),
    ...(r.has("max_active_runs")
      ? { maxActiveRuns: r.number("max_active_runs", DEFAULT_MAX_ACTIVE_RUNS, { min: 1 }) }
      : {}),
    isDefault: false,
  };
}

function rejectUnknownKeys(r: ConfigReader, known: readonly string[]): void {
  for (const key of r.keys()) {
    if (!known.includes(key)) throw r.error(key, `unknown key (known: ${known.join(", ")})`);
  }
}

/** The non-empty strings of list `key`, each checked by `check` with its key (`key[i]`). */
function entries<T>(r: ConfigReader, key: string, check: (value: string, at: string) => T): T[] {
  return r.strings(key).map((raw, i) => {
    const value = raw.trim();
    if (value === "") throw r.error(`${key}[${i}]`, "must not be empty");
    return check(value, `${key}[${i}]`);
  });
}

/** `host:port`, `host`, `[v6]:port` or `[v6]`; undefined when it is none of those. */
function parseHostEntry(entry: string): { host: string; port?: number } | undefined {
  const bracketed = /^(\[[0-9A-Fa-f:.]+\])(?::(\d+))?$/.exec(entry);
  const plain = /^([A-Za-z0-9.\-_]+)(?::(\d+))?$/.exec(entry);
  const match = bracketed ?? plain;
  if (!match) return undefined;
  const host = match[1]!.toLowerCase();
  if (match[2] === undefined) return { host };
  const port = Number(match[2]);
  return port >= 1 && port <= 65535 ? { host, port } : undefined;
}

/** What a refusal says the policy key allows. */
function allows(policy: NodePolicy, key: string, list: readonly string[]): string {
  const what = list.length === 0 ? `${key} allows none` : `${key} allows: ${list.join(", ")}`;
  return policy.isDefault ? `${what}; node.yaml has no policy section` : what;
}

/**
 * Why the policy refuses this adapter, naming the pushed key and the policy key, or undefined
 * when it may run. Relative directories are resolved against `workDir` (the node's own).
 */
export function policyRefusal(
  policy: NodePolicy,
  config: AdapterConfig,
  workDir: string = Deno.cwd(),
): string | undefined {
  // A kind this build does not know has no factory; the registry reports it as unknown.
  if (adapterKind(config.kind) === undefined) return undefined;
  if (!(policy.adapterKinds as readonly string[]).includes(config.kind)) {
    return `kind: '${config.kind}' is not allowed on this node ` +
      `(${allows(policy, "policy.adapter_kinds", policy.adapterKinds)})`;
  }
  switch (config.kind) {
    case "mock":
      return undefined;
    case "cli":
      return cliRefusal(policy, config.settings.profiles, workDir);
    case "ollama":
    case "vllm":
    case "openai_compat":
      return modelRefusal(policy, config.settings);
  }
}

function cliRefusal(
  policy: NodePolicy,
  profiles: readonly CliProfile[],
  workDir: string,
): string | undefined {
  for (const [i, p] of profiles.entries()) {
    const at = `profiles[${i}]`;
    if (!policy.cli.commands.includes(p.command)) {
      return `${at}.command: '${p.command}' is not allowed on this node ` +
        `(${allows(policy, "policy.cli.commands", policy.cli.commands)})`;
    }
    if (!cwdAllowed(p.cwd, policy.cli.cwd, workDir)) {
      const listed = allows(policy, "policy.cli.cwd", policy.cli.cwd);
      return p.cwd === ""
        ? `${at}.cwd: not set, so the profile would run in the node's working directory, ` +
          `which is not allowed on this node (${listed}; list "." to allow it)`
        : `${at}.cwd: '${p.cwd}' is not inside a directory allowed on this node (${listed})`;
    }
    const loader = Object.keys(p.env).find((name) => LOADER_ENV.test(name));
    if (loader !== undefined) {
      return `${at}.env.${loader}: dynamic-loader variables are never allowed on a node`;
    }
  }
  return undefined;
}

/** True when `cwd` ("" = the node's working directory) is an allowed directory or inside one. */
function cwdAllowed(cwd: string, allowed: readonly string[], workDir: string): boolean {
  const target = resolve(workDir, cwd === "" ? "." : cwd);
  return allowed.some((dir) => {
    const base = resolve(workDir, dir);
    return target === base || target.startsWith(base.endsWith(sep) ? base : base + sep);
  });
}

function modelRefusal(policy: NodePolicy, s: HttpModelSettings): string | undefined {
  let url: URL;
  try {
    url = new URL(s.baseUrl);
  } catch {
    return "base_url: is not a URL";
  }
  const host = url.hostname.toLowerCase();
  const port = url.port !== "" ? Number(url.port) : url.protocol === "https:" ? 443 : 80;
  const listed = policy.backendHosts.some((entry) => {
    const allowed = parseHostEntry(entry);
    return allowed?.host === host && (allowed.port === undefined || allowed.port === port);
  });
  if (!listed) {
    return `base_url: host '${host}:${port}' is not allowed on this node ` +
      `(${allows(policy, "policy.backend_hosts", policy.backendHosts)})`;
  }
  if (s.apiKeyEnv !== "" && !policy.apiKeyEnv.includes(s.apiKeyEnv)) {
    return `api_key_env: '${s.apiKeyEnv}' is not allowed on this node ` +
      `(${allows(policy, "policy.api_key_env", policy.apiKeyEnv)})`;
  }
  return undefined;
}

/**
 * Splits pushed adapters into those the policy allows and the reasons for those it refuses,
 * by name. A refused name is refused for every configuration that carries it; disabled
 * configurations pass, as nothing is built from them.
 */
export function applyNodePolicy(
  policy: NodePolicy,
  configs: readonly AdapterConfig[],
  workDir: string = Deno.cwd(),
): { allowed: AdapterConfig[]; refused: Record<string, string> } {
  const refused: Record<string, string> = {};
  for (const config of configs) {
    if (!config.enabled || Object.hasOwn(refused, config.name)) continue;
    const reason = policyRefusal(policy, config, workDir);
    if (reason !== undefined) refused[config.name] = reason;
  }
  const allowed = configs.filter((c) => !Object.hasOwn(refused, c.name));
  return { allowed, refused };
}

/** Logs once what the policy allows: a warning when it is the default, so the owner sees how. */
export function logNodePolicy(logger: Logger, policy: NodePolicy): void {
  const fields = {
    adapter_kinds: policy.adapterKinds,
    cli_commands: policy.cli.commands,
    cli_cwd: policy.cli.cwd,
    api_key_env: policy.apiKeyEnv,
    backend_hosts: policy.backendHosts,
    max_active_runs: maxActiveRuns(policy),
  };
  if (policy.isDefault) {
    logger.warn(
      "node.yaml has no policy section: the edge may configure only mock adapters here; to " +
        "allow more, add policy.adapter_kinds, policy.cli.commands, policy.cli.cwd, " +
        "policy.api_key_env and policy.backend_hosts",
      fields,
    );
  } else {
    logger.info("node policy: what the edge may configure here", fields);
  }
}
