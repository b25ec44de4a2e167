/**
 * The `cli` adapter kind: CLI profiles a Node may run, each a run target. Keys per profile:
 * `name` and `command` (required), `args` (a template; `{prompt}`, `{session}` and `{node_id}`
 * are replaced per run), `resume_args` (used instead when a run continues a session), `env` (the
 * only variables the process gets besides PATH, HOME, LANG, LC_ALL, TZ and TERM), `cwd`,
 * `timeout_ms` (0 = none), `description`, `max_concurrency` (runs of the profile at once per
 * node, default {@linkcode DEFAULT_CLI_MAX_CONCURRENCY}). Profile names are unique per adapter.
 *
 * `max_concurrency` is enforced twice: the Edge routes a run only to a node whose profile has a
 * free slot and refuses it with OVERLOADED when none has (CLI runs are never queued), and the
 * Node's CLI adapter refuses a run beyond it itself, whatever its Edge believes.
 *
 * A client's `{prompt}` or `{session}` that would start an argument with `-` is refused with
 * INVALID_ARGUMENT unless the template has a `--` before that argument (`["--", "{prompt}"]`);
 * inside a larger argument (`--message={prompt}`) it is always safe (`cli_args.ts` of the Node).
 * @module
 */
import type { ConfigReader } from "../config.ts";
import type { AdapterKind } from "./kind.ts";

/**
 * Runs of one CLI profile a node executes at once when its config says nothing. CLI profiles
 * are agents and build scripts: each run is a whole process tree that can hold CPU, memory and
 * a working directory for minutes, so a small number keeps a burst of requests from swamping a
 * host, while 2 (not 1) still lets a second client start while a long run goes on.
 */
export const DEFAULT_CLI_MAX_CONCURRENCY = 2;

/**
 * The `Retry-After` of a CLI run refused because its profile is full. A CLI run lasts seconds
 * to minutes and nothing predicts when a slot frees, so this is a polite pause, not a promise.
 */
export const CLI_RETRY_AFTER_SECONDS = 5;

/** One runnable command line of the CLI adapter. */
export interface CliProfile {
  name: string;
  command: string;
  /** Argument template; `{prompt}` and `{session}` are replaced per run. */
  args: string[];
  /** Used instead of `args` when a run continues a session. */
  resumeArgs: string[];
  env: Record<string, string>;
  cwd: string;
  timeoutMs: number;
  description: string;
  /**
   * Runs of this profile at once per node (`max_concurrency`); `parse` always sets it, absent
   * means {@linkcode DEFAULT_CLI_MAX_CONCURRENCY} (read it with {@linkcode profileMaxConcurrency}).
   */
  maxConcurrency?: number;
}

/** The most runs of `profile` a node executes at once. */
export function profileMaxConcurrency(profile: Pick<CliProfile, "maxConcurrency">): number {
  return profile.maxConcurrency ?? DEFAULT_CLI_MAX_CONCURRENCY;
}

/** Settings of a CLI adapter. */
export interface CliSettings {
  profiles: CliProfile[];
}

function parseProfile(r: ConfigReader): CliProfile {
  return {
    name: r.nonEmpty("name"),
    command: r.nonEmpty("command"),
    args: r.strings("args"),
    resumeArgs: r.strings("resume_args"),
    env: r.stringMap("env"),
    cwd: r.string("cwd", ""),
    timeoutMs: r.number("timeout_ms", 0, { min: 0 }),
    description: r.string("description", ""),
    maxConcurrency: r.number("max_concurrency", DEFAULT_CLI_MAX_CONCURRENCY, { min: 1 }),
  };
}

/** The CLI kind. */
export const cliKind: AdapterKind<"cli", CliSettings> = {
  kinds: ["cli"],
  parse: (r) => {
    const readers = r.list("profiles");
    const profiles = readers.map(parseProfile);
    const first = new Map<string, number>();
    profiles.forEach((p, i) => {
      const earlier = first.get(p.name);
      if (earlier !== undefined) {
        throw readers[i]!.error(
          "name",
          `duplicate CLI profile name '${p.name}' (first at ${readers[earlier]!.path}.name)`,
        );
      }
      first.set(p.name, i);
    });
    return { profiles };
  },
  toConfig: (s) => ({
    profiles: s.profiles.map((p) => ({
      name: p.name,
      command: p.command,
      args: p.args,
      resume_args: p.resumeArgs,
      env: p.env,
      cwd: p.cwd,
      timeout_ms: p.timeoutMs,
      description: p.description,
      max_concurrency: profileMaxConcurrency(p),
    })),
  }),
};
