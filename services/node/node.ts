/**
 * The Node's application core: builds its adapters from the config the Edge pushes, refusing
 * those the Node's own policy does not allow (`policy.ts`), executes runs through them, turns
 * adapter callbacks into sequence-numbered run events, records every run in the history store,
 * and answers node commands. It knows nothing of the wire.
 * @module
 */
import { IopError, toIopError } from "../../shared/errors.ts";
import type { Logger } from "../../shared/log.ts";
import type { RunEvent, RunInput } from "../../shared/run.ts";
import { applyNodePolicy, type NodePolicy } from "./policy.ts";
import type {
  Adapter,
  AdapterConfig,
  Capabilities,
  Clock,
  EventSink,
  ExecutionResult,
  RunMetrics,
  RunRecord,
  RunStore,
  ToolCall,
} from "./ports.ts";
import { type AdapterLookup, resolve } from "./router.ts";

/** Longest output kept in a history row. */
const SUMMARY_CHARS = 2_000;

/** Builds adapters from config; see `adapters/registry.ts`. */
export type AdapterBuilder = (configs: AdapterConfig[]) => {
  adapters: AdapterLookup & { list(): Adapter[] };
  rejected: Record<string, string>;
};

/** Options of {@linkcode NodeCore}. */
export interface NodeCoreOptions {
  nodeId: string;
  store: RunStore;
  buildAdapters: AdapterBuilder;
  /** What pushed configuration may use on this host; adapters outside it are refused. */
  policy: NodePolicy;
  logger: Logger;
  clock?: Clock;
  metrics?: RunMetrics;
}

/** Receives the run events of one run, in order. */
export type RunEventSink = (event: RunEvent) => void;

/** Capabilities of one adapter, for the capabilities command. */
export interface AdapterReport extends Capabilities {
  name: string;
  kind: string;
}

interface Running {
  controller: AbortController;
  cancelReason: string | undefined;
  done: Promise<void>;
}

/** Sends one event of a run, numbering and stamping it. */
type Send = (event: DistributiveOmit<RunEvent, "runId" | "seq" | "timestampMs">) => void;

/** What the core keeps of one run while it executes. */
interface RunState {
  runId: string;
  startedAtMs: number;
  running: Running;
  send: Send;
  /** The first SUMMARY_CHARS of its output, for the history. */
  summary: string;
  firstOutputAtMs: number | undefined;
}

/** The Node core. */
export class NodeCore {
  readonly #options: NodeCoreOptions;
  readonly #clock: Clock;
  readonly #running = new Map<string, Running>();
  #adapters: ReturnType<AdapterBuilder>["adapters"] | undefined;
  /** Why each adapter of the last config was refused, so a run on one says why it cannot. */
  #refused: Record<string, string> = {};
  #maxConcurrentRuns = 0;

  constructor(options: NodeCoreOptions) {
    this.#options = options;
    this.#clock = options.clock ?? { now: Date.now };
  }

  /** Runs executing now. */
  get inFlight(): number {
    return this.#running.size;
  }

  /**
   * Replaces the adapter registry with one built from the Edge's config; an adapter the
   * policy refuses is not built, and is reported (and logged) with the reason.
   */
  applyConfig(configs: AdapterConfig[], maxConcurrentRuns: number): {
    adapters: string[];
    rejected: Record<string, string>;
  } {
    const { allowed, refused } = applyNodePolicy(this.#options.policy, configs);
    for (const [adapter, reason] of Object.entries(refused)) {
      this.#options.logger.warn("adapter refused by node policy", { adapter, reason });
    }
    const built = this.#options.buildAdapters(allowed);
    for (const [adapter, reason] of Object.entries(built.rejected)) {
      this.#options.logger.warn("adapter rejected", { adapter, reason });
    }
    const previous = this.#adapters;
    this.#adapters = built.adapters;
    for (const old of previous?.list() ?? []) {
      old.close?.().catch((err) =>
        this.#options.logger.warn("adapter close failed", { adapter: old.name, err })
      );
    }
    this.#maxConcurrentRuns = maxConcurrentRuns;
    this.#refused = { ...refused, ...built.rejected };
    return { adapters: built.adapters.list().map((a) => a.name), rejected: { ...this.#refused } };
  }

  /** Starts a run; its events, ending with exactly one terminal event, go to `emit`. */
  startRun(runId: string, input: RunInput, emit: RunEventSink): void {
    let seq = 0;
    const send: Send = (event) =>
      emit({ ...event, runId, seq: ++seq, timestampMs: this.#clock.now() } as RunEvent);
    const startedAtMs = this.#clock.now();
    let resolved;
    try {
      resolved = this.#admit(runId, input);
      // Recorded before it is tracked, so a run the history refuses leaves nothing behind.
      this.#options.store.startRun({
        runId,
        adapter: input.adapter,
        target: input.target,
        startedAtMs,
      });
    } catch (err) {
      const e = toIopError(err);
      send({
        type: "failed",
        code: e.code,
        message: e.message,
        retryable: e.retryable,
        exitCode: 0,
      });
      return;
    }
    const { adapter, spec } = resolved;
    const running: Running = {
      controller: new AbortController(),
      cancelReason: undefined,
      done: Promise.resolve(),
    };
    this.#running.set(runId, running);
    this.#options.metrics?.runsInFlight(this.#running.size);
    send({
      type: "started",
      nodeId: this.#options.nodeId,
      adapter: input.adapter,
      target: input.target,
    });
    const run: RunState = {
      runId,
      startedAtMs,
      running,
      send,
      summary: "",
      firstOutputAtMs: undefined,
    };
    const signal = running.controller.signal;
    running.done = adapter.execute(spec, this.#sinkFor(run), { signal }).then(
      (result) => this.#completed(run, result),
      (err) => this.#ended(run, err),
    ).finally(() => {
      this.#running.delete(runId);
      this.#options.metrics?.runsInFlight(this.#running.size);
    });
  }

  /** Resolves the run's adapter, or throws why this Node refuses the run. */
  #admit(runId: string, input: RunInput): ReturnType<typeof resolve> {
    if (this.#running.has(runId)) {
      throw new IopError("INVALID_ARGUMENT", `Run '${runId}' is already running`);
    }
    if (this.#maxConcurrentRuns > 0 && this.#running.size >= this.#maxConcurrentRuns) {
      throw new IopError("OVERLOADED", `Node is at its limit of ${this.#maxConcurrentRuns} runs`);
    }
    if (!this.#adapters) throw new IopError("UNAVAILABLE", "Node has no configuration yet");
    if (!this.#adapters.get(input.adapter) && Object.hasOwn(this.#refused, input.adapter)) {
      throw new IopError(
        "NOT_FOUND",
        `Cannot run as this node refused adapter '${input.adapter}': ` +
          this.#refused[input.adapter],
      );
    }
    return resolve(runId, input, this.#adapters);
  }

  /** The sink an adapter writes to: events while the run is not cancelled, and the summary. */
  #sinkFor(run: RunState): EventSink {
    const signal = run.running.controller.signal;
    return {
      output: (text: string) => {
        if (signal.aborted || text === "") return;
        run.firstOutputAtMs ??= this.#clock.now();
        if (run.summary.length < SUMMARY_CHARS) {
          run.summary += text.slice(0, SUMMARY_CHARS - run.summary.length);
        }
        run.send({ type: "output", text });
      },
      toolCall: (call: ToolCall) => {
        if (!signal.aborted) run.send({ type: "tool_call", call });
      },
      log: (stream: string, text: string) => {
        if (!signal.aborted) run.send({ type: "log", stream, text });
      },
    };
  }

  #completed(run: RunState, result: ExecutionResult): void {
    const finishedAtMs = this.#clock.now();
    if (result.usage) run.send({ type: "usage", usage: result.usage });
    run.send({
      type: "completed",
      finishReason: result.finishReason,
      exitCode: result.exitCode ?? 0,
      ...(result.usage ? { usage: result.usage } : {}),
    });
    this.#record(run.runId, run.startedAtMs, {
      status: "completed",
      finishedAtMs,
      outputSummary: run.summary,
      ...(run.firstOutputAtMs !== undefined ? { firstOutputAtMs: run.firstOutputAtMs } : {}),
      ...(result.usage ? { usage: result.usage } : {}),
      ...(result.exitCode !== undefined ? { exitCode: result.exitCode } : {}),
    });
  }

  /** Ends a run whose execution rejected: cancelled when it was aborted, failed otherwise. */
  #ended(run: RunState, err: unknown): void {
    const finishedAtMs = this.#clock.now();
    const extra = run.firstOutputAtMs !== undefined ? { firstOutputAtMs: run.firstOutputAtMs } : {};
    if (run.running.controller.signal.aborted) {
      const reason = run.running.cancelReason ?? "cancelled";
      run.send({ type: "cancelled", reason });
      this.#record(run.runId, run.startedAtMs, {
        status: "cancelled",
        finishedAtMs,
        outputSummary: run.summary,
        ...extra,
      });
      return;
    }
    const error = toIopError(err, "BACKEND_ERROR");
    run.send({
      type: "failed",
      code: error.code,
      message: error.message,
      retryable: error.retryable,
      exitCode: error.exitCode ?? 0,
    });
    this.#record(run.runId, run.startedAtMs, {
      status: "failed",
      finishedAtMs,
      outputSummary: run.summary,
      error,
      ...extra,
      ...(error.exitCode !== undefined ? { exitCode: error.exitCode } : {}),
    });
  }

  #record(
    runId: string,
    startedAtMs: number,
    outcome: Parameters<RunStore["completeRun"]>[1],
  ): void {
    this.#options.metrics?.runFinished(
      outcome.status,
      Math.max(0, outcome.finishedAtMs - startedAtMs) / 1000,
    );
    try {
      this.#options.store.completeRun(runId, outcome);
    } catch (err) {
      this.#options.logger.error("cannot record run in history", { run_id: runId, err });
    }
  }

  /** Cancels a run; returns false when it is not running here. */
  cancelRun(runId: string, reason: string): boolean {
    const running = this.#running.get(runId);
    if (!running) return false;
    running.cancelReason ??= reason;
    running.controller.abort(new IopError("CANCELLED", reason));
    return true;
  }

  /** Cancels every run and closes every adapter; the core is unusable afterwards. */
  async close(): Promise<void> {
    await this.cancelAll("node stopping");
    await Promise.allSettled((this.#adapters?.list() ?? []).map((a) => a.close?.()));
    this.#adapters = undefined;
  }

  /** Cancels every run, e.g. when the link to the Edge is lost; resolves when all ended. */
  async cancelAll(reason: string): Promise<void> {
    const all = [...this.#running.values()];
    for (const [runId] of this.#running) this.cancelRun(runId, reason);
    await Promise.allSettled(all.map((r) => r.done));
  }

  /** The most recent runs in the history, newest first. */
  history(limit: number): RunRecord[] {
    return this.#options.store.history(Math.min(Math.max(limit, 1), 1000));
  }

  /** Every adapter's capabilities; an adapter that fails to answer is reported unhealthy. */
  async capabilities(): Promise<AdapterReport[]> {
    const adapters = this.#adapters?.list() ?? [];
    return await Promise.all(adapters.map(async ({ name, kind }) => {
      const adapter = this.#adapters!.get(name)!;
      try {
        const caps = await adapter.capabilities({ signal: AbortSignal.timeout(5_000) });
        return { name, kind, ...caps };
      } catch (err) {
        return {
          name,
          kind,
          targets: [],
          streaming: false,
          tools: false,
          sessions: false,
          healthy: false,
          detail: toIopError(err).message,
        };
      }
    }));
  }
}

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;
