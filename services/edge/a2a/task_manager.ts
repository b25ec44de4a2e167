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
 * @module
 */
import { AsyncQueue } from "../../../shared/async_queue.ts";
import { toIopError } from "../../../shared/errors.ts";
import type { Logger } from "../../../shared/log.ts";
import type { RunEvent } from "../../../shared/run.ts";
import type { AgentRecord } from "../config.ts";
import type { RunHandle, RunSubmission } from "../ports.ts";
import { newSessionId } from "../sessions.ts";
import type { ListParams, TaskPage } from "./dialect.ts";
import { A2aRpcError, invalidParams, RPC_CODE, taskNotFound } from "./rpc_error.ts";
import type { A2aTaskStore } from "./task_store.ts";
import {
  type A2aMessage,
  type A2aStatus,
  type A2aTask,
  agentText,
  isFinalState,
  isTerminalState,
  promptOf,
  type TaskUpdate,
  withHistory,
} from "./task_model.ts";

/** What the task manager needs from the Edge service. */
export interface RunSubmitter {
  submitRun(submission: RunSubmission): Promise<RunHandle>;
  cancelRun(runId: string, reason?: string): boolean;
  /** The Edge's session → node map, re-seeded from stored tasks; absent = not re-seeded. */
  readonly sessionAffinity?: { remember(sessionId: string, nodeId: string, atMs?: number): void };
}

/** Options of {@linkcode A2aTaskManager}. */
export interface TaskManagerOptions {
  service: RunSubmitter;
  store: A2aTaskStore;
  logger: Logger;
  /** How long a task stays readable after its last status change. */
  retentionMs: number;
  /** Defaults to Date.now. */
  now?: () => number;
}

/** A live view of one task: its state now, then every update until a final state. */
export interface TaskWatch {
  snapshot: A2aTask;
  updates: AsyncIterable<TaskUpdate>;
  /** Stops delivering updates (the client went away). */
  close(): void;
}

interface Live {
  task: A2aTask;
  listeners: Set<(update: TaskUpdate) => void>;
  output: string;
  cancelReason: string | undefined;
  settled: PromiseWithResolvers<void>;
}

const RESTART_REASON = "The Edge restarted while this task was running; its run was lost";

/** Creates, runs, watches, lists, cancels and retains A2A tasks. */
export class A2aTaskManager {
  readonly #tasks = new Map<string, Live>();
  readonly #options: TaskManagerOptions;
  readonly #now: () => number;
  readonly #sweeper: ReturnType<typeof setInterval>;

  constructor(options: TaskManagerOptions) {
    this.#options = options;
    this.#now = options.now ?? Date.now;
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
      const live = this.#live(task);
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
    if (failed > 0) {
      this.#options.logger.warn("a2a tasks left unfinished by a previous edge marked failed", {
        count: failed,
      });
    }
    return failed;
  }

  /**
   * Creates a task for `message` sent to `agent` and starts its run on the next turn, so a
   * caller may {@linkcode watch} it first. Throws A2A errors for a message that names an
   * unknown or finished task.
   */
  start(agent: AgentRecord, message: A2aMessage): A2aTask {
    let contextId = message.contextId;
    if (message.taskId !== "") {
      const existing = this.#find(agent.id, message.taskId);
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
    const sessionId = (contextId === "" ? undefined : this.#sessionOf(agent.id, contextId)) ??
      newSessionId();
    if (contextId === "") contextId = crypto.randomUUID();
    const id = crypto.randomUUID();
    const task: A2aTask = {
      id,
      contextId,
      agentId: agent.id,
      status: { state: "submitted", timestampMs: this.#now() },
      artifacts: [],
      history: [{ ...message, taskId: id, contextId }],
      createdAtMs: this.#now(),
      runId: "",
      metadata: { iopSessionId: sessionId },
    };
    const live = this.#live(task);
    this.#options.store.put(task);
    queueMicrotask(() =>
      this.#execute(live, agent, sessionId, message.metadata?.iopOnSessionLost === "start_new")
        .catch((err) => {
          this.#options.logger.error("a2a task broke", { task_id: id, err });
          this.#finish(live, "failed", `Task failed inside the Edge: ${toIopError(err).message}`);
        })
    );
    return structuredClone(task);
  }

  /** A task of `agentId` as it stands, or undefined. */
  get(agentId: string, id: string): A2aTask | undefined {
    const live = this.#find(agentId, id);
    return live ? structuredClone(live.task) : undefined;
  }

  /** Waits until the task reaches a final state and returns it. */
  async settled(agentId: string, id: string): Promise<A2aTask> {
    const live = this.#find(agentId, id);
    if (!live) throw taskNotFound(id);
    await live.settled.promise;
    return structuredClone(live.task);
  }

  /** The task as it stands plus its updates until a final state; undefined for unknown ids. */
  watch(agentId: string, id: string): TaskWatch | undefined {
    const live = this.#find(agentId, id);
    if (!live) return undefined;
    const queue = new AsyncQueue<TaskUpdate>();
    const snapshot = structuredClone(live.task);
    if (isFinalState(snapshot.status.state)) {
      queue.end();
      return { snapshot, updates: queue, close: () => {} };
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
    return { snapshot, updates: queue, close };
  }

  /** A page of this agent's tasks, most recently changed first. */
  list(agentId: string, p: ListParams): TaskPage {
    const matching = [...this.#tasks.values()].map((l) => l.task).filter((t) =>
      t.agentId === agentId &&
      (p.contextId === "" || t.contextId === p.contextId) &&
      (p.state === undefined || t.status.state === p.state) &&
      (p.statusTimestampAfterMs === undefined || t.status.timestampMs > p.statusTimestampAfterMs)
    ).sort((a, b) => b.status.timestampMs - a.status.timestampMs || b.createdAtMs - a.createdAtMs);
    let offset = 0;
    if (p.pageToken !== "") {
      offset = Number.parseInt(p.pageToken, 10);
      if (!/^\d+$/.test(p.pageToken) || offset > matching.length) {
        throw invalidParams("params.pageToken", "is not a token this server issued");
      }
    }
    const page = matching.slice(offset, offset + p.pageSize).map((t) => {
      const out = withHistory(structuredClone(t), p.historyLength);
      if (!p.includeArtifacts) out.artifacts = [];
      return out;
    });
    const next = offset + page.length;
    return {
      tasks: page,
      nextPageToken: next < matching.length ? String(next) : "",
      pageSize: p.pageSize,
      totalSize: matching.length,
    };
  }

  /**
   * Cancels a task: its run is cancelled on the node (a CLI's process group is killed) and the
   * task is returned once it is `canceled`. -32001 for unknown ids, -32002 for finished tasks.
   */
  async cancel(agentId: string, id: string): Promise<A2aTask> {
    const live = this.#find(agentId, id);
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

  /** Forgets finished tasks older than the retention period, in memory and in the store. */
  sweep(): void {
    const cutoff = this.#now() - this.#options.retentionMs;
    for (const [id, live] of this.#tasks) {
      if (isTerminalState(live.task.status.state) && live.task.status.timestampMs < cutoff) {
        this.#tasks.delete(id);
      }
    }
    this.#options.store.deleteUpdatedBefore(cutoff);
  }

  /** Stops the retention sweeper and closes the store. */
  close(): void {
    clearInterval(this.#sweeper);
    this.#options.store.close();
  }

  #find(agentId: string, id: string): Live | undefined {
    const live = this.#tasks.get(id);
    return live && live.task.agentId === agentId ? live : undefined;
  }

  #live(task: A2aTask): Live {
    const live: Live = {
      task,
      listeners: new Set(),
      output: "",
      cancelReason: undefined,
      settled: Promise.withResolvers(),
    };
    this.#tasks.set(task.id, live);
    return live;
  }

  /** The session of the latest task of `agentId` in `contextId`, if any has one. */
  #sessionOf(agentId: string, contextId: string): string | undefined {
    let latest: A2aTask | undefined;
    for (const { task } of this.#tasks.values()) {
      if (task.agentId !== agentId || task.contextId !== contextId) continue;
      if (typeof task.metadata?.iopSessionId !== "string") continue;
      if (!latest || task.createdAtMs >= latest.createdAtMs) latest = task;
    }
    return latest?.metadata?.iopSessionId as string | undefined;
  }

  async #execute(
    live: Live,
    agent: AgentRecord,
    sessionId: string,
    startNewIfLost: boolean,
  ): Promise<void> {
    const { task } = live;
    const log = this.#options.logger.with({ task_id: task.id, agent_id: agent.id });
    if (live.cancelReason !== undefined) {
      this.#finish(live, "canceled", live.cancelReason);
      return;
    }
    const prompt = promptOf(task.history[0]!);
    let handle: RunHandle;
    try {
      handle = await this.#options.service.submitRun({
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
      });
    } catch (err) {
      const e = toIopError(err);
      log.warn("a2a task could not start its run", { err: e.message, code: e.code });
      this.#finish(live, "failed", `Cannot run agent '${agent.id}': ${e.message}`, {
        code: e.code,
      });
      return;
    }
    task.runId = handle.runId;
    task.metadata = { iopRunId: handle.runId, iopNodeId: handle.nodeId, iopSessionId: sessionId };
    if (live.cancelReason !== undefined) handle.cancel(live.cancelReason);
    else this.#status(live, { state: "working", timestampMs: this.#now() }, true);
    log.debug("a2a task running", { run_id: handle.runId, node_id: handle.nodeId });
    for await (const event of handle.events()) this.#onRunEvent(live, event);
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

  #output(live: Live, text: string): void {
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
    if (persist) {
      try {
        this.#options.store.put(live.task);
      } catch (err) {
        this.#options.logger.error("a2a task could not be stored", { task_id: live.task.id, err });
      }
    }
    this.#emit(live, {
      kind: "status",
      taskId: live.task.id,
      contextId: live.task.contextId,
      status,
      final: isFinalState(status.state),
    });
  }

  #emit(live: Live, update: TaskUpdate): void {
    for (const listener of [...live.listeners]) listener(update);
  }
}
