/**
 * The Edge's surface-neutral service layer. Every surface (ops console, HTTP APIs, A2A, the
 * Control Plane link) submits and cancels runs, sends node commands, reads status and listens
 * to events through this class; the node transport feeds it connections and run events.
 * @module
 */
import { IopError } from "../../shared/errors.ts";
import type { Logger } from "../../shared/log.ts";
import type { RunEvent } from "../../shared/run.ts";
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
      ...(conn.seat ? { seat: conn.seat } : {}),
    };
    const replaced = this.#registry.add(session);
    conn.seat?.connected();
    if (replaced) {
      this.#failRunsOf(replaced, "node reconnected on a new connection");
      replaced.link.close("replaced by a new connection of the same node");
    }
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

  /** Forgets a node whose connection ended and fails its runs in flight with NODE_LOST. */
  nodeDisconnected(session: NodeSession, reason: string): void {
    if (!this.#registry.remove(session)) return;
    session.seat?.release(session.stopping === true);
    this.#failRunsOf(session, reason);
    this.#metrics?.nodesConnected.set(this.#registry.size);
    this.#bus.publish({ type: "node_disconnected", atMs: this.#now(), nodeId: session.id, reason });
  }

  /** Relays one run event from a node. */
  runEvent(session: NodeSession, event: RunEvent): void {
    const run = this.#runs.get(event.runId);
    if (!run || run.nodeId !== session.id) {
      this.#logger.debug("run event for unknown run dropped", {
        node_id: session.id,
        run_id: event.runId,
      });
      return;
    }
    if (run.offer(event) === "terminal") this.#settle(run, session);
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

  /** Sends a run to a chosen node and tracks it; exposed for routing layers (provider pools). */
  async dispatch(
    session: NodeSession,
    submission: RunSubmission,
    options: SubmitOptions = {},
  ): Promise<ActiveRun> {
    options.signal?.throwIfAborted();
    const runId = `run_${crypto.randomUUID().replaceAll("-", "")}`;
    const run = new ActiveRun(
      {
        runId,
        nodeId: session.id,
        adapter: submission.adapter,
        target: submission.target,
        startedAtMs: this.#now(),
      },
      (reason) => this.cancelRun(runId, reason),
    );
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
      signal.addEventListener("abort", onAbort, { once: true });
      void run.done.then(() => signal.removeEventListener("abort", onAbort));
    }
    return run;
  }

  /** Asks the run's node to cancel it; returns false for an unknown or finished run. */
  cancelRun(runId: string, reason = "cancelled"): boolean {
    const run = this.#runs.get(runId);
    if (!run || run.finished) return false;
    const session = this.#registry.get(run.nodeId);
    session?.link.cancel(runId, reason);
    // A node that never confirms must not leave the run hanging.
    const timer = setTimeout(() => {
      const terminal = run.finish({ type: "cancelled", reason }, this.#now());
      if (terminal) this.#settle(run, session);
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
    return buildStatusSnapshot({
      edgeId: this.#config.edge.id,
      version: this.#version,
      startedAtMs: this.#startedAtMs,
      runsInFlight: this.#runs.size,
      records: this.#store.list(),
      sessions: this.#registry.list(),
      providerStats: (id) => this.pools.stats(id),
      resourceUsage: (node, adapter, target) => this.pools.usage(node, adapter, target),
    });
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

  #failRunsOf(session: NodeSession, reason: string): void {
    for (const run of [...this.#runs.values()]) {
      if (run.nodeId !== session.id) continue;
      const terminal = run.finish({
        type: "failed",
        code: "NODE_LOST",
        message: `Node '${session.id}' was lost while running: ${reason}`,
        retryable: true,
      }, this.#now());
      if (terminal) this.#settle(run, session);
    }
  }

  #settle(run: ActiveRun, session: NodeSession | undefined): void {
    if (!this.#runs.delete(run.runId)) return;
    if (session) session.inFlight = Math.max(0, session.inFlight - 1);
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

/** What a node is sent of its record, as comparable text: everything but its token. */
function nodeConfigKey(record: NodeRecord): string {
  const { token: _token, ...served } = record;
  return JSON.stringify(served);
}
