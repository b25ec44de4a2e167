/**
 * Runs A2A tasks as ordinary IOP runs and keeps them: a task is created `submitted`, its run is
 * submitted through the Edge service (`working`), output deltas become artifact updates, stderr
 * and log lines become `working` status messages, and the run's terminal event decides
 * `completed`, `failed` or `canceled`. Tasks stay readable for the retention period; on start,
 * tasks a previous process left unfinished are marked failed with a reason.
 *
 * Sessions: the first task of a context gets a new, server-generated session id (never the
 * client's context id, so no client can name another's session or a command-line option); every
 * later task of that context runs with the same id, so a CLI agent continues its session on the
 * node that holds it (`../sessions.ts`). A task keeps its session and node in its metadata
 * (`iopSessionId`, `iopNodeId`), so the store carries them across a restart and
 * {@linkcode A2aTaskManager.recover} re-seeds the Edge's session map. A message whose metadata
 * has `iopOnSessionLost: "start_new"` starts the session anew elsewhere when its node is gone.
 *
 * Ownership: a task belongs to the tenant that created it (`owner`), and every lookup is scoped
 * by agent and owner ({@linkcode TaskScope}), so another tenant's task id is "not found". A
 * context is scoped the same way: a contextId another tenant uses is, for this caller, a context
 * it has not used yet, so its message starts a new context of its own with a new session and
 * never reaches the other tenant's CLI session.
 *
 * Bounds: the tenant's limits are checked (`service.tenants.admit`) before a task is created,
 * and the run holds the lease until it ends. At most `maxTasks` tasks are kept: when full, the
 * oldest finished ones are dropped first, running ones never; a store full of unfinished tasks
 * refuses new ones. A task keeps at most `maxTaskBytes` of output (`task_output.ts`); its log
 * lines only ever replace its status message. A run refused at admission (tenant over a limit,
 * CLI profile or pool queue full) answers the send with a -32000 Overloaded error (HTTP 429)
 * instead of leaving a failed task behind.
 *
 * Flow control: the watch of the stream that started a task (`drivesRun`) may pause the task's
 * run while its client does not read ({@linkcode TaskWatch.setReaderPaused}), so the node stops
 * producing; other watches never hold the run back. A stream holds at most `streamBufferBytes`
 * (`sse_stream.ts`).
 * @module
 */
import { AsyncQueue } from "../../../shared/async_queue.ts";
import { OverloadedError, toIopError } from "../../../shared/errors.ts";
import type { Logger } from "../../../shared/log.ts";
import type { RunEvent } from "../../../shared/run.ts";
import type { AgentRecord } from "../config.ts";
import type { RunHandle, RunSubmission, SubmitOptions } from "../ports.ts";
import { newSessionId } from "../sessions.ts";
import { holdLease, type TenantLease, TenantLimitError } from "../tenants/limiter.ts";
import type { TenantRecord } from "../tenants/tenant.ts";
import type { ListParams, TaskPage } from "./dialect.ts";
import { A2aRpcError, invalidParams, overloaded, RPC_CODE, taskNotFound } from "./rpc_error.ts";
import { DEFAULT_STREAM_BUFFER_BYTES } from "./sse_stream.ts";
import { oldestFinished, pageOf } from "./task_page.ts";
import { type OutputBudget, takeOutput } from "./task_output.ts";
import type { A2aTaskStore } from "./task_store.ts";
import {
  type A2aMessage,
  type A2aStatus,
  type A2aTask,
  agentText,
  isFinalState,
  isTerminalState,
  LEGACY_OWNER,
  ownedBy,
  promptOf,
  type TaskUpdate,
} from "./task_model.ts";

/** What the task manager needs from the Edge service. */
export interface RunSubmitter {
  submitRun(submission: RunSubmission, options?: SubmitOptions): Promise<RunHandle>;
  cancelRun(runId: string, reason?: string): boolean;
  /** The Edge's session → node map, re-seeded from stored tasks; absent = not re-seeded. */
  readonly sessionAffinity?: { remember(sessionId: string, nodeId: string, atMs?: number): void };
  /** Each tenant's limits, admitted before a task is created; absent = no tenant limits. */
  readonly tenants?: { admit(tenant: TenantRecord): TenantLease };
}

/** Default of {@linkcode TaskManagerOptions.maxTasks} (`a2a.max_tasks`). */
export const DEFAULT_MAX_TASKS = 10_000;

/** Default of {@linkcode TaskManagerOptions.maxTaskBytes} (`a2a.max_task_bytes`): 1 MiB. */
export const DEFAULT_MAX_TASK_BYTES = 1024 * 1024;

/** Which tasks a lookup may see: those of one agent created by one tenant. */
export interface TaskScope {
  agentId: string;
  /** Tenant name of the caller. */
  owner: string;
}

/** A task just created by {@linkcode A2aTaskManager.start}. */
export interface StartedTask {
  task: A2aTask;
  /**
   * Resolves once the task's run was dispatched, is waiting for capacity, or failed for another
   * reason (the task then ends failed); rejects with a -32000 Overloaded error when the run was
   * refused at admission (a full CLI profile or pool queue), and the task is then forgotten.
   */
  admitted: Promise<void>;
}

/** Options of {@linkcode A2aTaskManager}. */
export interface TaskManagerOptions {
  service: RunSubmitter;
  store: A2aTaskStore;
  logger: Logger;
  /** How long a finished task stays readable after its last status change. */
  retentionMs: number;
  /** Tasks kept at most, finished and running; defaults to {@linkcode DEFAULT_MAX_TASKS}. */
  maxTasks?: number;
  /** Output bytes a task keeps; defaults to {@linkcode DEFAULT_MAX_TASK_BYTES}. */
  maxTaskBytes?: number;
  /**
   * Bytes one stream subscriber may fall behind before it is cut off with an error event;
   * defaults to {@linkcode DEFAULT_STREAM_BUFFER_BYTES}.
   */
  streamBufferBytes?: number;
  /** Defaults to Date.now. */
  now?: () => number;
}

/** A live view of one task: its state now, then every update until a final state. */
export interface TaskWatch {
  snapshot: A2aTask;
  /** Iterate it, or `subscribe` to be handed each update synchronously. */
  updates: AsyncQueue<TaskUpdate>;
  /** Stops delivering updates (the client went away). */
  close(): void;
  /**
   * Says whether the watch's client is keeping up. Only a watch made with `drivesRun` passes it
   * on to the task's run (now, or once the run is dispatched); on any other it does nothing.
   */
  setReaderPaused(paused: boolean): void;
}

/** Options of {@linkcode A2aTaskManager.watch}. */
export interface WatchOptions {
  /**
   * The watch is the stream that started the task: while its client does not read, it may
   * pause the task's run ({@linkcode TaskWatch.setReaderPaused}).
   */
  drivesRun?: boolean;
}

interface Live {
  task: A2aTask;
  listeners: Set<(update: TaskUpdate) => void>;
  output: string;
  budget: OutputBudget;
  cancelReason: string | undefined;
  settled: PromiseWithResolvers<void>;
  /** False until the task's run was admitted; only then is it stored. */
  accepted: boolean;
  /** The task's run once dispatched. */
  handle: RunHandle | undefined;
  /** True while the stream that started the task has its client not reading. */
  readerPaused: boolean;
}

/** What {@linkcode A2aTaskManager.start} hands its run. */
interface PendingRun {
  agent: AgentRecord;
  sessionId: string;
  lease: TenantLease | undefined;
  admission: PromiseWithResolvers<void>;
}

const RESTART_REASON = "The Edge restarted while this task was running; its run was lost";

/** Settles after pending promise callbacks ran: refusals at admission are decided by then. */
const nextTurn = () => new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 0));

/** Creates, runs, watches, lists, cancels and retains A2A tasks. */
export class A2aTaskManager {
  readonly #tasks = new Map<string, Live>();
  readonly #options: TaskManagerOptions;
  readonly #now: () => number;
  readonly #maxTasks: number;
  readonly #maxTaskBytes: number;
  readonly #streamBufferBytes: number;
  readonly #sweeper: ReturnType<typeof setInterval>;

  constructor(options: TaskManagerOptions) {
    this.#options = options;
    this.#now = options.now ?? Date.now;
    this.#maxTasks = options.maxTasks ?? DEFAULT_MAX_TASKS;
    this.#maxTaskBytes = options.maxTaskBytes ?? DEFAULT_MAX_TASK_BYTES;
    this.#streamBufferBytes = options.streamBufferBytes ?? DEFAULT_STREAM_BUFFER_BYTES;
    this.#sweeper = setInterval(() => this.sweep(), Math.min(options.retentionMs, 60_000));
    Deno.unrefTimer(Number(this.#sweeper));
  }

  /**
   * Loads the stored tasks and marks those a previous process left unfinished as failed.
   * Returns how many were marked.
   */
  recover(): number {
    this.sweep();
    let failed = 0;
    for (const task of this.#options.store.loadAll()) {
      if (typeof task.owner !== "string") task.owner = LEGACY_OWNER;
      const live = this.#live(task, true);
      const { iopSessionId, iopNodeId } = task.metadata ?? {};
      if (typeof iopSessionId === "string" && typeof iopNodeId === "string") {
        this.#options.service.sessionAffinity?.remember(
          iopSessionId,
          iopNodeId,
          task.status.timestampMs,
        );
      }
      if (!isTerminalState(task.status.state)) {
        task.status = {
          state: "failed",
          message: agentText(RESTART_REASON, task, { code: "NODE_LOST" }),
          timestampMs: this.#now(),
        };
        this.#options.store.put(task);
        failed++;
      }
      live.settled.resolve();
    }
    this.#dropOldestFinished(this.#tasks.size - this.#maxTasks);
    if (failed > 0) {
      this.#options.logger.warn("a2a tasks left unfinished by a previous edge marked failed", {
        count: failed,
      });
    }
    return failed;
  }

  /**
   * Creates a task of `options.tenant` for `message` sent to `agent` and starts its run on the
   * next turn, so a caller may {@linkcode watch} it first, then should await
   * {@linkcode StartedTask.admitted} before answering. Throws A2A errors for a message that
   * names an unknown, foreign or finished task, and -32000 Overloaded when the tenant is over a
   * limit or the store is full of unfinished tasks.
   */
  start(agent: AgentRecord, message: A2aMessage, options: { tenant: TenantRecord }): StartedTask {
    const scope = { agentId: agent.id, owner: options.tenant.name };
    let contextId = message.contextId;
    if (message.taskId !== "") {
      const existing = this.#find(scope, message.taskId);
      if (!existing) throw taskNotFound(message.taskId);
      if (contextId !== "" && contextId !== existing.task.contextId) {
        throw invalidParams("params.message.contextId", "does not match the task's contextId");
      }
      throw new A2aRpcError(
        RPC_CODE.UNSUPPORTED_OPERATION,
        `Task '${message.taskId}' is ${existing.task.status.state} and takes no further ` +
          "messages; send a new message with its contextId to continue the conversation",
      );
    }
    this.#makeRoom();
    const lease = this.#admit(options.tenant);
    const sessionId = (contextId === "" ? undefined : this.#sessionOf(scope, contextId)) ??
      newSessionId();
    if (contextId === "") contextId = crypto.randomUUID();
    const id = crypto.randomUUID();
    const task: A2aTask = {
      id,
      contextId,
      agentId: agent.id,
      owner: scope.owner,
      status: { state: "submitted", timestampMs: this.#now() },
      artifacts: [],
      history: [{ ...message, taskId: id, contextId }],
      createdAtMs: this.#now(),
      runId: "",
      metadata: { iopSessionId: sessionId },
    };
    const live = this.#live(task, false);
    const admission = Promise.withResolvers<void>();
    admission.promise.catch(() => {}); // the caller may not wait for it
    const run = { agent, sessionId, lease, admission };
    const startNewIfLost = message.metadata?.iopOnSessionLost === "start_new";
    queueMicrotask(() =>
      this.#execute(live, run, startNewIfLost).catch((err) => {
        this.#options.logger.error("a2a task broke", { task_id: id, err });
        lease?.finish();
        this.#accept(live, admission);
        this.#finish(live, "failed", `Task failed inside the Edge: ${toIopError(err).message}`);
      })
    );
    return { task: structuredClone(task), admitted: admission.promise };
  }

  /** A task of `scope` as it stands, or undefined. */
  get(scope: TaskScope, id: string): A2aTask | undefined {
    const live = this.#find(scope, id);
    return live ? structuredClone(live.task) : undefined;
  }

  /** Waits until the task reaches a final state and returns it. */
  async settled(scope: TaskScope, id: string): Promise<A2aTask> {
    const live = this.#find(scope, id);
    if (!live) throw taskNotFound(id);
    await live.settled.promise;
    return structuredClone(live.task);
  }

  /** Bytes one stream subscriber may fall behind before it is cut off. */
  get streamBufferBytes(): number {
    return this.#streamBufferBytes;
  }

  /** The task as it stands plus its updates until a final state; undefined for unknown ids. */
  watch(scope: TaskScope, id: string, options: WatchOptions = {}): TaskWatch | undefined {
    const live = this.#find(scope, id);
    if (!live) return undefined;
    const queue = new AsyncQueue<TaskUpdate>();
    const snapshot = structuredClone(live.task);
    const setReaderPaused = options.drivesRun
      ? (paused: boolean) => {
        live.readerPaused = paused;
        live.handle?.setReaderPaused(paused);
      }
      : () => {};
    if (isFinalState(snapshot.status.state)) {
      queue.end();
      return { snapshot, updates: queue, close: () => {}, setReaderPaused: () => {} };
    }
    const listener = (update: TaskUpdate) => {
      queue.push(structuredClone(update));
      if (update.kind === "status" && update.final) close();
    };
    const close = () => {
      live.listeners.delete(listener);
      queue.end();
    };
    live.listeners.add(listener);
    return { snapshot, updates: queue, close, setReaderPaused };
  }

  /** A page of the tasks of `scope`, most recently changed first. */
  list(scope: TaskScope, p: ListParams): TaskPage {
    // A task waiting for admission is not listed: it may yet be refused.
    const visible = [...this.#tasks.values()].filter((l) =>
      l.accepted && l.task.agentId === scope.agentId && ownedBy(l.task, scope.owner)
    ).map((l) => l.task);
    return pageOf(visible, p);
  }

  /**
   * Cancels a task: its run is cancelled on the node (a CLI's process group is killed) and the
   * task is returned once it is `canceled`. -32001 for unknown ids, -32002 for finished tasks.
   */
  async cancel(scope: TaskScope, id: string): Promise<A2aTask> {
    const live = this.#find(scope, id);
    if (!live) throw taskNotFound(id);
    if (isTerminalState(live.task.status.state)) {
      throw new A2aRpcError(
        RPC_CODE.TASK_NOT_CANCELABLE,
        `Task '${id}' is already ${live.task.status.state} and cannot be canceled`,
      );
    }
    if (live.cancelReason === undefined) {
      live.cancelReason = "canceled by the A2A client";
      if (live.task.runId !== "") {
        this.#options.service.cancelRun(live.task.runId, live.cancelReason);
      }
    }
    await live.settled.promise;
    return structuredClone(live.task);
  }

  /**
   * Forgets finished tasks older than the retention period, in memory and in the store; a task
   * still running is kept however old it is.
   */
  sweep(): void {
    const cutoff = this.#now() - this.#options.retentionMs;
    for (const [id, live] of this.#tasks) {
      if (isTerminalState(live.task.status.state) && live.task.status.timestampMs < cutoff) {
        this.#tasks.delete(id);
      }
    }
    this.#options.store.deleteFinishedBefore(cutoff);
  }

  /** Tasks kept now (finished and running, of every tenant). */
  get size(): number {
    return this.#tasks.size;
  }

  /** Stops the retention sweeper and closes the store. */
  close(): void {
    clearInterval(this.#sweeper);
    this.#options.store.close();
  }

  #find(scope: TaskScope, id: string): Live | undefined {
    const live = this.#tasks.get(id);
    if (!live || live.task.agentId !== scope.agentId || !ownedBy(live.task, scope.owner)) {
      return undefined;
    }
    return live;
  }

  /** Admits a run of `tenant` at its limits, or throws -32000 Overloaded naming the limit. */
  #admit(tenant: TenantRecord): TenantLease | undefined {
    try {
      return this.#options.service.tenants?.admit(tenant);
    } catch (err) {
      if (!(err instanceof TenantLimitError)) throw err;
      throw overloaded(err.message, err.retryAfterSeconds, {
        reason: "tenant_limit",
        limit: err.limit,
      });
    }
  }

  /** Makes room for one more task, dropping the oldest finished ones; refuses when it cannot. */
  #makeRoom(): void {
    const max = this.#maxTasks;
    this.#dropOldestFinished(this.#tasks.size - max + 1);
    if (this.#tasks.size < max) return;
    throw overloaded(
      `Cannot create a task as the A2A task store is full: all ${this.#tasks.size} tasks ` +
        `it keeps (a2a.max_tasks = ${max}) are unfinished`,
      1,
      { reason: "store_full" },
    );
  }

  /** Forgets up to `count` finished tasks, least recently changed first. */
  #dropOldestFinished(count: number): void {
    if (count <= 0) return;
    const finished = oldestFinished([...this.#tasks.values()].map((l) => l.task), count);
    if (finished.length === 0) return;
    for (const id of finished) this.#tasks.delete(id);
    try {
      this.#options.store.delete(finished);
    } catch (err) {
      this.#options.logger.error("a2a tasks could not be purged from the store", { err });
    }
  }

  #live(task: A2aTask, accepted: boolean): Live {
    const live: Live = {
      task,
      listeners: new Set(),
      output: "",
      budget: { bytes: 0, truncated: false },
      cancelReason: undefined,
      settled: Promise.withResolvers(),
      accepted,
      handle: undefined,
      readerPaused: false,
    };
    this.#tasks.set(task.id, live);
    return live;
  }

  /** The session of the latest task of `scope` in `contextId`, if any has one. */
  #sessionOf(scope: TaskScope, contextId: string): string | undefined {
    let latest: A2aTask | undefined;
    for (const { task } of this.#tasks.values()) {
      if (task.agentId !== scope.agentId || task.contextId !== contextId) continue;
      if (!ownedBy(task, scope.owner)) continue;
      if (typeof task.metadata?.iopSessionId !== "string") continue;
      if (!latest || task.createdAtMs >= latest.createdAtMs) latest = task;
    }
    return latest?.metadata?.iopSessionId as string | undefined;
  }

  async #execute(live: Live, run: PendingRun, startNewIfLost: boolean): Promise<void> {
    const { task } = live;
    const { agent, sessionId, lease, admission } = run;
    const log = this.#options.logger.with({ task_id: task.id, agent_id: agent.id });
    if (live.cancelReason !== undefined) {
      lease?.finish();
      this.#accept(live, admission);
      this.#finish(live, "canceled", live.cancelReason);
      return;
    }
    const prompt = promptOf(task.history[0]!);
    const submission: RunSubmission = {
      adapter: agent.adapter,
      target: agent.target,
      prompt,
      messages: [{ role: "user", content: prompt }],
      sampling: {},
      tools: [],
      sessionId,
      metadata: { a2a_agent_id: agent.id, a2a_task_id: task.id, a2a_context_id: task.contextId },
      timeoutMs: 0,
      ...(startNewIfLost ? { onSessionLost: "start_new" as const } : {}),
    };
    const submitted = Promise.try(() =>
      this.#options.service.submitRun(submission, lease ? { tenant: lease } : {})
    );
    const pending = lease ? holdLease(lease, submitted) : submitted;
    // Refusals at admission (a full profile or queue) are decided at once: answer them as such.
    const early = await Promise.race([
      pending.then((handle) => ({ handle }), (err: unknown) => ({ err })),
      nextTurn(),
    ]);
    let handle: RunHandle;
    try {
      if (early && "err" in early) throw early.err;
      if (!early) this.#accept(live, admission);
      handle = early ? early.handle : await pending;
    } catch (err) {
      const e = toIopError(err);
      if (early && e instanceof OverloadedError) {
        log.debug("a2a task refused at admission", { err: e.message });
        this.#tasks.delete(task.id);
        live.settled.resolve();
        admission.reject(overloaded(e.message, e.retryAfterSeconds, { reason: "overloaded" }));
        return;
      }
      log.warn("a2a task could not start its run", { err: e.message, code: e.code });
      this.#accept(live, admission);
      this.#finish(live, "failed", `Cannot run agent '${agent.id}': ${e.message}`, {
        code: e.code,
      });
      return;
    }
    this.#accept(live, admission);
    live.handle = handle;
    // The stream that started the task may have filled up before its run was dispatched.
    if (live.readerPaused) handle.setReaderPaused(true);
    task.runId = handle.runId;
    task.metadata = { iopRunId: handle.runId, iopNodeId: handle.nodeId, iopSessionId: sessionId };
    if (live.cancelReason !== undefined) handle.cancel(live.cancelReason);
    else this.#status(live, { state: "working", timestampMs: this.#now() }, true);
    log.debug("a2a task running", { run_id: handle.runId, node_id: handle.nodeId });
    for await (const event of handle.events()) this.#onRunEvent(live, event);
    live.handle = undefined; // a finished task keeps no run
  }

  /** The task is taken (its run dispatched, waiting, or failed): store it and let the send answer. */
  #accept(live: Live, admission: PromiseWithResolvers<void>): void {
    if (live.accepted) return;
    live.accepted = true;
    this.#store(live.task);
    admission.resolve();
  }

  #onRunEvent(live: Live, event: RunEvent): void {
    const { task } = live;
    switch (event.type) {
      case "started":
      case "tool_call":
      case "usage":
        return;
      case "output":
        return this.#output(live, event.text);
      case "log": {
        const text = event.text.trim();
        if (text === "" || isTerminalState(task.status.state)) return;
        const message = agentText(text, task, { stream: event.stream });
        this.#status(live, { state: "working", message, timestampMs: this.#now() }, false);
        return;
      }
      case "completed":
        if (live.output !== "") task.history.push(agentText(live.output, task));
        return this.#finish(live, "completed", undefined, { exitCode: event.exitCode });
      case "failed":
        return this.#finish(live, "failed", event.message, {
          code: event.code,
          exitCode: event.exitCode,
          retryable: event.retryable,
        });
      case "cancelled":
        return this.#finish(live, "canceled", live.cancelReason ?? event.reason);
    }
  }

  #output(live: Live, output: string): void {
    const text = takeOutput(live.budget, output, this.#maxTaskBytes);
    if (text === "") return;
    const { task } = live;
    const artifactId = `${task.id}-output`;
    const first = live.output === "";
    live.output += text;
    task.artifacts = [{ artifactId, name: "output", parts: [{ kind: "text", text: live.output }] }];
    this.#emit(live, {
      kind: "artifact",
      taskId: task.id,
      contextId: task.contextId,
      artifact: { artifactId, name: "output", parts: [{ kind: "text", text }] },
      append: !first,
      lastChunk: false,
    });
  }

  #finish(
    live: Live,
    state: "completed" | "failed" | "canceled",
    text: string | undefined,
    metadata?: Record<string, unknown>,
  ): void {
    const { task } = live;
    if (isTerminalState(task.status.state)) return;
    if (live.output !== "") {
      this.#emit(live, {
        kind: "artifact",
        taskId: task.id,
        contextId: task.contextId,
        artifact: {
          artifactId: `${task.id}-output`,
          name: "output",
          parts: [{ kind: "text", text: "" }],
        },
        append: true,
        lastChunk: true,
      });
    }
    const status: A2aStatus = { state, timestampMs: this.#now() };
    if (text !== undefined) status.message = agentText(text, task, metadata);
    this.#status(live, status, true);
    live.settled.resolve();
  }

  #status(live: Live, status: A2aStatus, persist: boolean): void {
    live.task.status = status;
    if (persist && live.accepted) this.#store(live.task);
    this.#emit(live, {
      kind: "status",
      taskId: live.task.id,
      contextId: live.task.contextId,
      status,
      final: isFinalState(status.state),
    });
  }

  #store(task: A2aTask): void {
    try {
      this.#options.store.put(task);
    } catch (err) {
      this.#options.logger.error("a2a task could not be stored", { task_id: task.id, err });
    }
  }

  #emit(live: Live, update: TaskUpdate): void {
    for (const listener of [...live.listeners]) listener(update);
  }
}
