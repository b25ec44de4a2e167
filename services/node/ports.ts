/**
 * The Node's ports: the types its core depends on and its outer rings implement. Types only.
 *
 * Adapters implement {@linkcode Adapter}; `store/` implements {@linkcode RunStore}; `transport/`
 * converts between wire messages and these types and drives a {@linkcode TransportHandler}.
 * @module
 */
import type { KindSettings } from "../../shared/adapter_kinds/catalog.ts";
import type { IopError } from "../../shared/errors.ts";

export type { ChatMessage, Sampling, ToolCall, ToolDefinition, Usage } from "../../shared/run.ts";
import type { RunInput, ToolCall, Usage } from "../../shared/run.ts";

/** What an adapter executes: a run's input plus its id, resolved by the router. */
export interface ExecutionSpec extends RunInput {
  runId: string;
}

/** Receives an adapter's events while a run executes; calls never throw. */
export interface EventSink {
  /** A piece of the answer: model text or CLI stdout. */
  output(text: string): void;
  /** A piece of a tool call. */
  toolCall(call: ToolCall): void;
  /** Diagnostic output that is not part of the answer (e.g. CLI stderr). */
  log(stream: string, text: string): void;
  /** The vector of input `index` of an embedding run (`spec.embed`), sent in input order. */
  embedding(index: number, values: number[]): void;
  /**
   * Whether the run's consumer has room for more: undefined while the run may go on; a promise
   * that resolves when its consumer made room (the run's flow-control window is full). An
   * adapter checks it between backend reads and awaits the promise before it reads on, so a
   * stalled consumer stops the backend (its socket or the CLI's pipes fill up); events it
   * emits meanwhile are still taken. Cheap: allocates nothing while there is room. The promise
   * does not follow the run's signal, so await it raced with the signal, as `adapters/room.ts`
   * does: `const room = roomIn(sink, signal); if (room) await room;`.
   */
  ready(): Promise<void> | undefined;
}

/** How a successful execution ended. */
export interface ExecutionResult {
  finishReason: "stop" | "length" | "tool_calls";
  usage?: Usage;
  /** Exit code of a CLI process; absent for other adapters. */
  exitCode?: number;
}

/** Options of {@linkcode Adapter.execute}. */
export interface ExecuteOptions {
  /** Aborted on cancel; the adapter must stop its backend work (close the request, kill the process). */
  signal: AbortSignal;
}

/** What an adapter can do now, flat and documented. */
export interface Capabilities {
  /** Targets runnable now: model names, CLI profile names. */
  targets: string[];
  /** Emits output in pieces as it is produced. */
  streaming: boolean;
  /** Accepts tool definitions and emits tool calls. */
  tools: boolean;
  /** Continues sessions across runs (`sessionId`). */
  sessions: boolean;
  /** The backend answered its health check. */
  healthy: boolean;
  /** Why it is unhealthy, or a short description. */
  detail: string;
}

/**
 * An execution backend. `execute` resolves when the run completed, and rejects with an
 * {@linkcode IopError} when it failed; when `signal` is aborted it stops the backend work and
 * rejects with the signal's reason.
 */
export interface Adapter {
  readonly name: string;
  readonly kind: string;
  capabilities(options: { signal: AbortSignal }): Promise<Capabilities>;
  execute(spec: ExecutionSpec, sink: EventSink, options: ExecuteOptions): Promise<ExecutionResult>;
  /** Releases long-lived resources (connections, processes); optional. */
  close?(): Promise<void>;
  /**
   * Checks that the backend answers now (see `adapters/health.ts`); optional, an adapter without
   * it counts as healthy. Never throws for an unhealthy backend: it reports it; rejects only
   * when `signal` is aborted.
   */
  probe?(options: { signal: AbortSignal }): Promise<ProbeResult>;
}

/** What an adapter's health probe found. */
export interface ProbeResult {
  healthy: boolean;
  /** Why it is unhealthy, or what answered (e.g. "ollama 0.12.6 at http://..."). */
  detail: string;
  /** Health per target where it differs by target (CLI profiles), by target name. */
  targets?: Record<string, { healthy: boolean; detail: string }>;
}

export type { MockSettings } from "../../shared/adapter_kinds/mock.ts";
export type { CliProfile, CliSettings } from "../../shared/adapter_kinds/cli.ts";
export type { HttpModelSettings } from "../../shared/adapter_kinds/http_model.ts";

/** One adapter instance as pushed by the Edge: its kind's settings (`shared/adapter_kinds/`). */
export type AdapterConfig = { name: string; enabled: boolean } & KindSettings;

/** Status of a recorded run. */
export type RunStatus = "running" | "completed" | "failed" | "cancelled" | "interrupted";

/** One row of the Node's run history. */
export interface RunRecord {
  runId: string;
  adapter: string;
  target: string;
  status: RunStatus;
  startedAtMs: number;
  firstOutputAtMs?: number;
  finishedAtMs?: number;
  usage?: Usage;
  error?: { code: string; message: string; retryable: boolean };
  /** The first part of the run's output. */
  outputSummary: string;
  exitCode?: number;
  /** The run's W3C trace id (32 hex digits); absent for a run recorded without one. */
  traceId?: string;
}

/** How a run ended, recorded by {@linkcode RunStore.completeRun}. */
export interface RunOutcome {
  status: Exclude<RunStatus, "running">;
  finishedAtMs: number;
  firstOutputAtMs?: number;
  usage?: Usage;
  error?: IopError;
  outputSummary: string;
  /** The run's whole output as far as the core kept it; absent = the summary is all there is. */
  output?: string;
  /** The run printed more than `output` holds (the core stopped keeping it at its cap). */
  outputTruncated?: boolean;
  exitCode?: number;
}

/** One run's stored output, read by {@linkcode RunStore.runOutput}. */
export interface StoredOutput {
  /** As recorded; when truncated, it ends with a line saying at how many bytes. */
  output: string;
  /** The run printed more than the store's cap. */
  truncated: boolean;
}

/** What {@linkcode RunStore.startRun} records of a run that starts. */
export interface RunStart {
  runId: string;
  adapter: string;
  target: string;
  startedAtMs: number;
  traceId?: string;
}

/** The Node's durable run history. */
export interface RunStore {
  /** Records a run as running; `traceId` is its W3C trace id, absent when it has none. */
  startRun(run: RunStart): void;
  completeRun(runId: string, outcome: RunOutcome): void;
  /** The most recent runs, newest first. */
  history(limit: number): RunRecord[];
  /** One run's whole stored output; undefined when the history has no such run. */
  runOutput(runId: string): StoredOutput | undefined;
  /** Marks runs left `running` by a previous process as `interrupted`; returns how many. */
  markInterrupted(finishedAtMs: number): number;
  close(): void;
}

/** Run counters the core reports to; absent means not counted. */
export interface RunMetrics {
  runFinished(status: Exclude<RunStatus, "running">, seconds: number): void;
  runsInFlight(count: number): void;
}

/** Source of wall-clock time, injected so tests can control it. */
export interface Clock {
  now(): number;
}
