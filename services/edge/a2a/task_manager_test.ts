/**
 * The A2A task manager without sockets: runs are real ActiveRun handles the test feeds with the
 * events a node would send; tasks live in the in-memory store.
 */
import assert from "node:assert/strict";
import { createLogger } from "../../../shared/log.ts";
import type { RunEvent } from "../../../shared/run.ts";
import { ActiveRun } from "../active_run.ts";
import type { AgentRecord } from "../config.ts";
import type { RunSubmission } from "../ports.ts";
import { A2aTaskManager, type RunSubmitter } from "./task_manager.ts";
import type { A2aMessage, A2aTask } from "./task_model.ts";
import { memoryTaskStore } from "./task_store.ts";

/** Hands out ActiveRuns and remembers what was submitted and cancelled. */
class Runs implements RunSubmitter {
  readonly submitted: RunSubmission[] = [];
  readonly cancelled: [string, string][] = [];
  readonly handles: ActiveRun[] = [];
  #seq = new Map<string, number>();
  #next = Promise.withResolvers<ActiveRun>();

  submitRun(submission: RunSubmission): Promise<ActiveRun> {
    this.submitted.push(submission);
    const runId = `run_${this.handles.length + 1}`;
    const run = new ActiveRun(
      {
        runId,
        nodeId: "node-1",
        adapter: submission.adapter,
        target: submission.target,
        startedAtMs: 0,
      },
      (reason) => {
        this.cancelled.push([runId, reason]);
        this.emit(run, { type: "cancelled", reason });
      },
    );
    this.handles.push(run);
    this.#next.resolve(run);
    return Promise.resolve(run);
  }
  cancelRun(runId: string, reason = "cancelled"): boolean {
    const run = this.handles.find((h) => h.runId === runId);
    run?.cancel(reason);
    return run !== undefined;
  }
  /** Resolves with the next run submitted. */
  nextRun(): Promise<ActiveRun> {
    return this.#next.promise.then((run) => {
      this.#next = Promise.withResolvers();
      return run;
    });
  }
  emit(run: ActiveRun, event: Record<string, unknown>): void {
    const seq = (this.#seq.get(run.runId) ?? 0) + 1;
    this.#seq.set(run.runId, seq);
    run.offer({ runId: run.runId, seq, timestampMs: 0, ...event } as RunEvent);
  }
}

const agent: AgentRecord = {
  id: "echo",
  name: "Echo",
  description: "",
  kind: "a2a",
  adapter: "cli",
  target: "echo",
  skills: [],
  commands: [],
};

const message = (text: string, contextId = ""): A2aMessage => ({
  messageId: crypto.randomUUID(),
  role: "user",
  parts: [{ kind: "text", text }],
  contextId,
  taskId: "",
});

function manager(runs: Runs) {
  const store = memoryTaskStore();
  const tasks = new A2aTaskManager({
    service: runs,
    store,
    logger: createLogger("test", { level: "error" }),
    retentionMs: 60_000,
  });
  return { tasks, store, [Symbol.dispose]: () => tasks.close() };
}

Deno.test("a task runs its agent's adapter and target and completes with the run's output", async () => {
  const runs = new Runs();
  using m = manager(runs);
  const task = m.tasks.start(agent, message("hello there"));
  assert.equal(task.status.state, "submitted");
  const run = await runs.nextRun();
  assert.deepEqual(
    [runs.submitted[0]!.adapter, runs.submitted[0]!.target, runs.submitted[0]!.prompt],
    ["cli", "echo", "hello there"],
  );
  runs.emit(run, { type: "started", nodeId: "node-1", adapter: "cli", target: "echo" });
  runs.emit(run, { type: "output", text: "hello " });
  runs.emit(run, { type: "output", text: "there" });
  runs.emit(run, { type: "completed", finishReason: "stop", exitCode: 0 });
  const done: A2aTask = await m.tasks.settled("echo", task.id);
  assert.equal(done.status.state, "completed");
  assert.equal(done.runId, run.runId);
  const last = done.history.at(-1)!;
  assert.equal(last.role, "agent");
  assert.deepEqual(last.parts, [{ kind: "text", text: "hello there" }]);
  assert.equal(m.store.loadAll()[0]?.status.state, "completed", "the store holds the outcome");
});

Deno.test("a failed run fails its task with the run's message", async () => {
  const runs = new Runs();
  using m = manager(runs);
  const task = m.tasks.start(agent, message("x"));
  const run = await runs.nextRun();
  runs.emit(run, {
    type: "failed",
    code: "BACKEND_ERROR",
    message: "exit code 3",
    retryable: false,
    exitCode: 3,
  });
  const done = await m.tasks.settled("echo", task.id);
  assert.equal(done.status.state, "failed");
  assert.deepEqual(done.status.message?.parts, [{ kind: "text", text: "exit code 3" }]);
});

Deno.test("cancelling a task cancels its run and ends it canceled", async () => {
  const runs = new Runs();
  using m = manager(runs);
  const task = m.tasks.start(agent, message("long job"));
  const run = await runs.nextRun();
  runs.emit(run, { type: "started", nodeId: "node-1", adapter: "cli", target: "echo" });
  const canceled = await m.tasks.cancel("echo", task.id);
  assert.equal(canceled.status.state, "canceled");
  assert.equal(runs.cancelled.length, 1);
  assert.equal(runs.cancelled[0]![0], run.runId);
});

Deno.test("another agent cannot see a task, and a follow-up in the same context continues its server-generated session", async () => {
  const runs = new Runs();
  using m = manager(runs);
  const first = m.tasks.start(agent, message("one"));
  const run = await runs.nextRun();
  runs.emit(run, { type: "completed", finishReason: "stop", exitCode: 0 });
  await m.tasks.settled("echo", first.id);
  assert.equal(m.tasks.get("other-agent", first.id), undefined);
  m.tasks.start(agent, message("two", first.contextId));
  await runs.nextRun();
  const sessionId = runs.submitted[0]!.sessionId;
  assert.match(sessionId, /^[0-9a-f-]{36}$/, "a new context gets a server-generated session");
  assert.notEqual(sessionId, first.contextId, "never the client's context id");
  assert.equal(first.metadata?.iopSessionId, sessionId, "kept in the task's metadata");
  assert.equal(runs.submitted[1]!.sessionId, sessionId, "its follow-up continues it");
});

Deno.test("recover() re-seeds the session map from stored tasks, and a follow-up after it keeps the session", async () => {
  const runs = new Runs();
  const remembered: [string, string, number | undefined][] = [];
  const service: RunSubmitter = {
    submitRun: (s) => runs.submitRun(s),
    cancelRun: (id, reason) => runs.cancelRun(id, reason),
    sessionAffinity: { remember: (s, n, at) => void remembered.push([s, n, at]) },
  };
  const store = memoryTaskStore();
  store.put({
    id: "t1",
    contextId: "ctx-1",
    agentId: "echo",
    status: { state: "completed", timestampMs: Date.now() - 1000 },
    artifacts: [],
    history: [],
    createdAtMs: Date.now() - 2000,
    runId: "run_old",
    metadata: { iopRunId: "run_old", iopNodeId: "node-2", iopSessionId: "sess-1" },
  });
  const tasks = new A2aTaskManager({
    service,
    store,
    logger: createLogger("test", { level: "error" }),
    retentionMs: 60_000,
  });
  try {
    tasks.recover();
    assert.deepEqual(remembered.map(([s, n]) => [s, n]), [["sess-1", "node-2"]]);
    tasks.start(agent, message("again", "ctx-1"));
    await runs.nextRun();
    assert.equal(runs.submitted[0]!.sessionId, "sess-1");
    assert.equal(runs.submitted[0]!.onSessionLost, undefined, "fails by default when lost");
    tasks.start(agent, {
      ...message("anywhere", "ctx-1"),
      metadata: { iopOnSessionLost: "start_new" },
    });
    await runs.nextRun();
    assert.equal(runs.submitted[1]!.onSessionLost, "start_new");
  } finally {
    tasks.close();
  }
});
