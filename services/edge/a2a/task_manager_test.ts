/**
 * The A2A task manager without sockets: runs are real ActiveRun handles the test feeds with the
 * events a node would send; tasks live in the in-memory store.
 */
import assert from "node:assert/strict";
import { createLogger } from "../../../shared/log.ts";
import type { RunEvent } from "../../../shared/run.ts";
import { ActiveRun } from "../active_run.ts";
import type { AgentRecord } from "../config.ts";
import type { RunSubmission, SubmitOptions } from "../ports.ts";
import { OverloadedError } from "../../../shared/errors.ts";
import { TenantLimiter } from "../tenants/limiter.ts";
import type { TenantRecord } from "../tenants/tenant.ts";
import { A2aRpcError } from "./rpc_error.ts";
import { A2aTaskManager, type RunSubmitter, type TaskManagerOptions } from "./task_manager.ts";
import type { ListParams } from "./dialect.ts";
import type { A2aMessage, A2aTask } from "./task_model.ts";
import { memoryTaskStore } from "./task_store.ts";

/** An ActiveRun that shows whether its consumer last said it is paused. */
class WatchedRun extends ActiveRun {
  readerPaused = false;
  override setReaderPaused(paused: boolean): void {
    if (!this.finished) this.readerPaused = paused;
    super.setReaderPaused(paused);
  }
}

/** Hands out ActiveRuns and remembers what was submitted and cancelled. */
class Runs implements RunSubmitter {
  readonly submitted: RunSubmission[] = [];
  readonly options: (SubmitOptions | undefined)[] = [];
  readonly cancelled: [string, string][] = [];
  readonly handles: WatchedRun[] = [];
  #seq = new Map<string, number>();
  #next = Promise.withResolvers<WatchedRun>();

  submitRun(submission: RunSubmission, options?: SubmitOptions): Promise<ActiveRun> {
    this.submitted.push(submission);
    this.options.push(options);
    const runId = `run_${this.handles.length + 1}`;
    const run = new WatchedRun(
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
  nextRun(): Promise<WatchedRun> {
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

function tenant(name: string, limits: Partial<TenantRecord> = {}): TenantRecord {
  return {
    name,
    keys: [`${name}-key`],
    models: ["*"],
    agents: ["*"],
    requestsPerMinute: 0,
    tokensPerMinute: 0,
    concurrentRuns: 0,
    weight: 1,
    priority: 1,
    maxQueued: 0,
    operator: false,
    ...limits,
  };
}

/** A ListTasks request for `contextId` ("" = every context). */
function listing(contextId = ""): ListParams {
  return {
    contextId,
    state: undefined,
    pageSize: 50,
    pageToken: "",
    historyLength: undefined,
    includeArtifacts: false,
    statusTimestampAfterMs: undefined,
  };
}

const alpha = tenant("alpha");
const beta = tenant("beta");
const asAlpha = { tenant: alpha };
const alphaEcho = { agentId: "echo", owner: "alpha" };
const betaEcho = { agentId: "echo", owner: "beta" };

function manager(
  service: RunSubmitter,
  options: Partial<TaskManagerOptions> = {},
) {
  const store = options.store ?? memoryTaskStore();
  const tasks = new A2aTaskManager({
    service,
    store,
    logger: createLogger("test", { level: "error" }),
    retentionMs: 60_000,
    ...options,
  });
  return { tasks, store, [Symbol.dispose]: () => tasks.close() };
}

/** Starts a task as alpha and waits until its run was admitted. */
async function started(m: ReturnType<typeof manager>, text: string, contextId = "") {
  const s = m.tasks.start(agent, message(text, contextId), asAlpha);
  await s.admitted;
  return s.task;
}

Deno.test("a task runs its agent's adapter and target and completes with the run's output", async () => {
  const runs = new Runs();
  using m = manager(runs);
  const { task } = m.tasks.start(agent, message("hello there"), asAlpha);
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
  const done: A2aTask = await m.tasks.settled(alphaEcho, task.id);
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
  const task = await started(m, "x");
  const run = await runs.nextRun();
  runs.emit(run, {
    type: "failed",
    code: "BACKEND_ERROR",
    message: "exit code 3",
    retryable: false,
    exitCode: 3,
  });
  const done = await m.tasks.settled(alphaEcho, task.id);
  assert.equal(done.status.state, "failed");
  assert.deepEqual(done.status.message?.parts, [{ kind: "text", text: "exit code 3" }]);
});

Deno.test("cancelling a task cancels its run and ends it canceled", async () => {
  const runs = new Runs();
  using m = manager(runs);
  const task = await started(m, "long job");
  const run = await runs.nextRun();
  runs.emit(run, { type: "started", nodeId: "node-1", adapter: "cli", target: "echo" });
  const canceled = await m.tasks.cancel(alphaEcho, task.id);
  assert.equal(canceled.status.state, "canceled");
  assert.equal(runs.cancelled.length, 1);
  assert.equal(runs.cancelled[0]![0], run.runId);
});

Deno.test("another agent cannot see a task, and a follow-up in the same context continues its server-generated session", async () => {
  const runs = new Runs();
  using m = manager(runs);
  const first = await started(m, "one");
  const run = await runs.nextRun();
  runs.emit(run, { type: "completed", finishReason: "stop", exitCode: 0 });
  await m.tasks.settled(alphaEcho, first.id);
  assert.equal(m.tasks.get({ agentId: "other-agent", owner: "alpha" }, first.id), undefined);
  await started(m, "two", first.contextId);
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
    owner: "alpha",
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
    tasks.start(agent, message("again", "ctx-1"), asAlpha);
    await runs.nextRun();
    assert.equal(runs.submitted[0]!.sessionId, "sess-1");
    assert.equal(runs.submitted[0]!.onSessionLost, undefined, "fails by default when lost");
    tasks.start(agent, {
      ...message("anywhere", "ctx-1"),
      metadata: { iopOnSessionLost: "start_new" },
    }, asAlpha);
    await runs.nextRun();
    assert.equal(runs.submitted[1]!.onSessionLost, "start_new");
  } finally {
    tasks.close();
  }
});

Deno.test("another tenant finds none of a task: get, settled, watch, cancel, list and a follow-up by taskId all say not found", async () => {
  const runs = new Runs();
  using m = manager(runs);
  const task = await started(m, "mine");
  await runs.nextRun();
  const notFound = (err: unknown) =>
    err instanceof A2aRpcError && err.code === -32001 &&
    err.message === `Task not found: '${task.id}'`;
  assert.equal(m.tasks.get(betaEcho, task.id), undefined);
  assert.equal(m.tasks.watch(betaEcho, task.id), undefined);
  await assert.rejects(m.tasks.settled(betaEcho, task.id), notFound);
  await assert.rejects(m.tasks.cancel(betaEcho, task.id), notFound);
  assert.throws(
    () => m.tasks.start(agent, { ...message("steal"), taskId: task.id }, { tenant: beta }),
    notFound,
  );
  const list = listing();
  assert.deepEqual(m.tasks.list(betaEcho, list).tasks, []);
  assert.deepEqual(m.tasks.list(alphaEcho, list).tasks.map((t) => t.id), [task.id]);
  assert.equal(m.tasks.get(alphaEcho, task.id)?.owner, "alpha", "the owner still sees it");
  assert.equal(runs.cancelled.length, 0, "beta's cancel reached no run");
});

Deno.test("another tenant's contextId starts a context of its own with a new session, never the owner's", async () => {
  const runs = new Runs();
  using m = manager(runs);
  const first = await started(m, "one");
  const run = await runs.nextRun();
  runs.emit(run, { type: "completed", finishReason: "stop", exitCode: 0 });
  await m.tasks.settled(alphaEcho, first.id);
  const foreign = m.tasks.start(agent, message("two", first.contextId), { tenant: beta });
  await foreign.admitted;
  await runs.nextRun();
  const [alphaSession, betaSession] = runs.submitted.map((s) => s.sessionId);
  assert.notEqual(betaSession, alphaSession, "beta does not join alpha's session");
  const list = listing(first.contextId);
  assert.deepEqual(m.tasks.list(alphaEcho, list).tasks.map((t) => t.id), [first.id]);
  assert.deepEqual(m.tasks.list(betaEcho, list).tasks.map((t) => t.id), [foreign.task.id]);
  await started(m, "three", first.contextId);
  await runs.nextRun();
  assert.equal(runs.submitted[2]!.sessionId, alphaSession, "alpha still continues its own");
});

Deno.test("tasks stored before tenants belong to the tenants default and anonymous only", () => {
  const store = memoryTaskStore();
  store.put({
    id: "old",
    contextId: "ctx-old",
    agentId: "echo",
    owner: undefined as unknown as string, // as an old store gives it back
    status: { state: "completed", timestampMs: Date.now() },
    artifacts: [],
    history: [],
    createdAtMs: Date.now(),
    runId: "run_old",
  });
  using m = manager(new Runs(), { store });
  m.tasks.recover();
  assert.equal(m.tasks.get({ agentId: "echo", owner: "default" }, "old")?.id, "old");
  assert.equal(m.tasks.get({ agentId: "echo", owner: "anonymous" }, "old")?.id, "old");
  assert.equal(m.tasks.get(alphaEcho, "old"), undefined);
});

Deno.test("start() refuses a tenant at its concurrent runs with -32000 Overloaded and 429, and the run's end frees the slot", async () => {
  const runs = new Runs();
  const limiter = new TenantLimiter();
  const service: RunSubmitter = {
    submitRun: (s, o) => runs.submitRun(s, o),
    cancelRun: (id, reason) => runs.cancelRun(id, reason),
    tenants: limiter,
  };
  using m = manager(service);
  const limited = { tenant: tenant("alpha", { concurrentRuns: 1 }) };
  const first = m.tasks.start(agent, message("one"), limited);
  await first.admitted;
  const run = await runs.nextRun();
  assert.equal(runs.options[0]?.tenant?.name, "alpha", "the run queues as its tenant");
  assert.equal(limiter.inFlight("alpha"), 1);
  const sizeBefore = m.tasks.size;
  assert.throws(() => m.tasks.start(agent, message("two"), limited), (err: unknown) => {
    assert.ok(err instanceof A2aRpcError);
    assert.equal(err.code, -32000);
    assert.equal(err.httpStatus, 429);
    assert.ok((err.retryAfterSeconds ?? 0) >= 1);
    assert.match(err.message, /^Overloaded: Tenant 'alpha' already has 1 runs in flight/);
    assert.deepEqual(err.data, {
      reason: "tenant_limit",
      limit: "concurrent_runs",
      retryAfterSeconds: err.retryAfterSeconds,
    });
    return true;
  });
  assert.equal(m.tasks.size, sizeBefore, "a refused send leaves no task");
  runs.emit(run, { type: "completed", finishReason: "stop", exitCode: 0 });
  await m.tasks.settled(alphaEcho, first.task.id);
  await run.done;
  await Promise.resolve();
  assert.equal(limiter.inFlight("alpha"), 0, "the lease ended with the run");
  await m.tasks.start(agent, message("three"), limited).admitted;
});

Deno.test("a run refused at admission rejects admitted with Overloaded and leaves no task; another failure still fails the task", async () => {
  let refusal: Error = new OverloadedError("Cannot run CLI profile 'echo' as it is full", 3);
  const service: RunSubmitter = {
    submitRun: () => Promise.reject(refusal),
    cancelRun: () => false,
  };
  using m = manager(service);
  const refused = m.tasks.start(agent, message("x"), asAlpha);
  await assert.rejects(refused.admitted, (err: unknown) => {
    assert.ok(err instanceof A2aRpcError);
    assert.equal(err.code, -32000);
    assert.equal(err.httpStatus, 429);
    assert.equal(err.retryAfterSeconds, 3);
    assert.equal(err.message, "Overloaded: Cannot run CLI profile 'echo' as it is full");
    return true;
  });
  assert.equal(m.tasks.get(alphaEcho, refused.task.id), undefined);
  assert.deepEqual(m.store.loadAll(), [], "nothing was stored");

  refusal = new Error("no node offers it");
  const failing = m.tasks.start(agent, message("y"), asAlpha);
  await failing.admitted;
  const done = await m.tasks.settled(alphaEcho, failing.task.id);
  assert.equal(done.status.state, "failed");
  assert.equal(m.store.loadAll()[0]?.status.state, "failed");
});

Deno.test("at maxTasks the oldest finished task is dropped, running ones never, and a store full of running tasks refuses", async () => {
  const runs = new Runs();
  let now = 1_000_000;
  using m = manager(runs, { maxTasks: 3, now: () => now });
  const a = await started(m, "a");
  const runA = await runs.nextRun();
  now += 10;
  const b = await started(m, "b");
  const runB = await runs.nextRun();
  now += 10;
  const c = await started(m, "c");
  await runs.nextRun();
  runs.emit(runB, { type: "completed", finishReason: "stop", exitCode: 0 });
  await m.tasks.settled(alphaEcho, b.id);
  now += 10;
  runs.emit(runA, { type: "completed", finishReason: "stop", exitCode: 0 });
  await m.tasks.settled(alphaEcho, a.id);
  // b finished first (oldest status change): it goes, a stays; c runs and stays.
  const d = await started(m, "d");
  await runs.nextRun();
  assert.equal(m.tasks.get(alphaEcho, b.id), undefined);
  assert.deepEqual(m.store.loadAll().map((t) => t.id).sort(), [a.id, c.id, d.id].sort());
  const e = await started(m, "e");
  await runs.nextRun();
  assert.equal(m.tasks.get(alphaEcho, a.id), undefined);
  assert.ok(
    m.tasks.get(alphaEcho, c.id) && m.tasks.get(alphaEcho, d.id) && m.tasks.get(alphaEcho, e.id),
  );
  assert.throws(() => m.tasks.start(agent, message("f"), asAlpha), (err: unknown) => {
    assert.ok(err instanceof A2aRpcError);
    assert.equal(err.code, -32000);
    assert.equal(err.httpStatus, 429);
    assert.match(
      err.message,
      /A2A task store is full: all 3 tasks it keeps \(a2a.max_tasks = 3\) are unfinished/,
    );
    return true;
  });
  assert.equal(m.tasks.size, 3);
});

Deno.test("retention drops finished tasks only: a task running longer than it is kept", async () => {
  const runs = new Runs();
  let now = 1_000_000;
  using m = manager(runs, { now: () => now, retentionMs: 1000 });
  const running = await started(m, "long");
  await runs.nextRun();
  const done = await started(m, "short");
  const run = await runs.nextRun();
  runs.emit(run, { type: "completed", finishReason: "stop", exitCode: 0 });
  await m.tasks.settled(alphaEcho, done.id);
  now += 5000;
  m.tasks.sweep();
  assert.equal(m.tasks.get(alphaEcho, done.id), undefined);
  assert.equal(m.tasks.get(alphaEcho, running.id)?.status.state, "working");
  assert.deepEqual(m.store.loadAll().map((t) => t.id), [running.id]);
});

Deno.test("output beyond maxTaskBytes is cut with a marker and the task still completes", async () => {
  const runs = new Runs();
  using m = manager(runs, { maxTaskBytes: 1024 });
  const task = await started(m, "talk");
  const run = await runs.nextRun();
  const watch = m.tasks.watch(alphaEcho, task.id)!;
  for (let i = 0; i < 10; i++) runs.emit(run, { type: "output", text: "é".repeat(100) + "\n" });
  runs.emit(run, { type: "completed", finishReason: "stop", exitCode: 0 });
  const done = await m.tasks.settled(alphaEcho, task.id);
  assert.equal(done.status.state, "completed");
  const part = done.artifacts[0]!.parts[0]!;
  assert.ok(part.kind === "text");
  const [head, marker] = part.text.split("\n[output truncated by the Edge");
  assert.ok(marker, "the marker ends the output");
  assert.ok(new TextEncoder().encode(head).byteLength <= 1024);
  assert.ok(new TextEncoder().encode(head).byteLength > 1000, "it kept what fit");
  assert.ok(!head!.includes("\uFFFD"), "no character was split");
  let streamed = "";
  for await (const update of watch.updates) {
    if (update.kind === "artifact") {
      const p = update.artifact.parts[0]!;
      if (p.kind === "text") streamed += p.text;
    }
  }
  assert.equal(streamed, part.text, "the stream carried the same cut output");
});

Deno.test("only the watch that drives a task pauses its run, even when it paused before dispatch", async () => {
  const runs = new Runs();
  using m = manager(runs);
  const { task, admitted } = m.tasks.start(agent, message("go"), asAlpha);
  const driver = m.tasks.watch(alphaEcho, task.id, { drivesRun: true })!;
  const follower = m.tasks.watch(alphaEcho, task.id)!;
  driver.setReaderPaused(true);
  const run = await runs.nextRun();
  await admitted;
  assert.equal(run.readerPaused, true, "the pause made before dispatch reached the run");
  follower.setReaderPaused(false);
  assert.equal(run.readerPaused, true, "a follower does not hold the run or release it");
  driver.setReaderPaused(false);
  assert.equal(run.readerPaused, false);
  follower.setReaderPaused(true);
  assert.equal(run.readerPaused, false);
  runs.emit(run, { type: "completed", finishReason: "stop", exitCode: 0 });
  await m.tasks.settled(alphaEcho, task.id);
});
