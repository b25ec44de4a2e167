import assert from "node:assert/strict";
import { Registry } from "prom-client";
import { createRunMetrics } from "./node_metrics.ts";
import { createLogger } from "../../shared/log.ts";
import { isTerminal, type RunEvent, type RunInput, runInput } from "../../shared/run.ts";
import { cliAdapterFactory } from "./adapters/cli.ts";
import { mockAdapterFactory, mockEmbedding } from "./adapters/mock.ts";
import { buildAdapterRegistry } from "./adapters/registry.ts";
import { NodeCore } from "./node.ts";
import { DEFAULT_NODE_POLICY, type NodePolicy } from "./policy.ts";
import type { AdapterConfig, MockSettings } from "./ports.ts";
import { openRunStore, WRITE_BEHIND_MS } from "./store/sqlite_store.ts";

const quiet = createLogger("test", { level: "error", writer: () => {} });

const mock = (settings: Partial<MockSettings> = {}): AdapterConfig => ({
  name: "mock",
  kind: "mock",
  enabled: true,
  settings: {
    tokens: 4,
    tokenDelayMs: 0,
    startDelayMs: 0,
    failWith: "",
    failRetryable: false,
    embeddingDimensions: 8,
    ...settings,
  },
});

/** What the tests here push: mock adapters, and CLI profiles running `sh` anywhere. */
const TEST_POLICY: NodePolicy = {
  adapterKinds: ["mock", "cli", "ollama"],
  cli: { commands: ["sh"], cwd: ["/"] },
  apiKeyEnv: [],
  backendHosts: ["127.0.0.1"],
  isDefault: false,
};

/** A NodeCore with the real adapters and a real SQLite file in a temp directory. */
async function nodeWith(
  configs: AdapterConfig[],
  options: { policy?: NodePolicy; logger?: typeof quiet; outputCapBytes?: number } = {},
) {
  const dir = await Deno.makeTempDir({ prefix: "iop_node_core_" });
  const path = `${dir}/history.db`;
  const cap = options.outputCapBytes !== undefined
    ? { outputCapBytes: options.outputCapBytes }
    : {};
  const store = openRunStore(path, cap);
  const registry = new Registry();
  const core = new NodeCore({
    nodeId: "n1",
    store,
    logger: options.logger ?? quiet,
    metrics: createRunMetrics(registry),
    buildAdapters: (c) =>
      buildAdapterRegistry(c, { mock: mockAdapterFactory, cli: cliAdapterFactory }),
    policy: options.policy ?? TEST_POLICY,
    ...cap,
  });
  const applied = core.applyConfig(configs);
  return {
    core,
    store,
    path,
    applied,
    registry,
    /** Starts a run and collects its events; `done` resolves after the terminal one. */
    run(runId: string, input: RunInput) {
      const events: RunEvent[] = [];
      const done = Promise.withResolvers<RunEvent[]>();
      const output = Promise.withResolvers<void>();
      core.startRun(runId, input, (event) => {
        events.push(event);
        if (event.type === "output") output.resolve();
        if (isTerminal(event)) done.resolve(events);
      });
      return { events, done: done.promise, firstOutput: output.promise };
    },
    async [Symbol.asyncDispose]() {
      await core.close();
      store.close();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

function assertWellFormed(events: RunEvent[], runId: string): void {
  assert.deepEqual(events.map((e) => e.seq), events.map((_, i) => i + 1), "seq runs 1, 2, 3…");
  assert.ok(events.every((e) => e.runId === runId));
  assert.equal(events.filter(isTerminal).length, 1, "exactly one terminal event");
  assert.ok(isTerminal(events.at(-1)!), "the terminal event is the last one");
  for (let i = 1; i < events.length; i++) {
    assert.ok(events[i]!.timestampMs >= events[i - 1]!.timestampMs);
  }
}

Deno.test("a mock run emits started, outputs, usage and one completed, numbered from 1", async () => {
  await using node = await nodeWith([mock()]);
  const events = await node.run(
    "r1",
    runInput({ adapter: "mock", target: "x", prompt: "hi there" }),
  )
    .done;
  assertWellFormed(events, "r1");
  assert.deepEqual(events.map((e) => e.type), [
    "started",
    "output",
    "output",
    "output",
    "output",
    "usage",
    "completed",
  ]);
  assert.deepEqual(events[0], {
    type: "started",
    nodeId: "n1",
    adapter: "mock",
    target: "x",
    runId: "r1",
    seq: 1,
    timestampMs: events[0]!.timestampMs,
  });
  const text = events.map((e) => e.type === "output" ? e.text : "").join("");
  assert.equal(text, "hi there tok2 tok3");
  const last = events.at(-1)!;
  assert.equal(last.type, "completed");
  if (last.type === "completed") {
    assert.deepEqual(last.usage, { inputTokens: 2, outputTokens: 4 });
    assert.equal(last.finishReason, "stop");
  }
});

Deno.test("an embedding run emits one embedding per input in order, then usage and completed", async () => {
  await using node = await nodeWith([mock({ embeddingDimensions: 16 })]);
  const input = runInput({
    adapter: "mock",
    target: "x",
    embed: { inputs: ["alpha beta", "gamma", "delta"] },
  });
  const events = await node.run("e1", input).done;
  assertWellFormed(events, "e1");
  assert.deepEqual(events.map((e) => e.type), [
    "started",
    "embedding",
    "embedding",
    "embedding",
    "usage",
    "completed",
  ]);
  const vectors = events.flatMap((e) => e.type === "embedding" ? [e] : []);
  assert.deepEqual(vectors.map((e) => e.index), [0, 1, 2]);
  assert.deepEqual(vectors[1]!.values, mockEmbedding("gamma", 16));
  const last = events.at(-1)!;
  assert.ok(last.type === "completed");
  assert.deepEqual(last.usage, { inputTokens: 4, outputTokens: 0 });
  assert.equal(last.finishReason, "stop");
  const [row] = node.core.history(1);
  assert.equal(row?.status, "completed");
  assert.equal(row?.outputSummary, "3 embeddings × 16");
  assert.deepEqual(row?.usage, { inputTokens: 4, outputTokens: 0 });
  assert.ok(row!.firstOutputAtMs! >= row!.startedAtMs);
  assert.deepEqual(node.core.runOutput("e1"), { output: "3 embeddings × 16", truncated: false });
});

Deno.test("a cancelled embedding run records the vectors it had answered", async () => {
  await using node = await nodeWith([mock({ tokenDelayMs: 10_000 })]);
  const input = runInput({ adapter: "mock", target: "x", embed: { inputs: ["a", "b"] } });
  const events: RunEvent[] = [];
  const first = Promise.withResolvers<void>();
  const done = Promise.withResolvers<void>();
  node.core.startRun("e2", input, (event) => {
    events.push(event);
    if (event.type === "embedding") first.resolve();
    if (isTerminal(event)) done.resolve();
  });
  await first.promise;
  assert.ok(node.core.cancelRun("e2", "user pressed stop"));
  await done.promise;
  assert.deepEqual(events.map((e) => e.type), ["started", "embedding", "cancelled"]);
  const [row] = node.core.history(1);
  assert.equal(row?.status, "cancelled");
  assert.equal(row?.outputSummary, "1 embedding × 8");
});

Deno.test("a run's whole output is kept beyond the summary, and cut and marked at the cap", async () => {
  await using whole = await nodeWith([mock({ tokens: 600 })]);
  const input = runInput({ adapter: "mock", target: "x", prompt: "a b" });
  const events = await whole.run("r1", input).done;
  const printed = events.map((e) => e.type === "output" ? e.text : "").join("");
  assert.ok(printed.length > 2_000, `only ${printed.length} characters printed`);
  assert.deepEqual(whole.core.runOutput("r1"), { output: printed, truncated: false });
  assert.equal(whole.core.history(1)[0]?.outputSummary, printed.slice(0, 2_000));

  await using capped = await nodeWith([mock({ tokens: 600 })], { outputCapBytes: 100 });
  await capped.run("r2", input).done;
  assert.deepEqual(capped.core.runOutput("r2"), {
    output: `${printed.slice(0, 100)}\n[output truncated at 100 bytes]\n`,
    truncated: true,
  });
});

Deno.test("a completed run is recorded in the SQLite history with timings and output", async () => {
  await using node = await nodeWith([mock()]);
  const before = Date.now();
  await node.run("r1", runInput({ adapter: "mock", target: "x", prompt: "a b" })).done;
  const [row] = node.core.history(10);
  assert.equal(row?.runId, "r1");
  assert.equal(row?.status, "completed");
  assert.equal(row?.adapter, "mock");
  assert.equal(row?.target, "x");
  assert.equal(row?.outputSummary, "a b tok2 tok3");
  assert.deepEqual(row?.usage, { inputTokens: 2, outputTokens: 4 });
  assert.ok(row!.startedAtMs >= before);
  assert.ok(row!.firstOutputAtMs! >= row!.startedAtMs);
  assert.ok(row!.finishedAtMs! >= row!.firstOutputAtMs!);
});

Deno.test("history survives reopening the SQLite file once written behind the run", async () => {
  await using node = await nodeWith([mock()]);
  await node.run("r1", runInput({ adapter: "mock", target: "x" })).done;
  await new Promise((resolve) => setTimeout(resolve, WRITE_BEHIND_MS * 3));
  const reopened = openRunStore(node.path);
  try {
    assert.deepEqual(reopened.history(5).map((r) => [r.runId, r.status]), [["r1", "completed"]]);
  } finally {
    reopened.close();
  }
});

Deno.test("cancel mid-run ends it with exactly one cancelled event and a cancelled row", async () => {
  await using node = await nodeWith([mock({ tokens: 1000, tokenDelayMs: 5 })]);
  const run = node.run("r1", runInput({ adapter: "mock", target: "x" }));
  assert.equal(node.core.inFlight, 1);
  // Cancel once output has started, i.e. genuinely mid-run.
  await run.firstOutput;
  assert.equal(node.core.cancelRun("r1", "user asked"), true);
  assert.equal(node.core.cancelRun("r1", "second ask"), true, "still running until it settles");
  const events = await run.done;
  assertWellFormed(events, "r1");
  assert.deepEqual(events.at(-1), {
    type: "cancelled",
    reason: "user asked",
    runId: "r1",
    seq: events.length,
    timestampMs: events.at(-1)!.timestampMs,
  });
  assert.ok(events.filter((e) => e.type === "output").length < 1000);
  await node.core.cancelAll("wait for settle");
  assert.equal(node.core.inFlight, 0);
  assert.equal(node.core.cancelRun("r1", "late"), false);
  const [row] = node.core.history(1);
  assert.equal(row?.status, "cancelled");
  assert.ok(row!.finishedAtMs! > 0);
});

Deno.test("a failing adapter ends the run with one failed event and an error row", async () => {
  await using node = await nodeWith([mock({ failWith: "TIMEOUT", failRetryable: true })]);
  const events = await node.run("r1", runInput({ adapter: "mock", target: "x" })).done;
  assertWellFormed(events, "r1");
  const last = events.at(-1)!;
  assert.equal(last.type, "failed");
  if (last.type === "failed") {
    assert.equal(last.code, "TIMEOUT");
    assert.equal(last.retryable, true);
  }
  const [row] = node.core.history(1);
  assert.equal(row?.status, "failed");
  assert.equal(row?.error?.code, "TIMEOUT");
  assert.equal(row?.error?.retryable, true);
});

Deno.test("a CLI run that exits non-zero fails with its exit code recorded", async () => {
  await using node = await nodeWith([{
    name: "cli",
    kind: "cli",
    enabled: true,
    settings: {
      profiles: [{
        name: "bad",
        command: "sh",
        args: ["-c", "echo out; echo oops >&2; exit 3"],
        resumeArgs: [],
        env: {},
        cwd: "",
        timeoutMs: 0,
        description: "",
      }],
    },
  }]);
  const events = await node.run("r1", runInput({ adapter: "cli", target: "bad" })).done;
  assertWellFormed(events, "r1");
  assert.ok(events.some((e) => e.type === "output" && e.text === "out\n"));
  assert.ok(events.some((e) => e.type === "log" && e.stream === "stderr" && /oops/.test(e.text)));
  const last = events.at(-1)!;
  assert.equal(last.type === "failed" && last.exitCode, 3);
  const [row] = node.core.history(1);
  assert.equal(row?.status, "failed");
  assert.equal(row?.exitCode, 3);
  assert.match(row?.error?.message ?? "", /exited with code 3: oops/);
});

Deno.test("an unknown adapter fails at once with NOT_FOUND and is not recorded", async () => {
  await using node = await nodeWith([mock()]);
  const events = await node.run("r1", runInput({ adapter: "ollama", target: "m" })).done;
  assertWellFormed(events, "r1");
  assert.equal(events.length, 1);
  assert.equal(events[0]!.type === "failed" && events[0]!.code, "NOT_FOUND");
  assert.deepEqual(node.core.history(10), []);
});

Deno.test("a node that has no config yet fails runs with UNAVAILABLE", () => {
  const store = openRunStore(":memory:");
  const core = new NodeCore({
    nodeId: "n1",
    store,
    logger: quiet,
    buildAdapters: (c) => buildAdapterRegistry(c, { mock: mockAdapterFactory }),
    policy: DEFAULT_NODE_POLICY,
  });
  const events: RunEvent[] = [];
  core.startRun("r1", runInput({ adapter: "mock", target: "x" }), (e) => events.push(e));
  assert.equal(events.length, 1);
  assert.equal(events[0]!.type === "failed" && events[0]!.code, "UNAVAILABLE");
  store.close();
});

Deno.test("a run id already running is refused without disturbing the first run", async () => {
  await using node = await nodeWith([mock({ tokens: 3, tokenDelayMs: 10 })]);
  const first = node.run("r1", runInput({ adapter: "mock", target: "x" }));
  const dup = await node.run("r1", runInput({ adapter: "mock", target: "x" })).done;
  assert.equal(dup.length, 1);
  assert.equal(dup[0]!.type === "failed" && dup[0]!.code, "INVALID_ARGUMENT");
  const events = await first.done;
  assertWellFormed(events, "r1");
  assert.equal(events.at(-1)!.type, "completed");
});

Deno.test("a run id the history already holds is refused and leaves nothing in flight", async () => {
  await using node = await nodeWith([mock({ tokens: 1, tokenDelayMs: 0 })]);
  await node.run("r1", runInput({ adapter: "mock", target: "x" })).done;
  while (node.core.inFlight > 0) await new Promise((resolve) => setTimeout(resolve, 0));
  const again = await node.run("r1", runInput({ adapter: "mock", target: "x" })).done;
  assert.deepEqual(again.map((e) => e.type), ["failed"]);
  const failed = again[0]!;
  assert.ok(failed.type === "failed" && failed.code === "INVALID_ARGUMENT");
  assert.match(failed.message, /already recorded/);
  assert.equal(node.core.inFlight, 0);
});

Deno.test("the node refuses no run for its run count: every run the Edge sends starts", async () => {
  await using node = await nodeWith([mock({ tokens: 2, tokenDelayMs: 20 })]);
  const runs = ["r1", "r2", "r3", "r4"].map((id) =>
    node.run(id, runInput({ adapter: "mock", target: "x" }))
  );
  assert.equal(node.core.inFlight, 4, "all four run at once");
  for (const run of runs) assert.equal((await run.done).at(-1)!.type, "completed");
});

Deno.test("history is newest first and honours its limit", async () => {
  await using node = await nodeWith([mock()]);
  for (const id of ["r1", "r2", "r3"]) {
    await node.run(id, runInput({ adapter: "mock", target: "x" })).done;
    // Distinct start times so that the order is decided by time, not by insertion.
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
  assert.deepEqual(node.core.history(2).map((r) => r.runId), ["r3", "r2"]);
  assert.deepEqual(node.core.history(0).map((r) => r.runId), ["r3"], "limit clamps to at least 1");
});

Deno.test("cancelAll stops every run and resolves once all have ended", async () => {
  await using node = await nodeWith([mock({ tokens: 1000, tokenDelayMs: 10 })]);
  const a = node.run("a", runInput({ adapter: "mock", target: "x" }));
  const b = node.run("b", runInput({ adapter: "mock", target: "x" }));
  await node.core.cancelAll("node stopping");
  assert.equal(node.core.inFlight, 0);
  for (const run of [a, b]) {
    assert.deepEqual((await run.done).at(-1)!.type, "cancelled");
  }
  assert.deepEqual(node.core.history(5).map((r) => r.status), ["cancelled", "cancelled"]);
});

Deno.test("applyConfig reports rejected adapters and capabilities lists the built ones", async () => {
  await using node = await nodeWith([
    mock(),
    { ...mock(), name: "mock" },
    {
      name: "x",
      kind: "ollama",
      enabled: true,
      settings: { baseUrl: "http://127.0.0.1:1", apiKeyEnv: "" },
    } as unknown as AdapterConfig,
  ]);
  assert.deepEqual(node.applied.adapters, []);
  assert.match(node.applied.rejected["mock"] ?? "", /used by 2 enabled adapters/);
  assert.match(node.applied.rejected["x"] ?? "", /unknown adapter kind 'ollama'/);
  const applied = node.core.applyConfig([mock()]);
  assert.deepEqual(applied, { adapters: ["mock"], rejected: {} });
  const caps = await node.core.capabilities();
  assert.deepEqual(caps.map((c) => [c.name, c.kind, c.healthy]), [["mock", "mock", true]]);
});

Deno.test("run metrics count finished runs by status and track runs in flight", async () => {
  await using node = await nodeWith([mock({ tokens: 1000, tokenDelayMs: 5 })]);
  const slow = node.run("r1", runInput({ adapter: "mock", target: "x" }));
  await slow.firstOutput;
  const inFlight = async () =>
    (await node.registry.getSingleMetric("iop_node_runs_in_flight")!.get()).values[0]?.value;
  assert.equal(await inFlight(), 1);
  node.core.cancelRun("r1", "enough");
  await slow.done;
  await node.run("r2", runInput({ adapter: "mock", target: "x", metadata: { "mock.tokens": "2" } }))
    .done;
  await node.core.cancelAll("settle");
  const text = await node.registry.metrics();
  assert.match(text, /^iop_node_runs_total\{status="cancelled"\} 1$/m);
  assert.match(text, /^iop_node_runs_total\{status="completed"\} 1$/m);
  assert.match(text, /^iop_node_run_duration_seconds_count\{status="completed"\} 1$/m);
  assert.equal(await inFlight(), 0);
});

const cliRunning = (command: string): AdapterConfig => ({
  name: "cli",
  kind: "cli",
  enabled: true,
  settings: {
    profiles: [{
      name: "x",
      command,
      args: ["-c", "echo hi"],
      resumeArgs: [],
      env: {},
      cwd: "",
      timeoutMs: 0,
      description: "",
    }],
  },
});

Deno.test("an adapter outside the node policy is refused and logged; a run on it says why while the others keep serving", async () => {
  const lines: string[] = [];
  const logger = createLogger("test", { level: "warn", writer: (line) => lines.push(line) });
  await using node = await nodeWith([mock(), cliRunning("bash")], { logger });
  const reason =
    "profiles[0].command: 'bash' is not allowed on this node (policy.cli.commands allows: sh)";
  assert.deepEqual(node.applied, { adapters: ["mock"], rejected: { cli: reason } });
  const logged = lines.map((l) => JSON.parse(l)).filter((l) =>
    l.msg === "adapter refused by node policy"
  );
  assert.deepEqual(logged.map((l) => [l.level, l.adapter, l.reason]), [["warn", "cli", reason]]);

  const refused = await node.run("r1", runInput({ adapter: "cli", target: "x" })).done;
  assertWellFormed(refused, "r1");
  const failed = refused[0]!;
  assert.ok(failed.type === "failed");
  assert.equal(failed.code, "NOT_FOUND");
  assert.equal(failed.message, `Cannot run as this node refused adapter 'cli': ${reason}`);
  const served = await node.run("r2", runInput({ adapter: "mock", target: "x" })).done;
  assert.equal(served.at(-1)!.type, "completed");
});

Deno.test("a node without a policy section builds mock adapters only and says where to allow more", async () => {
  await using node = await nodeWith([mock(), cliRunning("sh")], {
    policy: DEFAULT_NODE_POLICY,
  });
  assert.deepEqual(node.applied.adapters, ["mock"]);
  assert.equal(
    node.applied.rejected["cli"],
    "kind: 'cli' is not allowed on this node " +
      "(policy.adapter_kinds allows: mock; node.yaml has no policy section)",
  );
});
