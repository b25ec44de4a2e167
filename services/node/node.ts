/**
 * The Node's application core: builds its adapters from the config the Edge pushes, refusing
 * those the Node's own policy does not allow (`policy.ts`), executes runs through them, turns
 * adapter callbacks into sequence-numbered run events, records every run in the history store,
 * and answers node commands. It knows nothing of the wire: where a run's events go, and whether
 * there is room for more of them (flow control), is the {@linkcode RunOutlet} it is given. A
 * run ends by itself, by `cancelRun` or by `cancelAll` (the node stopping), never because a
 * link went away.
 * @module
 */
import { IopError, OverloadedError, toIopError } from "../../shared/errors.ts";
import type { Logger } from "../../shared/log.ts";
import type { RunEvent, RunInput } from "../../shared/run.ts";
import { traceIdOf } from "../../shared/trace_context.ts";
import type { TraceSpan } from "../../shared/tracing.ts";
import { cutToBytes, utf8Length } from "../../shared/utf8.ts";
import { DEFAULT_OUTPUT_CAP_BYTES } from "./output_cap.ts";
import { applyNodePolicy, maxActiveRuns, type NodePolicy } from "./policy.ts";
import type {
  Adapter,
  AdapterConfig,
  Capabilities,
  Clock,
  EventSink,
  ExecutionResult,
  RunMetrics,
  RunOutcome,
  RunRecord,
  RunStore,
  StoredOutput,
  ToolCall,
} from "./ports.ts";
import { type AdapterLookup, resolve } from "./router.ts";
import { endRunSpan, FIRST_TOKEN_EVENT, refusedRunSpan, startRunSpan } from "./run_trace.ts";

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
  /**
   * Most bytes of a run's whole output kept for the history (node.yaml
   * `history.output_cap_bytes`); defaults to {@linkcode DEFAULT_OUTPUT_CAP_BYTES}.
   */
  outputCapBytes?: number;
}

/** Receives the run events of one run, in order. */
export type RunEventSink = (event: RunEvent) => void;

/** Where one run's events go, and whether their consumer has room for more. */
export interface RunOutlet {
  /** Takes the run's events in order; a throw refuses the event, which fails the run. */
  emit: RunEventSink;
  /**
   * Undefined while the run may go on; else a promise that resolves once its consumer made
   * room (see `EventSink.ready`). Must not allocate while there is room.
   */
  ready(): Promise<void> | undefined;
}

/** The outlet of a plain sink: always room. */
function alwaysRoom(emit: RunEventSink): RunOutlet {
  return { emit, ready: () => undefined };
}

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
  /** Its whole output, in pieces, up to the output cap, for the history. */
  output: string[];
  outputBytes: number;
  /** It printed more than the cap: `output` stops at it. */
  outputTruncated: boolean;
  /** Vectors an embedding run answered, and the length of the first, for the history. */
  embeddings: number;
  embeddingValues: number;
  firstOutputAtMs: number | undefined;
  /** Its span (`iop.run`) while tracing is on (`run_trace.ts`). */
  span: TraceSpan | undefined;
  traceId: string;
}

/** The Node core. */
export class NodeCore {
  readonly #options: NodeCoreOptions;
  readonly #clock: Clock;
  readonly #running = new Map<string, Running>();
  #adapters: ReturnType<AdapterBuilder>["adapters"] | undefined;
  /** Why each adapter of the last config was refused, so a run on one says why it cannot. */
  #refused: Record<string, string> = {};
  /** Runs executing on each adapter instance, so that a replaced one closes after its last. */
  readonly #users = new Map<Adapter, number>();
  /** Adapters a newer config replaced while runs still used them; closed as those end. */
  readonly #retired = new Set<Adapter>();
  /** Set while the node stops (`refuseNewRuns`): why it takes no new run. */
  #refusing: string | undefined;
  readonly #endedCounts: Record<RunOutcome["status"], number> = {
    completed: 0,
    failed: 0,
    cancelled: 0,
    interrupted: 0,
  };

  constructor(options: NodeCoreOptions) {
    this.#options = options;
    this.#clock = options.clock ?? { now: Date.now };
  }

  /** Why the node takes no new run (it is stopping); undefined while it takes them. */
  get stopping(): string | undefined {
    return this.#refusing;
  }

  /** Runs executing now. */
  get inFlight(): number {
    return this.#running.size;
  }

  /**
   * Refuses every run started from now on with a retryable UNAVAILABLE naming `reason` (a
   * stopping node drains: the Edge may send the run elsewhere); runs in flight go on.
   */
  refuseNewRuns(reason: string): void {
    this.#refusing = reason;
  }

  /** How many runs ended since this core started, by how they ended; the drain reports them. */
  endedRuns(): Readonly<Record<RunOutcome["status"], number>> {
    return { ...this.#endedCounts };
  }

  /** Resolves once some run in flight has ended, at once when none runs. */
  nextRunEnd(): Promise<void> {
    const all = [...this.#running.values()].map((r) => r.done);
    return all.length === 0 ? Promise.resolve() : Promise.race(all).then(() => {}, () => {});
  }

  /**
   * Replaces the adapter registry with one built from the Edge's config, at once and whole; an
   * adapter the policy refuses is not built, and is reported (and logged) with the reason. New
   * runs use the new registry; runs in flight finish on the adapter instance they started with,
   * and each replaced instance is closed when its last run ends.
   */
  applyConfig(configs: AdapterConfig[]): {
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
      if ((this.#users.get(old) ?? 0) > 0) this.#retired.add(old);
      else this.#closeAdapter(old);
    }
    this.#refused = { ...refused, ...built.rejected };
    return { adapters: built.adapters.list().map((a) => a.name), rejected: { ...this.#refused } };
  }

  /**
   * Starts a run; its events, ending with exactly one terminal event, go to `out` (a plain sink
   * always has room); its adapter reads its backend only while `out` has room.
   */
  startRun(runId: string, input: RunInput, out: RunEventSink | RunOutlet): void {
    const outlet = typeof out === "function" ? alwaysRoom(out) : out;
    const emit = outlet.emit;
    let seq = 0;
    // Numbered once sent: an event the outbox refuses (too large for a frame) throws into the
    // adapter, fails the run, and leaves no gap before the failure.
    const send: Send = (event) => {
      emit({ ...event, runId, seq: seq + 1, timestampMs: this.#clock.now() } as RunEvent);
      seq++;
    };
    const startedAtMs = this.#clock.now();
    const traceId = traceIdOf(input.traceParent);
    let resolved;
    try {
      resolved = this.#admit(runId, input);
      // Recorded before it is tracked, so a run the history refuses leaves nothing behind.
      this.#options.store.startRun({
        runId,
        adapter: input.adapter,
        target: input.target,
        startedAtMs,
        ...(traceId ? { traceId } : {}),
      });
    } catch (err) {
      const e = toIopError(err);
      refusedRunSpan(runId, this.#options.nodeId, input, e);
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
    const span = startRunSpan(runId, this.#options.nodeId, input);
    // The adapter's own span (and its backend) become children of the run's.
    if (span) {
      spec.traceParent = span.traceparent;
      if (span.tracestate) spec.traceState = span.tracestate;
    }
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
      output: [],
      outputBytes: 0,
      outputTruncated: false,
      embeddings: 0,
      embeddingValues: 0,
      firstOutputAtMs: undefined,
      span,
      traceId,
    };
    const signal = running.controller.signal;
    this.#users.set(adapter, (this.#users.get(adapter) ?? 0) + 1);
    running.done = adapter.execute(spec, this.#sinkFor(run, outlet), { signal }).then(
      (result) => this.#completed(run, result),
      (err) => this.#ended(run, err),
    ).finally(() => {
      this.#running.delete(runId);
      this.#options.metrics?.runsInFlight(this.#running.size);
      this.#release(adapter);
    });
  }

  /** Ends one run's use of an adapter; a retired one closes when its last run ends. */
  #release(adapter: Adapter): void {
    const users = (this.#users.get(adapter) ?? 1) - 1;
    if (users > 0) {
      this.#users.set(adapter, users);
      return;
    }
    this.#users.delete(adapter);
    if (this.#retired.delete(adapter)) this.#closeAdapter(adapter);
  }

  #closeAdapter(adapter: Adapter): void {
    adapter.close?.().catch((err) =>
      this.#options.logger.warn("adapter close failed", { adapter: adapter.name, err })
    );
  }

  /**
   * Resolves the run's adapter, or throws why this Node refuses the run. The Edge caps providers
   * and CLI profiles, but the Node does not rely on it: beyond its own `policy.max_active_runs`
   * it refuses with OVERLOADED (and the CLI adapter caps each profile itself).
   */
  #admit(runId: string, input: RunInput): ReturnType<typeof resolve> {
    if (this.#running.has(runId)) {
      throw new IopError("INVALID_ARGUMENT", `Run '${runId}' is already running`);
    }
    if (this.#refusing !== undefined) {
      throw new IopError(
        "UNAVAILABLE",
        `Cannot start run '${runId}' as node '${this.#options.nodeId}' is ${this.#refusing}`,
      );
    }
    const cap = maxActiveRuns(this.#options.policy);
    if (this.#running.size >= cap) {
      throw new OverloadedError(
        `Cannot start run '${runId}' as this node is at its limit: ${this.#running.size} of ` +
          `policy.max_active_runs ${cap} runs executing`,
        1,
      );
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

  /**
   * The sink an adapter writes to: events while the run is not cancelled, the summary, and the
   * outlet's room (always room once cancelled, so the adapter gets to its end).
   */
  #sinkFor(run: RunState, outlet: RunOutlet): EventSink {
    const signal = run.running.controller.signal;
    return {
      ready: () => (signal.aborted ? undefined : outlet.ready()),
      output: (text: string) => {
        if (signal.aborted || text === "") return;
        this.#firstOutput(run);
        if (run.summary.length < SUMMARY_CHARS) {
          run.summary += text.slice(0, SUMMARY_CHARS - run.summary.length);
        }
        this.#keepOutput(run, text);
        run.send({ type: "output", text });
      },
      toolCall: (call: ToolCall) => {
        if (!signal.aborted) run.send({ type: "tool_call", call });
      },
      log: (stream: string, text: string) => {
        if (!signal.aborted) run.send({ type: "log", stream, text });
      },
      embedding: (index: number, values: number[]) => {
        if (signal.aborted) return;
        this.#firstOutput(run);
        run.send({ type: "embedding", index, values });
        if (run.embeddings++ === 0) run.embeddingValues = values.length;
      },
    };
  }

  /** Marks the run's first output (a delta or a vector): its time, and its span's event. */
  #firstOutput(run: RunState): void {
    if (run.firstOutputAtMs !== undefined) return;
    run.firstOutputAtMs = this.#clock.now();
    run.span?.event(FIRST_TOKEN_EVENT);
  }

  /** Adds a piece to the run's kept output, up to the cap; the rest is only marked as cut. */
  #keepOutput(run: RunState, text: string): void {
    if (run.outputTruncated) return;
    const cap = this.#options.outputCapBytes ?? DEFAULT_OUTPUT_CAP_BYTES;
    const bytes = utf8Length(text);
    if (run.outputBytes + bytes <= cap) {
      run.output.push(text);
      run.outputBytes += bytes;
      return;
    }
    run.output.push(cutToBytes(text, cap - run.outputBytes));
    run.outputBytes = cap;
    run.outputTruncated = true;
  }

  #completed(run: RunState, result: ExecutionResult): void {
    const finishedAtMs = this.#clock.now();
    if (result.usage) run.send({ type: "usage", usage: result.usage });
    if (run.span) endRunSpan(run.span, "completed", result.usage);
    run.send({
      type: "completed",
      finishReason: result.finishReason,
      exitCode: result.exitCode ?? 0,
      ...(result.usage ? { usage: result.usage } : {}),
    });
    this.#record(run, {
      status: "completed",
      finishedAtMs,
      outputSummary: summaryOf(run),
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
      if (run.span) endRunSpan(run.span, "cancelled");
      run.send({ type: "cancelled", reason });
      this.#record(run, {
        status: "cancelled",
        finishedAtMs,
        outputSummary: summaryOf(run),
        // Kept as the row's error, so the history says why (e.g. "node stopping: drain timeout").
        error: new IopError("CANCELLED", reason),
        ...extra,
      });
      return;
    }
    const error = toIopError(err, "BACKEND_ERROR");
    if (run.span) endRunSpan(run.span, "failed", undefined, error);
    run.send({
      type: "failed",
      code: error.code,
      message: error.message,
      retryable: error.retryable,
      exitCode: error.exitCode ?? 0,
    });
    this.#record(run, {
      status: "failed",
      finishedAtMs,
      outputSummary: summaryOf(run),
      error,
      ...extra,
      ...(error.exitCode !== undefined ? { exitCode: error.exitCode } : {}),
    });
  }

  #record(
    run: RunState,
    outcome: Parameters<RunStore["completeRun"]>[1],
  ): void {
    const { runId, startedAtMs } = run;
    this.#endedCounts[outcome.status]++;
    // An embedding run's vectors went to the Edge; its history keeps what they were.
    outcome.output = run.embeddings > 0 ? summaryOf(run) : run.output.join("");
    outcome.outputTruncated = run.outputTruncated;
    this.#options.metrics?.runFinished(
      outcome.status,
      Math.max(0, outcome.finishedAtMs - startedAtMs) / 1000,
    );
    try {
      this.#options.store.completeRun(runId, outcome);
    } catch (err) {
      this.#options.logger.error("cannot record run in history", {
        run_id: runId,
        trace_id: run.traceId,
        err,
      });
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
    const all = [...(this.#adapters?.list() ?? []), ...this.#retired];
    this.#retired.clear();
    await Promise.allSettled(all.map((a) => a.close?.()));
    this.#adapters = undefined;
  }

  /** Cancels every run (the node stops, or its drain ran out); resolves when all ended. */
  async cancelAll(reason: string): Promise<void> {
    const all = [...this.#running.values()];
    for (const [runId] of this.#running) this.cancelRun(runId, reason);
    await Promise.allSettled(all.map((r) => r.done));
  }

  /** The most recent runs in the history, newest first. */
  history(limit: number): RunRecord[] {
    return this.#options.store.history(Math.min(Math.max(limit, 1), 1000));
  }

  /** One run's whole stored output; undefined when the history has no such run. */
  runOutput(runId: string): StoredOutput | undefined {
    return this.#options.store.runOutput(runId);
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

/**
 * The history's summary of a run: the start of its output, or for an embedding run what it
 * answered ("3 embeddings × 768").
 */
function summaryOf(run: RunState): string {
  if (run.embeddings === 0) return run.summary;
  const noun = run.embeddings === 1 ? "embedding" : "embeddings";
  return `${run.embeddings} ${noun} × ${run.embeddingValues}`;
}

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;
