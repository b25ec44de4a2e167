/**
 * The Edge's ports: the surface-neutral service contract every surface calls (console, HTTP
 * APIs, A2A, Control Plane link), and the link the service uses to reach a connected Node.
 * Types only.
 * @module
 */
import type { RunEvent, RunInput, TerminalRunEvent, Usage } from "../../shared/run.ts";
import type { EdgeConfig } from "./config.ts";

/** A run to submit: an `adapter + target` input, optionally pinned to a node or a model group. */
export interface RunSubmission extends RunInput {
  /** Node id or alias to run on; any eligible node when absent. */
  node?: string;
  /**
   * Public model group whose provider pool serves the run; the pool chooses the node, adapter
   * and target, and the run may wait in the pool's queue.
   */
  modelGroup?: string;
}

/** Options of {@linkcode EdgeService.submitRun}. */
export interface SubmitOptions {
  /** Aborting removes a queued run or cancels a dispatched one. */
  signal?: AbortSignal;
}

/** A dispatched run. */
export interface RunHandle {
  readonly runId: string;
  /** Node the run was dispatched to. */
  readonly nodeId: string;
  readonly adapter: string;
  readonly target: string;
  /** Every event of the run in order, ending after the terminal one. One consumer only. */
  events(): AsyncIterable<RunEvent>;
  /**
   * Delivers every event to `listener` as it arrives, synchronously, instead of through
   * `events()` (events that arrived before are delivered at once). Use one or the other.
   */
  subscribe(listener: (event: RunEvent) => void): void;
  /** Settles with the terminal event (never rejects). */
  readonly done: Promise<TerminalRunEvent>;
  /** Asks the node to cancel; the run ends with a `cancelled` event. */
  cancel(reason?: string): void;
}

/** One row of a Node's run history, as the Node reported it. */
export interface RunRecordView {
  runId: string;
  adapter: string;
  target: string;
  status: string;
  startedAtMs: number;
  firstOutputAtMs: number;
  finishedAtMs: number;
  usage: Usage;
  errorCode: string;
  errorMessage: string;
  outputSummary: string;
  exitCode: number;
}

/** What one adapter on a Node reports about itself. */
export interface AdapterCapabilitiesView {
  name: string;
  kind: string;
  healthy: boolean;
  detail: string;
  targets: string[];
  streaming: boolean;
  tools: boolean;
  sessions: boolean;
}

/** A command the Edge sends to a Node over its link. */
export type NodeCommand = { type: "history"; limit: number } | { type: "capabilities" };

/** The answer to a {@linkcode NodeCommand}. */
export type NodeCommandResult =
  | { type: "history"; runs: RunRecordView[] }
  | { type: "capabilities"; adapters: AdapterCapabilitiesView[] };

/** What the service needs from the transport to reach one connected Node. */
export interface NodeLink {
  /** Sends a run; rejects when the link is down. */
  run(runId: string, input: RunInput): Promise<void>;
  cancel(runId: string, reason: string): void;
  command(command: NodeCommand, timeoutMs: number): Promise<NodeCommandResult>;
  /** Closes the link; the transport then reports the node disconnected. */
  close(reason: string): void;
}

/** A resource of a node in the status snapshot: a provider, or an adapter when no catalog exists. */
export interface ResourceStatus {
  kind: "provider" | "adapter";
  /** Provider id, or adapter name. */
  id: string;
  adapter: string;
  adapterKind: string;
  /** Model or profile; empty for adapter entries. */
  target: string;
  modelGroup: string;
  maxConcurrency: number;
  inFlight: number;
  queued: number;
  enabled: boolean;
  /** Why the connected node refused its adapter (e.g. its policy); "" when it did not. */
  refused: string;
}

/** One node in the status snapshot. */
export interface NodeStatus {
  id: string;
  alias: string;
  connected: boolean;
  draining: boolean;
  version: string;
  hostname: string;
  connectedAtMs: number;
  lastSeenMs: number;
  inFlight: number;
  resources: ResourceStatus[];
}

/** The Edge's view of its group, resource-first. */
export interface StatusSnapshot {
  edgeId: string;
  version: string;
  startedAtMs: number;
  runsInFlight: number;
  nodes: NodeStatus[];
}

/** News on the Edge's event bus. */
export type EdgeEvent =
  & { atMs: number }
  & (
    | { type: "node_registered"; nodeId: string; alias: string; version: string }
    | { type: "node_disconnected"; nodeId: string; reason: string }
    | { type: "node_refused"; remote: string; reason: string }
    | {
      type: "node_config_applied";
      nodeId: string;
      adapters: string[];
      rejected: Record<string, string>;
    }
    | { type: "adapter_health"; nodeId: string; adapter: string; healthy: boolean; detail: string }
    | { type: "run_started"; runId: string; nodeId: string; adapter: string; target: string }
    | {
      type: "run_finished";
      runId: string;
      nodeId: string;
      adapter: string;
      target: string;
      status: "completed" | "failed" | "cancelled";
      durationMs: number;
      errorCode: string;
    }
    | { type: "config_reloaded"; ok: boolean; detail: string }
  );

/**
 * What the public surfaces (OpenAI, Ollama, A2A, health) and the domain agents use of the
 * service layer; `EdgeService` implements it, unit tests fake it.
 */
export interface RunGateway {
  /** The configuration in force; read it at each request, since a reload swaps it. */
  readonly config: EdgeConfig;
  /** Dispatches a run (through its model group's pool, or to a node directly). */
  submitRun(submission: RunSubmission, options?: SubmitOptions): Promise<RunHandle>;
  /** Asks for a run's cancellation; false when it is unknown or finished. */
  cancelRun(runId: string, reason?: string): boolean;
  /** The resource-first status snapshot of the group. */
  status(): StatusSnapshot;
}

/** What the ops console uses of the service layer: runs and status, plus node commands and reload. */
export interface OpsGateway extends RunGateway {
  /** Sends a command (history, capabilities) to a connected node. */
  nodeCommand(node: string, command: NodeCommand): Promise<NodeCommandResult>;
  /** Re-reads the config file; keeps the config in force when the new one is invalid. */
  reload(): Promise<{ ok: boolean; detail: string }>;
}
