/**
 * The Edge's surface-neutral service layer. Every surface (ops console, HTTP APIs, A2A, the
 * Control Plane link) submits and cancels runs, sends node commands, reads status and listens
 * to events through this class; the node transport feeds it connections and run events.
 * @module
 */
import { IopError } from "../../shared/errors.ts";
import type { Logger } from "../../shared/log.ts";
import { isTerminal, type RunEvent } from "../../shared/run.ts";
import { secretFingerprint } from "../../shared/secrets.ts";
import { traceIdOf } from "../../shared/trace_context.ts";
import { ActiveRun } from "./active_run.ts";
import type { EdgeConfig, NodeRecord } from "./config.ts";
import type { EdgeMetrics } from "./edge_metrics.ts";
import { EventBus } from "./event_bus.ts";
import type { Seat } from "./nodes/admission.ts";
import { Enrollment } from "./nodes/enrollment.ts";
import { NodeStore } from "./nodes/node_store.ts";
import { NodeRegistry, type NodeSession } from "./nodes/registry.ts";
import type { PoolMetrics } from "./pools/pool_metrics.ts";
import { ProviderPools } from "./pools/provider_pools.ts";
import type {
  EdgeEvent,
  NodeCommand,
  NodeCommandResult,
  NodeLink,
  OpsGateway,
  RunHandle,
  RunSubmission,
  StatusSnapshot,
  SubmitOptions,
} from "./ports.ts";
import { pickNode } from "./routing.ts";
import { endDispatch, joinRequestTrace, startDispatch } from "./run_trace.ts";
import {
  type HolderState,
  planSession,
  SessionAffinity,
  type SessionAffinityOptions,
} from "./sessions.ts";
import { buildStatusSnapshot } from "./status.ts";
import { TenantLimiter } from "./tenants/limiter.ts";
import type { TenantMetrics } from "./tenants/tenant_metrics.ts";

/** How long a cancelled run may take to confirm before the Edge ends it itself. */
const CANCEL_GRACE_MS = 5_000;
const COMMAND_TIMEOUT_MS = 10_000;
/**
 * Run ids a connection remembers having told to cancel as the Edge no longer knows them (one
 * CancelRequest per run, not per event); past this the oldest is forgotten.
 */
const MAX_CANCELLED_UNKNOWN = 1024;

/** Options of {@linkcode EdgeService}. */
export interface EdgeServiceOptions {
  config: EdgeConfig;
  logger: Logger;
  version: string;
  metrics?: EdgeMetrics;
  /** Defaults to Date.now. */
  now?: () => number;
  /** Reads the config file anew for `reload`; absent means reload is unsupported. */
  loadConfig?: () => Promise<EdgeConfig>;
  /** Provider pool metrics; absent = not recorded. */
  poolMetrics?: PoolMetrics;
  /** Bounds of the session → node map; absent = its defaults (`sessions.ts`). */
  sessionAffinity?: SessionAffinityOptions;
  /** Per-tenant metrics; absent = not recorded. */
  tenantMetrics?: TenantMetrics;
}

/** A node that registered: what the transport hands the service. */
export interface NodeConnection {
  record: NodeRecord;
  link: NodeLink;
  /** Its admission's hold on its id (`nodes/admission.ts`); absent: it holds none. */
  seat?: Seat;
  version: string;
  hostname: string;
  /**
   * The config version the registration answer carried ({@linkcode EdgeService.configVersion}
   * when it was sent); absent means the version in force.
   */
  configVersion?: number;
  /** The flow-control window the registration answer carried; absent: 0 (none). */
  runWindowBytes?: number;
  /**
   * Runs the registration answer told the node to resume (from
   * {@linkcode EdgeService.resumableRuns}); they are bound to this connection.
   */
  resumed?: readonly string[];
}

/** A run the node listed as held when it registered again: its id and the last seq it sent. */
export interface HeldRun {
  runId: string;
  lastSeq: number;
}

/** A held run the Edge still waits for, with the last seq it received of it. */
export interface ResumedRun {
  runId: string;
  receivedSeq: number;
}

/** A run whose node link dropped, waiting for the node to register again. */
interface Detached {
  /** Fails the run once `runs.resume_grace_ms` passed. */
  timer: ReturnType<typeof setTimeout>;
  /** Why the link dropped. */
  reason: string;
}

/** What a config swap did to the connected nodes. */
export interface ConfigSwap {
  /** The new config version. */
  version: number;
  /** Connected nodes sent their changed configuration. */
  reconfigured: number;
  /** Connected nodes disconnected: removed from the config, or their token changed. */
  dropped: number;
}

/** The Edge service layer. */
export class EdgeService implements OpsGateway {
  /** The snapshot in force: the file's config with the enrolled nodes appended. */
  #config: EdgeConfig;
  /** The config as loaded from the file, without enrolled nodes. */
  #fileConfig: EdgeConfig;
  #store: NodeStore;
  /** Counts config swaps; a node is sent the version its configuration was built at. */
  #configVersion = 1;
  readonly #registry = new NodeRegistry();
  readonly #runs = new Map<string, ActiveRun>();
  /** Runs of nodes whose link dropped, by run id; still in `#runs`, counted on no session. */
  readonly #detached = new Map<string, Detached>();
  /** False once the node listener closed: no node can come back, so no run waits for one. */
  #awaitsNodes = true;
  /** Connections the Edge closed for good (node removed, token changed): no run waits for them. */
  readonly #dropped = new WeakSet<NodeSession>();
  /** Per connection, the runs unknown to the Edge it was told to cancel (until they end). */
  readonly #cancelledUnknown = new WeakMap<NodeSession, Set<string>>();
  readonly #bus: EventBus;
  readonly #logger: Logger;
  readonly #metrics: EdgeMetrics | undefined;
  readonly #now: () => number;
  readonly #version: string;
  readonly #startedAtMs: number;
  readonly #loadConfig: (() => Promise<EdgeConfig>) | undefined;
  /** Provider pools of the model groups; pool routes queue here, nothing else does. */
  readonly pools: ProviderPools;
  /** Which node holds each session; consulted by {@linkcode submitRun} (see `sessions.ts`). */
  readonly sessionAffinity: SessionAffinity;
  /** Each tenant's rate and concurrency limits; surfaces admit a request here first. */
  readonly tenants: TenantLimiter;
  /** Nodes that joined by an enrollment rule; the node transport admits them here. */
  readonly enrollment: Enrollment;

  constructor(options: EdgeServiceOptions) {
    this.#config = this.#fileConfig = options.config;
    this.#store = new NodeStore(options.config.nodes);
    this.#logger = options.logger;
    this.#metrics = options.metrics;
    this.#now = options.now ?? Date.now;
    this.#version = options.version;
    this.#bus = new EventBus(options.logger);
    this.#startedAtMs = this.#now();
    this.#loadConfig = options.loadConfig;
    this.enrollment = new Enrollment(options.config, {
      logger: options.logger,
      now: this.#now,
      ...(options.metrics ? { metrics: options.metrics } : {}),
      // A node enrolled or a record went: the snapshot in force gains or loses that record.
      onChange: () => this.#swapSnapshot(),
    });
    this.sessionAffinity = new SessionAffinity({ now: this.#now, ...options.sessionAffinity });
    this.tenants = new TenantLimiter({
      now: this.#now,
      ...(options.tenantMetrics ? { metrics: options.tenantMetrics } : {}),
    });
    this.pools = new ProviderPools({
      config: () => this.#config,
      sessions: () => this.#registry.list(),
      dispatch: (session, submission, opts) => this.dispatch(session, submission, opts),
      logger: options.logger,
      now: this.#now,
      ...(options.poolMetrics ? { metrics: options.poolMetrics } : {}),
    });
  }

  /** The configuration snapshot in force (the file's, with the enrolled nodes among its nodes). */
  get config(): EdgeConfig {
    return this.#config;
  }

  /** Version of the configuration in force: 1 at start, one more at every swap. */
  get configVersion(): number {
    return this.#configVersion;
  }

  /** The node records of the configuration in force. */
  get nodeStore(): NodeStore {
    return this.#store;
  }

  /** Subscribes to the event bus; returns the unsubscribe function. */
  subscribe(listener: (event: EdgeEvent) => void): () => void {
    return this.#bus.subscribe(listener);
  }

  /** Publishes an event on the bus (used by the transport and other Edge parts). */
  publish(event: EdgeEvent): void {
    this.#bus.publish(event);
  }

  // --- transport side -------------------------------------------------------------------------

  /** Records a registered node; a previous connection of the same node is closed. */
  nodeConnected(conn: NodeConnection): NodeSession {
    const now = this.#now();
    const configVersion = conn.configVersion ?? this.#configVersion;
    const session: NodeSession = {
      id: conn.record.id,
      alias: conn.record.alias,
      record: conn.record,
      link: conn.link,
      version: conn.version,
      hostname: conn.hostname,
      connectedAtMs: now,
      lastSeenMs: now,
      inFlight: 0,
      draining: false,
      adapters: [],
      wantedConfigVersion: configVersion,
      configVersion: 0,
      runWindowBytes: conn.runWindowBytes ?? 0,
      ...(conn.seat ? { seat: conn.seat } : {}),
    };
    const replaced = this.#registry.add(session);
    conn.seat?.connected();
    if (replaced) {
      // The node is back already: its runs wait no longer than the re-attachment below.
      this.#linkLost(replaced, "node reconnected on a new connection", "back");
      replaced.link.close("replaced by a new connection of the same node");
    }
    this.#reattach(session, new Set(conn.resumed));
    // A reload between the registration answer and now: bring the node up to date.
    if (configVersion !== this.#configVersion) this.#reconcile(session);
    this.#metrics?.nodesConnected.set(this.#registry.size);
    this.#bus.publish({
      type: "node_registered",
      atMs: now,
      nodeId: session.id,
      alias: session.alias,
      version: session.version,
    });
    return session;
  }

  /**
   * Forgets a node whose connection ended. Its runs worth waiting for (they sent output, or they
   * are not pool runs: a direct or CLI run may have had effects before any output) wait up to
   * `runs.resume_grace_ms` for the node to register again and resume them; the others fail with
   * NODE_LOST at once (a pool retries those elsewhere).
   *
   * All runs fail at once when the node was stopping, or when it ended the link itself while it
   * was still talking: the peer closed or reset the link (`peerClosed`) less than two heartbeat
   * intervals after the Edge last read a frame from it, as when the node's process ends (killed,
   * crashed: its runs went with it). Taken for a blip instead: a link the Edge gave up on
   * (missed heartbeats) or that failed otherwise, and one the peer closed or reset after two
   * heartbeat intervals or more in which nothing arrived from it (a node that gave up on a link
   * cut both ways, a middlebox resetting a link gone quiet). A close that follows frames read
   * just before it still counts as the node's exit; a node that gave up on the link (its frames
   * kept coming while the Edge's did not reach it, a cut one way only, or one side read late)
   * says so first (EdgeNodeEvent.link_abandoned), and the Edge closes the link itself.
   */
  nodeDisconnected(
    session: NodeSession,
    reason: string,
    options: { peerClosed?: boolean } = {},
  ): void {
    if (!this.#registry.remove(session)) return;
    session.seat?.release(session.stopping === true);
    const talking = this.#now() - session.lastSeenMs < 2 * this.#config.wire.heartbeatIntervalMs;
    this.#linkLost(session, reason, options.peerClosed && talking ? "ended" : "lost");
    this.#metrics?.nodesConnected.set(this.#registry.size);
    this.#bus.publish({ type: "node_disconnected", atMs: this.#now(), nodeId: session.id, reason });
  }

  /**
   * The runs among `held` (those node `nodeId` kept through a lost link, as its registration
   * lists them) that the Edge still waits for, with the last seq it received of each: the
   * registration answer's `resumed_runs`. Pass their ids to {@linkcode nodeConnected} as
   * `resumed`; the node cancels the held runs not listed.
   */
  resumableRuns(nodeId: string, held: readonly HeldRun[]): ResumedRun[] {
    if (!this.#awaitsNodes || this.#config.runs.resumeGraceMs === 0) return [];
    // A stopping connection still registered fails its runs as the new one replaces it.
    if (this.#registry.get(nodeId)?.stopping) return [];
    const resumed: ResumedRun[] = [];
    for (const { runId } of held) {
      const run = this.#runs.get(runId);
      if (run && run.nodeId === nodeId && !run.finished) {
        resumed.push({ runId, receivedSeq: run.lastSeq });
      }
    }
    return resumed;
  }

  /**
   * Relays one run event from a node. Events read on a connection no longer registered (a
   * newer one of the node replaced it, and the old link still yields frames it had decoded) are
   * dropped: they would settle against the old connection, and the node's resume sends them
   * again on the new one.
   */
  runEvent(session: NodeSession, event: RunEvent): void {
    if (this.#registry.get(session.id) !== session) return;
    const run = this.#runs.get(event.runId);
    if (!run || run.nodeId !== session.id) {
      this.#logger.debug("run event for unknown run dropped", {
        node_id: session.id,
        run_id: event.runId,
      });
      if (!run) this.#unknownRunEvent(session, event);
      return;
    }
    if (run.offer(event) === "terminal") this.#settle(run, session);
  }

  /**
   * An event of a run the Edge already ended (its cancel unanswered in time, or given up on):
   * the node is told once to end it while it goes on, and may forget it once it ended (acked
   * only on a link with a window: without one the node retains nothing).
   */
  #unknownRunEvent(session: NodeSession, event: RunEvent): void {
    if (!isTerminal(event)) {
      this.#cancelUnknown(session, event.runId);
      return;
    }
    this.#cancelledUnknown.get(session)?.delete(event.runId);
    if ((session.runWindowBytes ?? 0) > 0) session.link.ack(event.runId, event.seq, true);
  }

  /** Tells the node to cancel a run the Edge no longer waits for, once per run and connection. */
  #cancelUnknown(session: NodeSession, runId: string): void {
    let cancelled = this.#cancelledUnknown.get(session);
    if (!cancelled) this.#cancelledUnknown.set(session, cancelled = new Set());
    if (cancelled.has(runId)) return;
    if (cancelled.size >= MAX_CANCELLED_UNKNOWN) {
      cancelled.delete(cancelled.values().next().value!);
    }
    cancelled.add(runId);
    session.link.cancel(runId, noLongerWaits(runId));
  }

  // --- surfaces -------------------------------------------------------------------------------

  /**
   * Dispatches a run to an eligible node, or through the provider pool of its model group
   * (which may queue it or reject it with OVERLOADED). Rejects with NOT_FOUND when no node
   * offers the adapter and target, UNAVAILABLE when none that does is connected. A CLI run
   * gets a session id when it has none; a CLI follow-up goes to the node holding its session
   * or fails with UNAVAILABLE naming it; a model run prefers its session's node (`sessions.ts`).
   * A CLI run is refused with OVERLOADED when its profile is at `max_concurrency` on every
   * node that could take it (for a follow-up: on the session's node).
   */
  submitRun(submission: RunSubmission, options: SubmitOptions = {}): Promise<RunHandle> {
    submission = joinRequestTrace(submission);
    const plan = planSession(this.sessionAffinity, submission, {
      stateful: !submission.modelGroup &&
        this.#store.isCliAdapter(submission.adapter, submission.node),
      holderState: (id) => this.#holderState(id),
      nodeIdOf: (name) => this.#store.byName(name)?.id,
    });
    const routed = plan.submission;
    if (routed.modelGroup) {
      const pooled = plan.prefer ? { ...options, preferNode: plan.prefer } : options;
      return this.#holding(routed, this.pools.submit(routed.modelGroup, routed, pooled));
    }
    const session = pickNode(
      this.#registry.list(),
      this.#store,
      plan.pin ? { ...routed, node: plan.pin } : routed,
      {
        ...(plan.prefer ? { preferNode: plan.prefer } : {}),
        // A CLI profile takes a node only below its max_concurrency there, else OVERLOADED.
        usage: (node, adapter, target) => this.pools.usage(node, adapter, target),
        ...(plan.pin && routed.sessionId !== "" ? { heldSession: routed.sessionId } : {}),
      },
    );
    // Never queued; counted on its resource (and a provider's slot on the same adapter+target)
    // at once, so the next submission already sees this run in the profile's slots.
    return this.#holding(routed, this.pools.dispatchDirect(session, routed, options));
  }

  keepsSessions(adapter: string): boolean {
    return this.#store.isCliAdapter(adapter);
  }

  #holderState(nodeId: string): HolderState {
    const session = this.#registry.get(nodeId);
    if (!session) return "gone";
    return session.draining ? "draining" : "connected";
  }

  /** Remembers the node a dispatched run with a session went to. */
  #holding(submission: RunSubmission, dispatched: Promise<RunHandle>): Promise<RunHandle> {
    const sessionId = submission.sessionId;
    if (sessionId === "") return dispatched;
    return dispatched.then((handle) => {
      this.sessionAffinity.remember(sessionId, handle.nodeId);
      return handle;
    });
  }

  /**
   * Sends a run to a chosen node and tracks it; exposed for routing layers (provider pools).
   * Rejects when the node's link cannot take the run — except for a pool run (`options.pool`)
   * the link merely could not send (it was closing): that one resolves, already failed as a
   * retryable UNAVAILABLE, so its pool replaces it as any run that never ran.
   */
  async dispatch(
    session: NodeSession,
    submission: RunSubmission,
    options: SubmitOptions = {},
  ): Promise<ActiveRun> {
    options.signal?.throwIfAborted();
    const runId = `run_${crypto.randomUUID().replaceAll("-", "")}`;
    const nodeId = session.id;
    const run = new ActiveRun(
      {
        runId,
        nodeId,
        adapter: submission.adapter,
        target: submission.target,
        startedAtMs: this.#now(),
        pooled: options.pool !== undefined,
      },
      (reason) => this.cancelRun(runId, reason),
      {
        stallTimeoutMs: this.#config.runs.stallTimeoutMs,
        // To the node's connection of the moment; none while the run is detached.
        ack: (seq, final) => {
          if (!this.#detached.has(runId)) this.#registry.get(nodeId)?.link.ack(runId, seq, final);
        },
      },
    );
    run.attached(session.runWindowBytes ?? 0);
    this.#runs.set(runId, run);
    session.inFlight++;
    this.#metrics?.runsStarted.inc();
    this.#metrics?.runsInFlight.set(this.#runs.size);
    const { node: _node, modelGroup: _group, onSessionLost: _lost, ...input } = submission;
    const trace = startDispatch(runId, session.id, submission, options);
    if (trace.span) {
      const span = trace.span;
      void run.done.then((terminal) => endDispatch(span, terminal));
    }
    this.#logger.debug("dispatching run", {
      run_id: runId,
      node_id: session.id,
      trace_id: traceIdOf(trace.context.traceParent),
    });
    try {
      await session.link.run(runId, { ...input, ...trace.context });
    } catch (err) {
      // A run no node can take (larger than the wire carries) fails as it is: not retryable.
      const refused = err instanceof IopError && !err.retryable ? err : undefined;
      run.finish({
        type: "failed",
        code: refused?.code ?? "UNAVAILABLE",
        message: refused?.message ??
          `Cannot send run to node '${session.id}': ${(err as Error).message}`,
        retryable: refused === undefined,
      }, this.#now());
      this.#settle(run, session);
      if (refused === undefined && options.pool !== undefined) return run;
      throw refused ??
        new IopError("UNAVAILABLE", `Cannot send run to node '${session.id}'`, { cause: err });
    }
    this.#bus.publish({
      type: "run_started",
      atMs: this.#now(),
      runId,
      nodeId: session.id,
      adapter: run.adapter,
      target: run.target,
    });
    if (options.signal) {
      const signal = options.signal;
      // An abort that says why (a command deadline) gives the node that reason.
      const onAbort = () =>
        this.cancelRun(
          runId,
          signal.reason instanceof IopError ? signal.reason.message : "client went away",
        );
      // The client may have gone while the run was being sent: no abort event is left to come.
      if (signal.aborted) onAbort();
      else {
        signal.addEventListener("abort", onAbort, { once: true });
        void run.done.then(() => signal.removeEventListener("abort", onAbort));
      }
    }
    return run;
  }

  /**
   * Asks the run's node to cancel it; returns false for an unknown or finished run. A run waiting
   * for its node to come back ends at once (the node, back, is not told to resume it).
   */
  cancelRun(runId: string, reason = "cancelled"): boolean {
    const run = this.#runs.get(runId);
    if (!run || run.finished) return false;
    if (this.#detached.has(runId)) {
      run.finish({ type: "cancelled", reason }, this.#now());
      this.#settle(run, undefined);
      return true;
    }
    const session = this.#registry.get(run.nodeId);
    session?.link.cancel(runId, reason);
    // A node that never confirms must not leave the run hanging.
    const timer = setTimeout(() => {
      const terminal = run.finish({ type: "cancelled", reason }, this.#now());
      // The connection it counts on now: it may have been detached or resumed meanwhile.
      if (terminal) this.#settle(run, this.#registry.get(run.nodeId));
    }, session ? CANCEL_GRACE_MS : 0);
    void run.done.then(() => clearTimeout(timer));
    return true;
  }

  /** A run in flight by id, with the times the Edge keeps of it. */
  getRun(runId: string): ActiveRun | undefined {
    return this.#runs.get(runId);
  }

  /**
   * Sends a command to a connected node. A `run_output` answer says `found: false` for a run its
   * history does not have; the caller decides whether that is an error.
   */
  async nodeCommand(node: string, command: NodeCommand): Promise<NodeCommandResult> {
    if (command.type === "run_output" && command.runId.trim() === "") {
      throw new IopError("INVALID_ARGUMENT", "Cannot read a run's output as 'runId' is empty");
    }
    const session = this.#registry.get(node);
    if (!session) {
      if (this.#store.byName(node)) {
        throw new IopError("UNAVAILABLE", `Cannot reach node '${node}' as it is not connected`);
      }
      throw new IopError("NOT_FOUND", `Cannot find node '${node}'`);
    }
    return await session.link.command(command, COMMAND_TIMEOUT_MS);
  }

  /**
   * Marks a node as draining (no new runs) or not; false when it is not connected. Throws
   * INVALID_ARGUMENT for undraining a node that is stopping: it would refuse the runs.
   */
  drainNode(node: string, draining: boolean): boolean {
    const session = this.#registry.get(node);
    if (!session) return false;
    if (!draining && session.stopping) {
      throw new IopError(
        "INVALID_ARGUMENT",
        `Cannot undrain node '${node}' as it is stopping: it finishes its runs in flight, ` +
          `takes no new one and then disconnects`,
      );
    }
    this.#setDraining(session, draining);
    return true;
  }

  /**
   * The node on this session's link said it is stopping (EdgeNodeEvent.draining): it is drained
   * for good, whatever an operator asks later. A frame from a link already replaced by a newer
   * connection of the node marks only that old session.
   */
  nodeStopping(session: NodeSession): void {
    session.stopping = true;
    this.#setDraining(session, true);
  }

  #setDraining(session: NodeSession, draining: boolean): void {
    session.draining = draining;
    if (this.#registry.get(session.id) !== session) return;
    if (!draining) this.pools.admitWaiting();
    this.#bus.publish({
      type: "node_drain_changed",
      atMs: this.#now(),
      nodeId: session.id,
      draining,
    });
  }

  /**
   * Applies a config_applied report from a node: the config version it now runs (0: a node that
   * does not report versions), what it built, and why it refused the rest (logged, kept on the
   * session for the status, and relayed). A report older than the last one is stale and ignored.
   */
  nodeAdaptersApplied(
    session: NodeSession,
    adapters: string[],
    rejected: Record<string, string>,
    version = 0,
  ) {
    if (version !== 0 && version < session.configVersion) return;
    session.configVersion = version;
    session.adapters = adapters;
    session.refused = rejected;
    // Health of adapters the node no longer built is no longer news (keys: `a`, `a/target`).
    for (const key of [...session.adapterHealth?.keys() ?? []]) {
      if (!adapters.includes(key.split("/")[0]!)) session.adapterHealth!.delete(key);
    }
    for (const [adapter, reason] of Object.entries(rejected)) {
      this.#logger.warn("node refused adapter", { node_id: session.id, adapter, reason });
    }
    this.pools.admitWaiting();
    this.#bus.publish({
      type: "node_config_applied",
      atMs: this.#now(),
      nodeId: session.id,
      adapters,
      rejected,
    });
  }

  /**
   * Applies an AdapterHealth report from a node: kept on the session (pools, direct routing,
   * status and readiness read it), and logged and relayed when it changes (a node repeats its
   * whole picture after each registration and config update). `adapter` is an adapter name, or
   * `<adapter>/<target>` for one CLI profile. A recovery wakes waiting pool runs.
   */
  nodeAdapterHealth(session: NodeSession, adapter: string, healthy: boolean, detail: string) {
    const health = session.adapterHealth ??= new Map();
    const before = health.get(adapter);
    health.set(adapter, { healthy, detail });
    if (before?.healthy === healthy && before.detail === detail) return;
    if (before?.healthy !== healthy) {
      const fields = { node_id: session.id, adapter, detail };
      if (healthy) this.#logger.info("node adapter healthy", fields);
      else this.#logger.warn("node adapter unhealthy", fields);
    }
    if (healthy) this.pools.admitWaiting();
    this.#bus.publish({
      type: "adapter_health",
      atMs: this.#now(),
      nodeId: session.id,
      adapter,
      healthy,
      detail,
    });
  }

  /** The resource-first status snapshot of this Edge's group. */
  status(): StatusSnapshot {
    this.enrollment.prune();
    const snapshot = buildStatusSnapshot({
      edgeId: this.#config.edge.id,
      version: this.#version,
      startedAtMs: this.#startedAtMs,
      runsInFlight: this.#runs.size,
      records: this.#store.list(),
      sessions: this.#registry.list(),
      providerStats: (id) => this.pools.stats(id),
      resourceUsage: (node, adapter, target) => this.pools.usage(node, adapter, target),
    });
    if (this.#detached.size === 0) return snapshot;
    const detached = new Map<string, number>();
    for (const runId of this.#detached.keys()) {
      const nodeId = this.#runs.get(runId)!.nodeId;
      detached.set(nodeId, (detached.get(nodeId) ?? 0) + 1);
    }
    for (const node of snapshot.nodes) {
      const count = detached.get(node.id);
      if (count) node.detachedRuns = count;
    }
    return snapshot;
  }

  /**
   * No node can come back (the node listener closed as the Edge stops): runs waiting for theirs
   * fail at once, and so do those of links lost from now on.
   */
  stopAwaitingNodes(reason: string): void {
    this.#awaitsNodes = false;
    for (const [runId, { reason: lost }] of [...this.#detached]) {
      const run = this.#runs.get(runId)!;
      this.#failLost(
        run,
        undefined,
        `Node '${run.nodeId}' was lost while running: ${lost} (${reason})`,
      );
    }
  }

  /** Connected sessions, for routing layers. */
  sessions(): NodeSession[] {
    return this.#registry.list();
  }

  /**
   * Swaps in a new configuration as the next config version. Connected nodes whose record
   * vanished or changed token are disconnected; each other one takes its new record at once
   * (routing, pools and status read it) and, when what it serves changed, is sent the new
   * configuration live. Runs in flight keep going.
   */
  applyConfig(config: EdgeConfig): ConfigSwap {
    this.#fileConfig = config;
    // Enrolled nodes the new rules still admit stay, rebuilt from the new templates.
    this.enrollment.rebase(config);
    this.#swapSnapshot();
    this.#configVersion++;
    const swap: ConfigSwap = { version: this.#configVersion, reconfigured: 0, dropped: 0 };
    for (const session of this.#registry.list()) {
      const outcome = this.#reconcile(session);
      if (outcome === "reconfigured") swap.reconfigured++;
      else if (outcome === "dropped") swap.dropped++;
    }
    this.pools.admitWaiting();
    return swap;
  }

  /**
   * Re-reads the configuration and swaps it in when the whole file is valid; otherwise keeps
   * the configuration in force. Listener addresses take effect only after a restart.
   */
  async reload(): Promise<{ ok: boolean; detail: string }> {
    const load = this.#loadConfig;
    let result: { ok: boolean; detail: string };
    if (!load) {
      result = { ok: false, detail: "this edge was started without a config file to reload" };
    } else {
      try {
        const next = await load();
        const swap = this.applyConfig(next);
        result = {
          ok: true,
          detail:
            `loaded ${next.nodes.length} nodes, ${next.models.length} models from ${next.file} ` +
            `as config v${swap.version} (connected nodes reconfigured: ${swap.reconfigured}, ` +
            `dropped: ${swap.dropped})`,
        };
      } catch (err) {
        result = { ok: false, detail: `kept the previous config: ${(err as Error).message}` };
      }
    }
    this.#bus.publish({ type: "config_reloaded", atMs: this.#now(), ...result });
    return result;
  }

  // --- internals ------------------------------------------------------------------------------

  /**
   * Puts the file's config with the enrolled records appended in force (at a reload, and when a
   * node enrolled or an enrolled record went), and lets the pools forget providers it no longer
   * has.
   */
  #swapSnapshot(): void {
    this.#config = this.enrollment.overlay(this.#fileConfig);
    this.#store = new NodeStore(this.#config.nodes);
    this.pools.forgetRemovedProviders();
  }

  /**
   * Brings one connected node to the configuration in force: drops it when its record vanished
   * or its token changed, else gives the session the new record and pushes the node its new
   * configuration when that differs from what it was last sent.
   */
  #reconcile(session: NodeSession): "dropped" | "reconfigured" | "unchanged" {
    const record = this.#store.byName(session.id);
    // The same secret re-stored as its hash is no change; any other token change is.
    if (
      record?.id !== session.id ||
      secretFingerprint(record.token) !== secretFingerprint(session.record.token)
    ) {
      this.#dropped.add(session);
      session.link.close("node removed from config or its token changed");
      return "dropped";
    }
    const changed = nodeConfigKey(record) !== nodeConfigKey(session.record);
    this.#registry.replaceRecord(session, record);
    if (!changed) return "unchanged";
    const version = this.#configVersion;
    session.wantedConfigVersion = version;
    const log = this.#logger.with({ node_id: session.id, config_version: version });
    if (!session.link.configure) {
      session.link.close("node configuration changed and its link cannot take it live");
      return "dropped";
    }
    log.info("pushing changed configuration to node");
    session.link.configure(record, version).catch((err) =>
      log.warn("cannot push configuration to node; it gets it when it reconnects", { err })
    );
    return "reconfigured";
  }

  /**
   * The link of `session` is gone (`reason`): each of its runs is detached to wait for the node
   * when worth it (a link `lost` as `nodeDisconnected` says; every one when the node is `back`
   * on a new connection, which re-attaches those it resumes), or fails with NODE_LOST (always
   * when the node `ended` the link itself).
   */
  #linkLost(session: NodeSession, reason: string, how: "lost" | "ended" | "back"): void {
    const graceMs = this.#config.runs.resumeGraceMs;
    const back = how === "back";
    // A node whose own end closed the link (its process ended) is not coming back with its runs.
    const waits = this.#awaitsNodes && graceMs > 0 && how !== "ended" &&
      session.stopping !== true && !this.#dropped.has(session);
    for (const run of [...this.#runs.values()]) {
      if (run.nodeId !== session.id || this.#detached.has(run.runId)) continue;
      if (waits && (back || run.produced || !run.pooled)) {
        this.#detach(run, session, reason, graceMs);
        continue;
      }
      this.#failLost(run, session, `Node '${session.id}' was lost while running: ${reason}`);
    }
  }

  #detach(run: ActiveRun, session: NodeSession, reason: string, graceMs: number): void {
    session.inFlight = Math.max(0, session.inFlight - 1);
    const timer = setTimeout(() => {
      this.#failLost(
        run,
        undefined,
        `Node '${run.nodeId}' did not come back within ${graceMs} ms (runs.resume_grace_ms): ` +
          reason,
      );
    }, graceMs);
    this.#detached.set(run.runId, { timer, reason });
    this.#logger.info("run waits for its node to come back", {
      run_id: run.runId,
      node_id: run.nodeId,
      reason,
      grace_ms: graceMs,
    });
  }

  /**
   * Binds to the node's new connection the detached runs it resumes; fails at once the others
   * of that node (it came back without them: it restarted), and cancels on the node a resumed
   * run that ended meanwhile.
   */
  #reattach(session: NodeSession, resumed: ReadonlySet<string>): void {
    for (const [runId, { timer, reason }] of this.#detached) {
      const run = this.#runs.get(runId)!;
      if (run.nodeId !== session.id) continue;
      if (!resumed.has(runId)) {
        this.#failLost(
          run,
          undefined,
          `Node '${session.id}' was lost while running: ${reason}; it registered again ` +
            "without the run",
        );
        continue;
      }
      clearTimeout(timer);
      this.#detached.delete(runId);
      session.inFlight++;
      run.attached(session.runWindowBytes ?? 0);
      this.#logger.info("run resumed on its node's new connection", {
        run_id: runId,
        node_id: session.id,
        received_seq: run.lastSeq,
      });
    }
    for (const runId of resumed) {
      const run = this.#runs.get(runId);
      if (run?.nodeId === session.id && !run.finished) continue;
      this.#cancelUnknown(session, runId);
    }
  }

  #failLost(run: ActiveRun, session: NodeSession | undefined, message: string): void {
    const terminal = run.finish(
      { type: "failed", code: "NODE_LOST", message, retryable: true },
      this.#now(),
    );
    if (terminal) this.#settle(run, session);
  }

  /** Forgets a finished run; `session` is the one it counted on (none while detached). */
  #settle(run: ActiveRun, session: NodeSession | undefined): void {
    if (!this.#runs.delete(run.runId)) return;
    const detached = this.#detached.get(run.runId);
    if (detached) {
      clearTimeout(detached.timer);
      this.#detached.delete(run.runId);
    } else if (session) session.inFlight = Math.max(0, session.inFlight - 1);
    void run.done.then((terminal) => {
      const durationMs = terminal.timestampMs - run.startedAtMs;
      const status = terminal.type;
      this.#metrics?.runsFinished.labels(status).inc();
      this.#metrics?.runDuration.labels(status).observe(Math.max(0, durationMs) / 1000);
      this.#metrics?.runsInFlight.set(this.#runs.size);
      this.#bus.publish({
        type: "run_finished",
        atMs: this.#now(),
        runId: run.runId,
        nodeId: run.nodeId,
        adapter: run.adapter,
        target: run.target,
        status,
        durationMs,
        errorCode: terminal.type === "failed" ? terminal.code : "",
      });
    });
  }
}

/** Why the Edge cancels on a node a run it no longer knows (the node's history keeps it). */
function noLongerWaits(runId: string): string {
  return `the edge no longer waits for run ${runId}`;
}

/** What a node is sent of its record, as comparable text: everything but its token. */
function nodeConfigKey(record: NodeRecord): string {
  const { token: _token, ...served } = record;
  return JSON.stringify(served);
}
