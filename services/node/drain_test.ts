import assert from "node:assert/strict";
import { createLogger } from "../../shared/log.ts";
import { isTerminal, type RunEvent, runInput } from "../../shared/run.ts";
import { mockAdapterFactory } from "./adapters/mock.ts";
import { buildAdapterRegistry } from "./adapters/registry.ts";
import { DRAIN_TIMEOUT_REASON, drainRuns } from "./drain.ts";
import { NodeCore } from "./node.ts";
import type { Adapter, AdapterConfig } from "./ports.ts";
import { DEFAULT_NODE_POLICY } from "./policy.ts";
import { openRunStore } from "./store/sqlite_store.ts";

/**
 * A backend that never answers and ignores its cancellation (a stuck HTTP client, a process
 * that does not die): its run ends only when the test lets it.
 */
function stuckAdapter(config: AdapterConfig, release: Promise<void>): Adapter {
  return {
    name: config.name,
    kind: config.kind,
    capabilities: () =>
      Promise.resolve({
        targets: ["demo"],
        streaming: true,
        tools: false,
        sessions: false,
        healthy: true,
        detail: "",
      }),
    execute: async () => {
      await release;
      return { finishReason: "stop" };
    },
  };
}

const mock = (name: string, tokenDelayMs: number): AdapterConfig => ({
  name,
  kind: "mock",
  enabled: true,
  settings: {
    tokens: 3,
    tokenDelayMs,
    startDelayMs: 0,
    failWith: "",
    failRetryable: false,
    embeddingDimensions: 8,
  },
});

/** A real NodeCore with a real history file; adapter `stuck` ignores cancellation. */
async function node() {
  const dir = await Deno.makeTempDir({ prefix: "iop_drain_" });
  const store = openRunStore(`${dir}/history.db`);
  const unstick = Promise.withResolvers<void>();
  const core = new NodeCore({
    nodeId: "n1",
    store,
    logger: createLogger("test", { level: "error", writer: () => {} }),
    policy: { ...DEFAULT_NODE_POLICY, adapterKinds: ["mock"] },
    buildAdapters: (configs) =>
      buildAdapterRegistry(configs, {
        mock: (c) => c.name === "stuck" ? stuckAdapter(c, unstick.promise) : mockAdapterFactory(c),
      }),
  });
  core.applyConfig([mock("stuck", 0), mock("slow", 60_000), mock("quick", 1)]);
  const log: Record<string, unknown>[] = [];
  const logger = createLogger("node", {
    level: "info",
    writer: (line) => log.push(JSON.parse(line)),
  });
  return {
    core,
    log,
    logger,
    /** Starts a run on `adapter`; resolves with its terminal event. */
    run(runId: string, adapter: string): Promise<RunEvent> {
      const ended = Promise.withResolvers<RunEvent>();
      core.startRun(runId, runInput({ adapter, target: "demo", prompt: "hi" }), (event) => {
        if (isTerminal(event)) ended.resolve(event);
      });
      return ended.promise;
    },
    async [Symbol.asyncDispose]() {
      unstick.resolve();
      await core.close();
      store.close();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

const messages = (log: Record<string, unknown>[]) => log.map((l) => l.msg);

Deno.test("a run that ignores its cancellation at the drain timeout is abandoned after the grace", async () => {
  await using n = await node();
  void n.run("r1", "stuck");
  const outcome = await drainRuns({
    core: n.core,
    announce: () => {},
    timeoutMs: 1,
    cancelGraceMs: 1,
    logger: n.logger,
    signal: new AbortController().signal,
  });
  assert.equal(outcome, "abandoned");
  assert.equal(n.core.inFlight, 1);
  const last = n.log.at(-1)!;
  assert.deepEqual(
    [last.level, last.msg, last.runs_left, last.reason],
    [
      "error",
      "node stopping without the runs that did not end when cancelled",
      1,
      "their adapters ignored the cancellation",
    ],
  );
});

Deno.test("a second signal while cancelling at the drain timeout ends the wait at once", async () => {
  await using n = await node();
  void n.run("r1", "stuck");
  const stop = new AbortController();
  const drained = drainRuns({
    core: n.core,
    announce: () => {},
    timeoutMs: 1,
    // Only the second signal can end this wait.
    cancelGraceMs: 600_000,
    logger: createLogger("node", {
      level: "info",
      writer: (line) => {
        n.log.push(JSON.parse(line));
        if (line.includes("node cancelling the runs left")) stop.abort();
      },
    }),
    signal: stop.signal,
  });
  assert.equal(await drained, "abandoned");
  assert.deepEqual(n.log.at(-1)?.reason, "signal received again during the drain");
});

Deno.test("a drain whose runs a lost link cancelled says so instead of 'every run finished'", async () => {
  await using n = await node();
  const quick = n.run("r1", "quick");
  const slow = n.run("r2", "slow");
  const drained = drainRuns({
    core: n.core,
    announce: () => {},
    timeoutMs: 600_000,
    logger: n.logger,
    signal: new AbortController().signal,
  });
  assert.equal((await quick).type, "completed");
  // The link to the Edge stays down past edge.resume_grace_ms: the held runs are cancelled
  // (transport/run_ledger.ts).
  await n.core.cancelAll("link to edge lost for 30000 ms (edge.resume_grace_ms)");
  assert.equal((await slow).type, "cancelled");
  assert.equal(await drained, "drained");
  const last = n.log.at(-1)!;
  assert.deepEqual(
    [last.level, last.msg, last.completed, last.failed, last.cancelled],
    ["warn", "node drained: some runs were cancelled before they finished", 1, 0, 1],
  );
  assert.ok(!messages(n.log).includes("node drained: every run finished"));
});

Deno.test("runs that end by themselves drain cleanly, each counted", async () => {
  await using n = await node();
  const quick = n.run("r1", "quick");
  assert.equal(
    await drainRuns({
      core: n.core,
      announce: () => {},
      timeoutMs: 600_000,
      logger: n.logger,
      signal: new AbortController().signal,
    }),
    "drained",
  );
  assert.equal((await quick).type, "completed");
  assert.deepEqual(n.log.at(-1), {
    ...n.log.at(-1),
    msg: "node drained: every run finished",
    completed: 1,
    cancelled: 0,
  });
});

Deno.test("the runs left at the drain timeout are cancelled with the reason", async () => {
  await using n = await node();
  const slow = n.run("r2", "slow");
  const announced: number[] = [];
  const outcome = await drainRuns({
    core: n.core,
    announce: (ms) => announced.push(ms),
    timeoutMs: 1,
    logger: n.logger,
    signal: new AbortController().signal,
  });
  assert.equal(outcome, "timed_out");
  assert.deepEqual(announced, [1]);
  const ended = await slow;
  assert.deepEqual([ended.type, ended.type === "cancelled" && ended.reason], [
    "cancelled",
    DRAIN_TIMEOUT_REASON,
  ]);
});
