/**
 * End-to-end proof of the model path: runs submitted at the Edge travel over the real node wire
 * to a Node, whose ollama, vllm and openai_compat adapters drive fake model servers over HTTP;
 * deltas stream back in order, cancels close the backend connection, a dying backend fails the
 * run, and the Node's SQLite history and capabilities report what happened.
 */
import assert from "node:assert/strict";
import { type RunEvent, runInput } from "../shared/run.ts";
import {
  type AdapterName,
  ADAPTERS,
  chatPath,
  collect,
  MODEL_BEHAVIOR,
  type ModelPathStack,
  NODE_ID,
  REPLY,
  REPLY_PIECES,
  requestOn,
  startModelPathStack,
  within,
} from "./model_path_helpers.ts";
import type { RunSubmission } from "../services/edge/ports.ts";

const ALL: AdapterName[] = ["ollama", "vllm", "openai"];
const QUESTION = "What is the answer to everything?";
const sanitize = { sanitizeOps: true, sanitizeResources: true };

/** A direct `adapter + target` submission with one user message. */
function submission(adapter: AdapterName, target: string, wholeAnswer = false): RunSubmission {
  return runInput({
    adapter,
    target,
    messages: [{ role: "user", content: QUESTION }],
    wholeAnswer,
  });
}

function outputs(events: RunEvent[]): string[] {
  return events.flatMap((e) => (e.type === "output" ? [e.text] : []));
}

/** Runs `body` against a fresh stack and always stops it. */
async function withStack(body: (stack: ModelPathStack) => Promise<void>): Promise<void> {
  const stack = await startModelPathStack();
  try {
    await body(stack);
  } finally {
    await stack.close();
  }
}

for (const adapter of ALL) {
  const { model } = ADAPTERS[adapter];
  Deno.test({
    name: `a run submitted at the Edge to the ${adapter} adapter streams the fake's deltas back ` +
      `in order and completes with usage`,
    ...sanitize,
    fn: () =>
      withStack(async (stack) => {
        const fake = stack.fakes[adapter];
        const handle = await stack.service.submitRun(submission(adapter, model));
        assert.equal(handle.nodeId, NODE_ID);
        const { events, terminal } = await collect(handle);

        assert.deepEqual(events.map((e) => e.seq), events.map((_, i) => i + 1));
        const started = events[0];
        assert.equal(started?.type, "started");
        assert.deepEqual(
          started.type === "started" && [started.nodeId, started.adapter, started.target],
          [NODE_ID, adapter, model],
        );
        assert.deepEqual(outputs(events), REPLY_PIECES);
        assert.equal(outputs(events).join(""), REPLY);
        const expectedUsage = { inputTokens: QUESTION.split(" ").length, outputTokens: 4 };
        const usage = events.find((e) => e.type === "usage");
        assert.deepEqual(usage?.type === "usage" && usage.usage, expectedUsage);
        assert.equal(terminal.type, "completed", JSON.stringify(terminal));
        assert.equal(terminal.type === "completed" && terminal.finishReason, "stop");
        assert.deepEqual(terminal.type === "completed" && terminal.usage, expectedUsage);

        // The fake saw one streaming request for the model with the conversation, and answered
        // it to the end.
        const request = await requestOn(fake, chatPath(adapter));
        const body = request.body as Record<string, unknown>;
        assert.equal(body.model, model);
        assert.equal(body.stream, true);
        assert.deepEqual(body.messages, [{ role: "user", content: QUESTION }]);
        if (adapter !== "ollama") {
          assert.deepEqual(body.stream_options, { include_usage: true });
        }
        if (adapter === "openai") {
          assert.equal(request.headers["authorization"], `Bearer ${stack.apiKey}`);
        }
        assert.equal(await request.ended, "completed");

        const kind = adapter === "openai" ? "openai_compat" : adapter;
        const metrics = await stack.metrics.metrics();
        assert.match(
          metrics,
          new RegExp(
            `iop_node_adapter_tokens_total\\{adapter_kind="${kind}",direction="output"\\} 4`,
          ),
        );
      }),
  });
}

/** The three moments a cancel can land in, and how each run is set up. */
const MOMENTS: {
  moment: string;
  target: string;
  wholeAnswer: boolean;
  afterOutput: boolean;
}[] = [
  { moment: "while it streams", target: "slow-stream", wholeAnswer: false, afterOutput: true },
  {
    moment: "before the first token",
    target: "slow-first",
    wholeAnswer: false,
    afterOutput: false,
  },
  {
    moment: "of a non-streaming request",
    target: "slow-answer",
    wholeAnswer: true,
    afterOutput: false,
  },
];

for (const adapter of ALL) {
  for (const { moment, target, wholeAnswer, afterOutput } of MOMENTS) {
    Deno.test({
      name: `a cancel at the Edge ${moment} on ${adapter} closes the fake's connection within ` +
        `a second and ends the run cancelled`,
      ...sanitize,
      fn: () =>
        withStack(async (stack) => {
          const fake = stack.fakes[adapter];
          const handle = await stack.service.submitRun(submission(adapter, target, wholeAnswer));
          const firstOutput = Promise.withResolvers<void>();
          const reading = collect(handle, (e) => {
            if (e.type === "output") firstOutput.resolve();
          });
          const request = await requestOn(fake, chatPath(adapter));
          assert.equal((request.body as { stream?: unknown }).stream, !wholeAnswer);
          if (afterOutput) await within(firstOutput.promise, 5_000, "the first delta");

          const cancelledAt = performance.now();
          handle.cancel("user pressed stop");
          const how = await within(request.ended, 1_000, "the fake seeing the connection close");
          const closedAfterMs = performance.now() - cancelledAt;
          assert.equal(how, "client_closed");
          assert.ok(request.clientClosed);
          assert.ok(closedAfterMs < 1_000, `closed after ${closedAfterMs} ms`);

          const { events, terminal } = await reading;
          // The node confirmed the cancel itself, well before the Edge's own grace timer.
          const endedAfterMs = performance.now() - cancelledAt;
          assert.ok(endedAfterMs < 1_000, `run ended ${endedAfterMs} ms after the cancel`);
          assert.equal(terminal.type, "cancelled", JSON.stringify(terminal));
          assert.equal(terminal.type === "cancelled" && terminal.reason, "user pressed stop");
          assert.equal(outputs(events).length > 0, afterOutput);
          assert.equal(events.filter((e) => e.type === "completed").length, 0);

          const history = await stack.service.nodeCommand(NODE_ID, { type: "history", limit: 5 });
          assert.equal(history.type, "history");
          const row = history.type === "history"
            ? history.runs.find((r) => r.runId === handle.runId)
            : undefined;
          assert.equal(row?.status, "cancelled");
        }),
    });
  }
}

for (const adapter of ALL) {
  Deno.test({
    name: `a backend dropping the connection mid-stream fails the ${adapter} run with ` +
      `BACKEND_ERROR and a message, without hanging`,
    ...sanitize,
    fn: () =>
      withStack(async (stack) => {
        const handle = await stack.service.submitRun(submission(adapter, "dies"));
        const started = performance.now();
        const { events, terminal } = await collect(handle, () => {}, 3_000);
        assert.ok(performance.now() - started < 3_000);
        // The pieces sent before the crash still reached the client.
        assert.deepEqual(outputs(events), ["one", " two"]);
        assert.equal(terminal.type, "failed", JSON.stringify(terminal));
        if (terminal.type !== "failed") return;
        assert.equal(terminal.code, "BACKEND_ERROR");
        assert.match(terminal.message, /mid-stream|ended early/i);
        const request = await requestOn(stack.fakes[adapter], chatPath(adapter));
        assert.equal(await request.ended, "disconnected");
      }),
  });
}

for (const adapter of ALL) {
  Deno.test({
    name: `a backend's in-stream error fails the ${adapter} run with BACKEND_ERROR carrying ` +
      `the backend's message`,
    ...sanitize,
    fn: () =>
      withStack(async (stack) => {
        const handle = await stack.service.submitRun(submission(adapter, "fails"));
        const { events, terminal } = await collect(handle, () => {}, 3_000);
        assert.deepEqual(outputs(events), ["one", " two"]);
        assert.equal(terminal.type, "failed", JSON.stringify(terminal));
        assert.equal(terminal.type === "failed" && terminal.code, "BACKEND_ERROR");
        assert.match(
          terminal.type === "failed" ? terminal.message : "",
          /CUDA error: out of memory/,
        );
      }),
  });
}

Deno.test({
  name: "the node's history shows each model run with its status, usage and timings",
  ...sanitize,
  fn: () =>
    withStack(async (stack) => {
      const completed = new Map<string, { usage: unknown }>();
      for (const adapter of ALL) {
        const handle = await stack.service.submitRun(submission(adapter, ADAPTERS[adapter].model));
        const { terminal } = await collect(handle);
        assert.equal(terminal.type, "completed");
        completed.set(handle.runId, { usage: terminal.type === "completed" && terminal.usage });
      }
      const cancelled = await stack.service.submitRun(submission("vllm", "slow-stream"));
      const cancelledEnd = collect(cancelled, (e) => {
        if (e.type === "output") cancelled.cancel("enough");
      });
      assert.equal((await cancelledEnd).terminal.type, "cancelled");
      const failed = await stack.service.submitRun(submission("ollama", "dies"));
      assert.equal((await collect(failed)).terminal.type, "failed");

      const result = await stack.service.nodeCommand(NODE_ID, { type: "history", limit: 10 });
      assert.equal(result.type, "history");
      if (result.type !== "history") return;
      assert.equal(result.runs.length, 5);
      const byId = new Map(result.runs.map((r) => [r.runId, r]));

      for (const [runId, { usage }] of completed) {
        const row = byId.get(runId);
        assert.ok(row, `run ${runId} is in the history`);
        assert.equal(row.status, "completed");
        assert.deepEqual(row.usage, usage);
        assert.ok(row.usage.outputTokens > 0 && row.usage.inputTokens > 0);
        assert.equal(row.outputSummary, REPLY);
        assert.ok(row.startedAtMs > 0);
        assert.ok(row.firstOutputAtMs >= row.startedAtMs, "first output after the start");
        assert.ok(row.finishedAtMs >= row.firstOutputAtMs, "finish after the first output");
        assert.equal(row.errorCode, "");
      }
      const c = byId.get(cancelled.runId);
      assert.equal(c?.status, "cancelled");
      assert.equal(c.adapter, "vllm");
      assert.equal(c.target, "slow-stream");
      assert.ok(c.firstOutputAtMs >= c.startedAtMs && c.firstOutputAtMs > 0);
      assert.ok(c.finishedAtMs >= c.firstOutputAtMs);
      const f = byId.get(failed.runId);
      assert.equal(f?.status, "failed");
      assert.equal(f.errorCode, "BACKEND_ERROR");
      assert.notEqual(f.errorMessage, "");
      assert.equal(f.outputSummary, "one two");
      assert.ok(f.finishedAtMs >= f.firstOutputAtMs && f.firstOutputAtMs > 0);
      // Newest first.
      assert.equal(result.runs[0]?.runId, failed.runId);
    }),
});

Deno.test({
  name: "the capabilities command lists each fake's models as targets of a healthy adapter",
  ...sanitize,
  fn: () =>
    withStack(async (stack) => {
      const result = await stack.service.nodeCommand(NODE_ID, { type: "capabilities" });
      assert.equal(result.type, "capabilities");
      if (result.type !== "capabilities") return;
      const byName = new Map(result.adapters.map((a) => [a.name, a]));
      const extra = Object.keys(MODEL_BEHAVIOR);
      const expected = {
        ollama: { kind: "ollama", targets: ["llama3.2", ...extra].map((m) => `${m}:latest`) },
        vllm: { kind: "vllm", targets: ["test-model", ...extra] },
        openai: { kind: "openai_compat", targets: ["test-model", ...extra] },
      };
      assert.deepEqual([...byName.keys()].sort(), ["ollama", "openai", "vllm"]);
      for (const [name, want] of Object.entries(expected)) {
        const got = byName.get(name)!;
        assert.equal(got.kind, want.kind);
        assert.equal(got.healthy, true, `${name}: ${got.detail}`);
        assert.deepEqual(got.targets, want.targets);
        assert.equal(got.streaming, true);
      }

      // A vLLM whose engine died says so, while its model list is still served.
      stack.fakes.vllm.setEngineDead(true);
      const after = await stack.service.nodeCommand(NODE_ID, { type: "capabilities" });
      const vllm = after.type === "capabilities"
        ? after.adapters.find((a) => a.name === "vllm")
        : undefined;
      assert.equal(vllm?.healthy, false);
      assert.match(vllm.detail, /503/);
    }),
});
