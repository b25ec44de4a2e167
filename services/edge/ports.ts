/**
 * The Edge's ports: the surface-neutral service contract every surface calls (console, HTTP
 * APIs, A2A, Control Plane link), and the link the service uses to reach a connected Node.
 * Types only.
 * @module
 */
import type { RunEvent, RunInput, TerminalRunEvent, Usage } from "../../shared/run.ts";
import type { EdgeConfig, NodeRecord } from "./config.ts";
import type { TenantLimiter } from "./tenants/limiter.ts";
import type { QueueShare } from "./tenants/tenant.ts";

/** A run to submit: an `adapter + target` input, optionally pinned to a node or a model group. */
export interface RunSubmission extends RunInput {
  /** Node id or alias to run on; any eligible node when absent. */
  node?: string;
  /**
   * Public model group whose provider pool serves the run; the pool chooses the node, adapter
   * and target, and the run may wait in the pool's queue.
   */
  modelGroup?: string;
  /**
   * What to do when the node holding the run's CLI session is not connected: `fail` (the
   * default) with UNAVAILABLE naming the node, or `start_new` the session on another node.
   */
  onSessionLost?: "fail" | "start_new";
}

/** Options of {@linkcode EdgeService.submitRun}. */
export interface SubmitOptions {
  /** Aborting removes a queued run or cancels a dispatched one. */
  signal?: AbortSignal;
  /**
   * Node id a pool should choose when one of its providers there has a free slot (session
   * affinity of a model run); otherwise the pool routes as usual.
   */
  preferNode?: string;
  /**
   * The tenant the run is for, and its share of a saturated pool: a pool admits waiting runs
   * round-robin across tenants by weight and priority class. Absent: the Edge's own runs
   * (console, domain agents), which queue as one more tenant.
   */
  tenant?: QueueShare;
  /**
   * Called once if the run waits in its pool's queue, with a function that tells its current
   * 1-based place there (0 once it left the queue), for feedback while it waits.
   */
  onQueued?: (position: () => number) => void;
  /** The model group whose provider pool dispatches the run, set by the pools (for its trace). */
  pool?: string;
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
  /**
   * Flow control: tells the run whether its consumer is keeping up. Events handed to the
   * consumer count as read (and are acked to the node, which then produces more) unless the
   * consumer said it is paused, e.g. an HTTP stream whose buffer is full or a socket whose send
   * buffer is: call `setReaderPaused(true)` then, and `setReaderPaused(false)` once it drains
   * (the events handed meanwhile count as read from then). A run paused for longer than
   * `runs.stall_timeout_ms` is cancelled ("client read nothing for N ms ..."). Calls that do
   * not change the state are cheap no-ops; a finished run ignores them.
   */
  setReaderPaused(paused: boolean): void;
  /**
   * True once the Edge cancelled the run as its consumer stayed paused for
   * `runs.stall_timeout_ms`: a surface frees what it buffers for that reader instead of
   * writing the end of the answer behind it.
   */
  readonly stalled: boolean;
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
  /** The run's W3C trace id; absent when the Node recorded none (or predates trace ids). */
  traceId?: string;
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
export type NodeCommand =
  | { type: "history"; limit: number }
  | { type: "capabilities" }
  | { type: "run_output"; runId: string };

/**
 * One run's whole output as its Node stored it: `found` false when the Node's history has no such
 * run; `truncated` when the run printed more than the Node keeps (the output then ends with a line
 * saying at how many bytes).
 */
export interface RunOutputView {
  runId: string;
  found: boolean;
  output: string;
  truncated: boolean;
}

/** The answer to a {@linkcode NodeCommand}. */
export type NodeCommandResult =
  | { type: "history"; runs: RunRecordView[] }
  | { type: "capabilities"; adapters: AdapterCapabilitiesView[] }
  | ({ type: "run_output" } & RunOutputView);

/** What the service needs from the transport to reach one connected Node. */
export interface NodeLink {
  /** Sends a run; rejects when the link is down. */
  run(runId: string, input: RunInput): Promise<void>;
  cancel(runId: string, reason: string): void;
  /**
   * Acknowledges run `runId`'s events up to `seq` (node.proto, "Flow control"): the node may
   * send that much more and forget what it kept of them for a resume. The transport sends the
   * acks of one turn in one frame; a `final` one (of a terminal event: nothing waits for it)
   * waits for the link's next frame, a heartbeat at the latest. Acks are dropped while the link
   * is down.
   */
  ack(runId: string, seq: number, final: boolean): void;
  command(command: NodeCommand, timeoutMs: number): Promise<NodeCommandResult>;
  /** Closes the link; the transport then reports the node disconnected. */
  close(reason: string): void;
  /**
   * Pushes a new configuration, built from `record`, as `version`; the node acknowledges it in
   * its config_applied report. Absent: the link cannot reconfigure, and a changed record closes
   * it instead (the node re-registers with the new one). Rejects when the link is down.
   */
  configure?(record: NodeRecord, version: number): Promise<void>;
}

/**
 * A resource of a node in the status snapshot: a provider, a CLI profile, or an adapter that no
 * provider stands for.
 */
export interface ResourceStatus {
  kind: "provider" | "profile" | "adapter";
  /** Provider id, `<adapter>/<profile>`, or adapter name. */
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
  /**
   * False when the connected node reported this resource's adapter (or CLI profile) unhealthy;
   * true while it did not (and while the node is offline: `connected` tells that). The status
   * snapshot always sets it; absent counts as healthy.
   */
  healthy?: boolean;
  /** What the node's last health probe said ("" when none reported), e.g. why it is unhealthy. */
  healthDetail?: string;
}

/** One node in the status snapshot. */
export interface NodeStatus {
  id: string;
  alias: string;
  connected: boolean;
  draining: boolean;
  /** Set (true) while the node drains because it is stopping; an operator cannot undrain it. */
  stopping?: boolean;
  version: string;
  hostname: string;
  connectedAtMs: number;
  lastSeenMs: number;
  inFlight: number;
  /**
   * Runs of the node that wait for it to register again after its link dropped
   * (`runs.resume_grace_ms`); not in `inFlight`. Absent when none.
   */
  detachedRuns?: number;
  /** Config version the node acknowledged applying; 0 while offline or not yet acknowledged. */
  configVersion: number;
  /** Config version the Edge sent the node last; 0 while offline. */
  wantedConfigVersion: number;
  /** The enrollment rule the node joined by; absent for a node listed under `nodes`. */
  enrolledBy?: string;
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
    | { type: "node_drain_changed"; nodeId: string; draining: boolean }
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
  /** True when runs on `adapter` keep a session on their node (it is a `cli` adapter). */
  keepsSessions(adapter: string): boolean;
  /**
   * Each tenant's limits: a surface admits a client's request here (429 when over a limit)
   * before it submits the request's run, and the run holds the lease until it ends.
   */
  readonly tenants: TenantLimiter;
}

/** What the ops console uses of the service layer: runs and status, plus node commands and reload. */
export interface OpsGateway extends RunGateway {
  /** Sends a command (history, capabilities) to a connected node. */
  nodeCommand(node: string, command: NodeCommand): Promise<NodeCommandResult>;
  /** Re-reads the config file; keeps the config in force when the new one is invalid. */
  reload(): Promise<{ ok: boolean; detail: string }>;
  /**
   * Marks a node as draining (no new runs) or not; false when it is not connected. Throws
   * INVALID_ARGUMENT for undraining a node that is stopping.
   */
  drainNode(node: string, draining: boolean): boolean;
}

/** One stored Responses API response (`store: true`, the default). */
export interface StoredResponse {
  /** The response id (`resp_…`). */
  id: string;
  /** The tenant that created it; only it can read, delete or continue it. */
  owner: string;
  model: string;
  /** When it was created, in ms since the epoch (retention counts from here). */
  createdAtMs: number;
  /** `completed`, `incomplete`, `failed` or `cancelled`. */
  status: string;
  previousResponseId: string | null;
  /** Its input items as given, normalised (each with an id), in order; instructions are not items. */
  input: Record<string, unknown>[];
  /** The `response` object as it was answered (its `output` items, `usage`, ...). */
  response: Record<string, unknown>;
}

/**
 * Where the Responses API keeps responses (`store/response_store.ts` is the SQLite one); every
 * read is scoped by owner, so another tenant's id is absent.
 */
export interface ResponseStore {
  /**
   * Stores `response` (its id must be new) and drops what the bounds no longer keep; returns
   * false, storing nothing, when it is larger than the store takes for one response.
   */
  put(response: StoredResponse): boolean;
  /** The response `id` of `owner`; undefined when absent, expired or another tenant's. */
  get(id: string, owner: string): StoredResponse | undefined;
  /** Deletes the response `id` of `owner`; false when there was none to delete. */
  delete(id: string, owner: string): boolean;
  /** How many responses the store holds (expired ones not yet purged included). */
  count(): number;
  close(): void;
}
