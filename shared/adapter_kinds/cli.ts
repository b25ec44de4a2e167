/**
 * The `cli` adapter kind: CLI profiles a Node may run, each a run target. Keys per profile:
 * `name` and `command` (required), `args` (a template; `{prompt}`, `{session}` and `{node_id}`
 * are replaced per run), `resume_args` (used instead when a run continues a session), `env` (the
 * only variables the process gets besides PATH, HOME, LANG, LC_ALL, TZ and TERM), `cwd`,
 * `timeout_ms` (0 = none), `description`. Profile names are unique per adapter.
 * @module
 */
import type { ConfigReader } from "../config.ts";
import type { AdapterKind } from "./kind.ts";

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
    })),
  }),
};
