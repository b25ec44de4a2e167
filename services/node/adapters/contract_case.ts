/**
 * The adapter contract suite: behaviour every {@linkcode Adapter} must show, registered as
 * `Deno.test` cases against a fixture. Each adapter's `*_contract_test.ts` calls
 * {@linkcode adapterContract} once. Every case awaits the fixture's `cleanup()`, and Deno's op
 * and resource sanitizers (switched on per case: Deno 2.9 leaves them off by default) then prove
 * the adapter left no timer, socket, file or process behind.
 * @module
 */
import { runInput } from "../../../shared/run.ts";
import assert from "node:assert/strict";
import { IopError, isErrorCode } from "../../../shared/errors.ts";
import { kindFeatures } from "../../../shared/adapter_kinds/catalog.ts";
import type { KindFeatures } from "../../../shared/adapter_kinds/kind.ts";
import type { Adapter, EventSink, ExecutionSpec, ToolCall } from "../ports.ts";

/** What the fixture's adapter kind declares it does (`shared/adapter_kinds/`). */
function featuresOf(f: ContractFixture): KindFeatures {
  const features = kindFeatures(f.adapter.kind);
  assert.ok(features, `unknown adapter kind '${f.adapter.kind}'`);
  return features;
}

/** What the contract suite runs against: an adapter and three specs with known outcomes. */
export interface ContractFixture {
  adapter: Adapter;
  /** Completes with some output. */
  okSpec: ExecutionSpec;
  /** Fails with an IopError. */
  failSpec: ExecutionSpec;
  /** Emits a first delta, then runs long enough (several seconds) to be cancelled. */
  slowSpec: ExecutionSpec;
  /** The exact answer of `okSpec`, when it is known. */
  expectedText?: string;
  /** Closes the adapter and stops what the fixture started; called at the end of every case. */
  cleanup(): Promise<void>;
}

/** An execution spec with empty defaults (fresh run id, no messages, no limits) under `partial`. */
export function specFor(partial: Partial<ExecutionSpec>): ExecutionSpec {
  return { runId: crypto.randomUUID(), ...runInput({ adapter: "", target: "", ...partial }) };
}

/** A sink that records what it receives and can announce the first delta or vector. */
export interface RecordingSink extends EventSink {
  deltas: string[];
  toolCalls: ToolCall[];
  /** An embedding run's vectors in the order they arrived. */
  embeddings: { index: number; values: number[] }[];
  firstDelta: Promise<void>;
  firstEmbedding: Promise<void>;
}

/** Creates a {@linkcode RecordingSink}. */
export function recordingSink(): RecordingSink {
  const deltas: string[] = [];
  const toolCalls: ToolCall[] = [];
  const embeddings: { index: number; values: number[] }[] = [];
  const first = Promise.withResolvers<void>();
  const firstVector = Promise.withResolvers<void>();
  return {
    deltas,
    toolCalls,
    embeddings,
    firstDelta: first.promise,
    firstEmbedding: firstVector.promise,
    output(text) {
      deltas.push(text);
      first.resolve();
    },
    toolCall: (call) => toolCalls.push(call),
    log: () => {},
    embedding(index, values) {
      embeddings.push({ index, values });
      firstVector.resolve();
    },
    ready: () => undefined,
  };
}

const CANCEL_LIMIT_MS = 2_000;
/** How long the cancel case watches for late deltas after `execute` settled. */
const QUIET_WINDOW_MS = 200;

function never(): AbortSignal {
  return new AbortController().signal;
}

/** Registers the contract cases for one adapter, each named `${name}: <behaviour>`. */
export function adapterContract(name: string, setup: () => Promise<ContractFixture>): void {
  const contractCase = (behaviour: string, body: (f: ContractFixture) => Promise<void>) => {
    Deno.test({
      name: `${name}: ${behaviour}`,
      // Deno 2.9 runs without sanitizers unless asked; the contract relies on them.
      sanitizeOps: true,
      sanitizeResources: true,
      async fn() {
        const fixture = await setup();
        try {
          await body(fixture);
        } finally {
          // Kept-alive backend connections and the like belong to the adapter until close.
          await fixture.adapter.close?.();
          await fixture.cleanup();
        }
      },
    });
  };

  contractCase("streams deltas in order that concatenate to the full answer", async (f) => {
    const sink = recordingSink();
    await f.adapter.execute(f.okSpec, sink, { signal: never() });
    assert.ok(sink.deltas.length > 0, "okSpec produced no output delta");
    const text = sink.deltas.join("");
    if (f.expectedText !== undefined) assert.equal(text, f.expectedText);
    else assert.notEqual(text, "");
  });

  contractCase("reports token usage on completion", async (f) => {
    const result = await f.adapter.execute(f.okSpec, recordingSink(), { signal: never() });
    assert.ok(result.usage, "a completed run reports usage");
    for (const count of [result.usage.inputTokens, result.usage.outputTokens]) {
      assert.ok(Number.isInteger(count) && count >= 0, `usage count ${count} is not a count`);
    }
    assert.ok(result.usage.outputTokens > 0, "a run with output reports output tokens");
  });

  contractCase("completes with a finish reason", async (f) => {
    const result = await f.adapter.execute(f.okSpec, recordingSink(), { signal: never() });
    assert.ok(["stop", "length", "tool_calls"].includes(result.finishReason));
  });

  contractCase("fails with an IopError carrying a known code and a message", async (f) => {
    const err = await f.adapter.execute(f.failSpec, recordingSink(), { signal: never() }).then(
      () => assert.fail("failSpec completed"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof IopError, `rejected with ${String(err)}, not an IopError`);
    assert.ok(isErrorCode(err.code));
    assert.notEqual(err.message, "");
    assert.equal(typeof err.retryable, "boolean");
  });

  contractCase("cancels promptly with the signal's reason and emits nothing after", async (f) => {
    const sink = recordingSink();
    const controller = new AbortController();
    const execution = f.adapter.execute(f.slowSpec, sink, { signal: controller.signal });
    // A run that settles before its first delta must not leave the wait hanging.
    const settled = execution.then(() => true, () => true);
    const early = await Promise.race([sink.firstDelta.then(() => false), settled]);
    assert.equal(early, false, "slowSpec settled before its first delta");
    const reason = new DOMException("cancelled by the contract suite", "AbortError");
    const abortedAt = performance.now();
    controller.abort(reason);
    const err = await execution.then(() => assert.fail("slowSpec completed after abort"), (e) => e);
    const tookMs = performance.now() - abortedAt;
    assert.equal(err, reason, "execute rejects with signal.reason");
    assert.ok(tookMs < CANCEL_LIMIT_MS, `execute settled ${Math.round(tookMs)} ms after abort`);
    const settledCount = sink.deltas.length;
    await new Promise((resolve) => setTimeout(resolve, QUIET_WINDOW_MS));
    assert.equal(sink.deltas.length, settledCount, "deltas arrived after execute settled");
  });

  contractCase("embeds each input in order, or refuses embed as INVALID_ARGUMENT", async (f) => {
    const inputs = ["the quick brown fox", "jumps", "over the lazy dog"];
    const spec = { ...f.okSpec, runId: crypto.randomUUID(), messages: [], embed: { inputs } };
    const sink = recordingSink();
    const outcome = await f.adapter.execute(spec, sink, { signal: never() }).catch((e) => e);
    // Exactly what its kind declares: a kind that embeds must not refuse.
    if (!featuresOf(f).embeddings) {
      assert.ok(outcome instanceof IopError, `not refused: ${String(outcome)}`);
      assert.equal(outcome.code, "INVALID_ARGUMENT", outcome.message);
      assert.match(outcome.message, /^Cannot run as embed: /);
      assert.deepEqual(sink.embeddings, []);
      return;
    }
    assert.ok(!(outcome instanceof Error), `refused: ${String(outcome)}`);
    assert.equal(outcome.finishReason, "stop");
    assert.deepEqual(sink.embeddings.map((e) => e.index), [0, 1, 2]);
    const length = sink.embeddings[0]!.values.length;
    assert.ok(length > 0, "an embedding has values");
    for (const { values } of sink.embeddings) {
      assert.equal(values.length, length, "every vector is as long as the first");
      assert.ok(values.every((v) => Number.isFinite(v)));
    }
    assert.notDeepEqual(sink.embeddings[0]!.values, sink.embeddings[1]!.values);
    assert.deepEqual(sink.deltas, [], "an embedding run answers no text");
  });

  contractCase(
    "carries an image to its backend, or refuses image as INVALID_ARGUMENT",
    async (f) => {
      const text = "what is in this picture?";
      const spec = {
        ...f.okSpec,
        runId: crypto.randomUUID(),
        messages: [{
          role: "user" as const,
          content: text,
          parts: [
            { type: "text" as const, text },
            { type: "image" as const, url: "data:image/png;base64,iVBORw0KGgo=" },
          ],
        }],
      };
      const sink = recordingSink();
      const outcome = await f.adapter.execute(spec, sink, { signal: never() }).catch((e) => e);
      if (featuresOf(f).images === "none") {
        assert.ok(outcome instanceof IopError, `not refused: ${String(outcome)}`);
        assert.equal(outcome.code, "INVALID_ARGUMENT", outcome.message);
        assert.match(outcome.message, /^Cannot run as image \(message 0, part 1\): /);
        assert.deepEqual(sink.deltas, []);
        return;
      }
      assert.ok(!(outcome instanceof Error), `refused: ${String(outcome)}`);
      assert.ok(["stop", "length", "tool_calls"].includes(outcome.finishReason));
      assert.notEqual(sink.deltas.join(""), "", "the answer has text");
    },
  );

  contractCase("reports flat capabilities", async (f) => {
    const caps = await f.adapter.capabilities({ signal: never() });
    assert.ok(Array.isArray(caps.targets) && caps.targets.every((t) => typeof t === "string"));
    for (const flag of [caps.streaming, caps.tools, caps.sessions, caps.healthy]) {
      assert.equal(typeof flag, "boolean");
    }
    assert.equal(typeof caps.detail, "string");
  });

  contractCase("releases its resources after runs, failures and capabilities", async (f) => {
    // The sanitizers check this case: anything the adapter left open after close fails it.
    await f.adapter.capabilities({ signal: never() });
    await f.adapter.execute(f.okSpec, recordingSink(), { signal: never() });
    await f.adapter.execute(f.failSpec, recordingSink(), { signal: never() }).catch(() => {});
  });
}
