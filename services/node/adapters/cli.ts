/**
 * The CLI adapter: runs a configured command line (a "profile") per run, streams its stdout as
 * the answer and its stderr as log output, and decides the outcome by the exit code.
 *
 * The target of a run is a profile name. The prompt (`spec.prompt`, else the last user message),
 * the session id and the node's id replace `{prompt}`, `{session}` and `{node_id}` in the
 * profile's arguments; a run that continues a session uses `resumeArgs` when the profile has them.
 * A run with a session continues it unless its metadata {@linkcode SESSION_STATE_KEY} says `new`
 * (the Edge sets it on a session's first turn, so `{session}` is filled from turn one). A session
 * id that starts with `-` is refused, since it would read as an option of the command; so is a
 * prompt that would start an argument with `-` unless the template puts `--` before it (the
 * rule is in `cli_args.ts`).
 *
 * A profile runs at most its `maxConcurrency` runs at once on this node: one more is refused
 * with OVERLOADED at once, whatever the Edge believed when it sent it (CLI runs never queue).
 *
 * A run's process starts from a cleared environment: only {@linkcode INHERITED_ENV} (PATH, HOME,
 * LANG, LC_ALL, TZ, TERM, each when the node has it) plus the profile's own `env`, so the node's
 * token, provider keys and anything else in its environment never reach a profile. A bare
 * command name is looked up on the node's PATH, not on a PATH the profile sets.
 *
 * Each run's process leads its own process group: on cancel or timeout the whole group gets
 * SIGTERM, then SIGKILL after a grace period, and processes it left running after a normal exit
 * are stopped the same way, so a run never leaves processes behind. `execute` settles only once
 * the group is gone. With a `stateDir`, each live group is also recorded on disk, so that a Node
 * restarted after a hard death can stop the groups its predecessor left running (see
 * `group_reaper.ts`).
 *
 * Its pipes are read only while the run's sink has room (`EventSink.ready`): a consumer that
 * stops reading leaves them full, and the command blocks on its next write until it reads on.
 * @module
 */
import {
  CLI_RETRY_AFTER_SECONDS,
  profileMaxConcurrency,
} from "../../../shared/adapter_kinds/cli.ts";
import { kindFeatures } from "../../../shared/adapter_kinds/catalog.ts";
import { IopError, OverloadedError } from "../../../shared/errors.ts";
import { createLogger, type Logger } from "../../../shared/log.ts";
import { SESSION_STATE_KEY } from "../../../shared/run.ts";
import { traceIdOf } from "../../../shared/trace_context.ts";
import type {
  Adapter,
  AdapterConfig,
  Capabilities,
  CliProfile,
  EventSink,
  ExecuteOptions,
  ExecutionResult,
  ExecutionSpec,
} from "../ports.ts";
import { fillArgs } from "./cli_args.ts";
import { type RecordedGroup, recordGroup } from "./group_reaper.ts";
import { probeCliProfiles } from "./health.ts";
import { DEFAULT_KILL_GRACE_MS, type GroupChild, spawnGroup } from "./process_group.ts";
import { refuseUnhonoured } from "./model_run.ts";
import { effectivePrompt } from "./prompt.ts";

/** What a profile honours (no embedding, no images, no JSON output); see `catalog.ts`. */
const CLI_FEATURES = kindFeatures("cli")!;

/** Options of {@linkcode createCliAdapter}. */
export interface CliAdapterOptions {
  /** Time between SIGTERM and SIGKILL of a run's process group; defaults to 2 s. */
  killGraceMs?: number;
  /** Defaults to a logger for component "node.adapter.cli". */
  logger?: Logger;
  /**
   * Directory where each live run's process group is recorded for `reapOrphanedGroups`; when
   * absent nothing is recorded and a hard death of the Node leaves its runs' groups running.
   */
  stateDir?: string;
  /** Replaces `{node_id}` in profile arguments; defaults to "". */
  nodeId?: string;
}

/**
 * The node variables a CLI process inherits, each only when the node has it; every other
 * variable of the node's environment (its token, provider keys) stays out of CLI processes.
 */
export const INHERITED_ENV: readonly string[] = ["PATH", "HOME", "LANG", "LC_ALL", "TZ", "TERM"];

/** The whole environment of a profile's process: {@linkcode INHERITED_ENV}, then its `env`. */
function profileEnv(profile: CliProfile): Record<string, string> {
  const env: Record<string, string> = {};
  for (const name of INHERITED_ENV) {
    const value = readEnv(name);
    if (value !== undefined) env[name] = value;
  }
  return { ...env, ...profile.env };
}

function readEnv(name: string): string | undefined {
  try {
    return Deno.env.get(name);
  } catch {
    return undefined;
  }
}

/** Why a run's process group is being stopped before it exited by itself. */
type StopCause = { kind: "cancel"; reason: unknown } | { kind: "timeout"; ms: number };

/** How much of stderr is kept to quote its last line in a failure message. */
const STDERR_TAIL_CHARS = 4_096;

/** The run's time limit: the smaller of the profile's and the spec's, where set (0 = none). */
function timeLimit(profile: CliProfile, spec: ExecutionSpec): number {
  const limits = [profile.timeoutMs, spec.timeoutMs].filter((ms) => ms > 0);
  return limits.length === 0 ? 0 : Math.min(...limits);
}

function lastLine(text: string): string {
  const lines = text.split("\n").map((l) => l.trim()).filter((l) => l !== "");
  return lines.at(-1) ?? "";
}

async function isExecutableFile(path: string): Promise<boolean> {
  try {
    const info = await Deno.stat(path);
    return info.isFile && (info.mode === null || (info.mode & 0o111) !== 0);
  } catch {
    return false;
  }
}

/**
 * The executable `command` names: itself when it is a path, else the first match on the
 * Node's PATH; undefined when there is none.
 */
async function resolveCommand(command: string): Promise<string | undefined> {
  if (command === "") return undefined;
  if (command.includes("/")) return await isExecutableFile(command) ? command : undefined;
  const dirs = (readEnv("PATH") ?? "").split(":").filter((d) => d !== "");
  for (const dir of dirs) {
    if (await isExecutableFile(`${dir}/${command}`)) return `${dir}/${command}`;
  }
  return undefined;
}

/** What a run printed: stdout to the sink while live, line counts, and the tail of stderr. */
class OutputTracker {
  /** Cleared when stopping, so nothing reaches the sink after the run's outcome. */
  live = true;
  #newlines = 0;
  #endsWithNewline = true;
  #stderrTail = "";
  readonly #sink: EventSink;

  constructor(sink: EventSink) {
    this.#sink = sink;
  }

  stdout(text: string): void {
    if (!this.live) return;
    this.#newlines += text.split("\n").length - 1;
    this.#endsWithNewline = text.endsWith("\n");
    this.#sink.output(text);
  }

  /** Whether the sink has room for more; always once the run's outcome is decided. */
  ready(): Promise<void> | undefined {
    return this.live ? this.#sink.ready() : undefined;
  }

  stderr(text: string): void {
    this.#stderrTail = (this.#stderrTail + text).slice(-STDERR_TAIL_CHARS);
    if (this.live) this.#sink.log("stderr", text);
  }

  /** The run's result for exit code `code`; a non-zero code fails with stderr's last line. */
  result(profile: CliProfile, code: number): ExecutionResult {
    if (code !== 0) {
      const detail = lastLine(this.#stderrTail);
      throw new IopError(
        "BACKEND_ERROR",
        `CLI profile '${profile.name}' exited with code ${code}` +
          (detail === "" ? "" : `: ${detail}`),
        { exitCode: code },
      );
    }
    const lines = this.#newlines + (this.#endsWithNewline ? 0 : 1);
    return { finishReason: "stop", exitCode: code, usage: { inputTokens: 0, outputTokens: lines } };
  }
}

/** The run's arguments; throws INVALID_ARGUMENT for a value that would read as an option. */
function argsOf(profile: CliProfile, spec: ExecutionSpec, resume: boolean, nodeId: string) {
  return fillArgs(
    resume ? profile.resumeArgs : profile.args,
    { prompt: effectivePrompt(spec), session: spec.sessionId, node_id: nodeId },
    { profile: profile.name, command: profile.command, key: resume ? "resume_args" : "args" },
  );
}

/** Starts the profile's command in its own process group, its output going to `output`. */
function spawnProfile(
  profile: CliProfile,
  run: { args: string[]; executable: string },
  output: OutputTracker,
  killGraceMs: number,
): GroupChild {
  try {
    return spawnGroup(run.executable, {
      args: run.args,
      env: profileEnv(profile),
      cwd: profile.cwd,
      killGraceMs,
      onStdout: (text) => output.stdout(text),
      onStderr: (text) => output.stderr(text),
      ready: () => output.ready(),
    });
  } catch (err) {
    throw new IopError(
      "BACKEND_ERROR",
      `Cannot start CLI profile '${profile.name}' as command '${profile.command}' failed to ` +
        `spawn: ${err instanceof Error ? err.message : String(err)}`,
      { cause: err },
    );
  }
}

/** Settles with the first reason to stop a run early: its cancel, the adapter closing, or time. */
function stopCauses(
  signal: AbortSignal,
  closing: AbortSignal,
  limitMs: number,
): { cause: Promise<StopCause>; dispose(): void } {
  const stopped = Promise.withResolvers<StopCause>();
  const onAbort = () => stopped.resolve({ kind: "cancel", reason: signal.reason });
  const onClose = () => stopped.resolve({ kind: "cancel", reason: closing.reason });
  signal.addEventListener("abort", onAbort, { once: true });
  closing.addEventListener("abort", onClose, { once: true });
  if (signal.aborted) onAbort();
  const timer = limitMs > 0
    ? setTimeout(() => stopped.resolve({ kind: "timeout", ms: limitMs }), limitMs)
    : undefined;
  return {
    cause: stopped.promise,
    dispose: () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", onAbort);
      closing.removeEventListener("abort", onClose);
    },
  };
}

/** Creates a CLI adapter named `name` running the given profiles. */
export function createCliAdapter(
  name: string,
  settings: { profiles: CliProfile[] },
  options: CliAdapterOptions = {},
): Adapter {
  const profiles = new Map(settings.profiles.map((p) => [p.name, p]));
  const killGraceMs = options.killGraceMs ?? DEFAULT_KILL_GRACE_MS;
  const log = (options.logger ?? createLogger("node.adapter.cli")).with({ adapter: name });
  const running = new Set<Promise<unknown>>();
  /** Runs executing per profile name, against each profile's `maxConcurrency`. */
  const active = new Map<string, number>();
  const closing = new AbortController();

  /** Records a run's group for reaping; failing to costs that protection only, not the run. */
  function record(
    pgid: number,
    runId: string,
    profile: string,
    runLog: Logger,
  ): Promise<RecordedGroup | undefined> | undefined {
    const stateDir = options.stateDir;
    if (stateDir === undefined) return undefined;
    return recordGroup(stateDir, { pgid, runId, adapter: name, profile }).catch((err) => {
      runLog.warn("cannot record CLI process group for reaping after a crash", {
        state_dir: stateDir,
        err,
      });
      return undefined;
    });
  }

  async function run(
    profile: CliProfile,
    spec: ExecutionSpec,
    sink: EventSink,
    signal: AbortSignal,
  ): Promise<ExecutionResult> {
    if (spec.sessionId.startsWith("-")) {
      throw new IopError(
        "INVALID_ARGUMENT",
        `Cannot run CLI profile '${profile.name}' as session id '${spec.sessionId}' starts with '-'`,
      );
    }
    const resume = spec.sessionId !== "" && profile.resumeArgs.length > 0 &&
      spec.metadata[SESSION_STATE_KEY] !== "new";
    const args = argsOf(profile, spec, resume, options.nodeId ?? "");
    const output = new OutputTracker(sink);
    // Looked up on the node's PATH: a PATH in the profile's env does not choose what runs.
    const executable = await resolveCommand(profile.command) ?? profile.command;
    signal.throwIfAborted();
    closing.signal.throwIfAborted();
    const child = spawnProfile(profile, { args, executable }, output, killGraceMs);
    const runLog = log.with({
      run_id: spec.runId,
      trace_id: traceIdOf(spec.traceParent),
      profile: profile.name,
      pid: child.pid,
    });
    runLog.debug("cli process started", { resume });
    const recorded = record(child.pid, spec.runId, profile.name, runLog);
    const stop = stopCauses(signal, closing.signal, timeLimit(profile, spec));
    // A run stopped early (even while its group is being stopped after its exit) takes the rest
    // of the output without waiting for room: nobody reads it any more.
    void stop.cause.then(() => child.discardOutput());
    try {
      const first = await Promise.race([
        child.status.then((status) => ({ exited: status })),
        stop.cause.then((cause) => ({ cause })),
      ]);
      if ("cause" in first) {
        output.live = false;
        await child.stop();
        runLog.debug("cli process group stopped", { why: first.cause.kind, killed: child.killed });
        if (child.killed) {
          runLog.warn("cli process group ignored SIGTERM", { grace_ms: killGraceMs });
        }
        if (first.cause.kind === "cancel") throw first.cause.reason;
        throw new IopError(
          "TIMEOUT",
          `CLI profile '${profile.name}' timed out after ${first.cause.ms} ms`,
        );
      }
      // The leader exited; anything still running in its group would outlive the run.
      const { code } = await child.stop();
      runLog.debug("cli process exited", { exit_code: code });
      return output.result(profile, code);
    } finally {
      stop.dispose();
      // Every path above has awaited child.stop(), so the group is gone: forget it.
      await (await recorded)?.remove();
    }
  }

  return {
    name,
    kind: "cli",
    probe: ({ signal }) => probeCliProfiles(settings.profiles, resolveCommand, signal),
    async capabilities({ signal }): Promise<Capabilities> {
      if (signal.aborted) throw signal.reason;
      const targets: string[] = [];
      const missing: string[] = [];
      for (const p of profiles.values()) {
        if (await resolveCommand(p.command) !== undefined) targets.push(p.name);
        else missing.push(`${p.name} (${p.command || "no command"})`);
      }
      if (signal.aborted) throw signal.reason;
      const detail = profiles.size === 0
        ? "no CLI profiles configured"
        : `${targets.length} of ${profiles.size} profiles runnable` +
          (missing.length === 0 ? "" : `; command not found for: ${missing.join(", ")}`);
      return {
        targets,
        streaming: true,
        tools: CLI_FEATURES.tools,
        sessions: settings.profiles.some((p) => p.resumeArgs.length > 0),
        healthy: targets.length > 0,
        detail,
      };
    },
    execute(spec: ExecutionSpec, sink: EventSink, { signal }: ExecuteOptions) {
      if (signal.aborted) return Promise.reject(signal.reason);
      if (closing.signal.aborted) {
        return Promise.reject(new IopError("UNAVAILABLE", `CLI adapter '${name}' is closed`));
      }
      const profile = profiles.get(spec.target);
      if (profile === undefined) {
        return Promise.reject(
          new IopError(
            "NOT_FOUND",
            `Cannot run target '${spec.target}' as CLI adapter '${name}' has no such profile`,
          ),
        );
      }
      try {
        // The Edge refuses these first; this holds for any other caller.
        refuseUnhonoured("cli", CLI_FEATURES, spec);
      } catch (err) {
        return Promise.reject(err);
      }
      const limit = profileMaxConcurrency(profile);
      const busy = active.get(profile.name) ?? 0;
      if (busy >= limit) {
        return Promise.reject(
          new OverloadedError(
            `Cannot run CLI profile '${profile.name}' as it is at its limit on this node: ` +
              `${busy} of max_concurrency ${limit} runs executing`,
            CLI_RETRY_AFTER_SECONDS,
          ),
        );
      }
      active.set(profile.name, busy + 1);
      // The slot frees before the run settles, so whoever sees it end may start the next one.
      const execution = run(profile, spec, sink, signal).finally(() => {
        const left = (active.get(profile.name) ?? 1) - 1;
        if (left > 0) active.set(profile.name, left);
        else active.delete(profile.name);
      });
      const tracked = execution.catch(() => {});
      running.add(tracked);
      tracked.finally(() => running.delete(tracked));
      return execution;
    },
    async close() {
      closing.abort(new IopError("UNAVAILABLE", `CLI adapter '${name}' was closed`));
      await Promise.all(running);
    },
  };
}

/** Builds a CLI adapter from its configuration, for the adapter registry. */
export function cliAdapterFactory(config: AdapterConfig, options: CliAdapterOptions = {}): Adapter {
  if (config.kind !== "cli") {
    throw new TypeError(`Cannot build a CLI adapter from kind '${config.kind}'`);
  }
  return createCliAdapter(config.name, config.settings, options);
}
