/**
 * The embedding cases every model-server adapter must pass against its fake server (part of
 * `httpAdapterCases`): the vectors in input order with the asked length, a model that cannot
 * shorten refused, the answer's byte cap, error mapping, cancellation, the time limits, and the
 * answer counted as the first token.
 * @module
 */
import assert from "node:assert/strict";
import { Registry } from "prom-client";
import {
  type FakeBehavior,
  fakeEmbedding,
  shortenEmbedding,
} from "../../../shared/testing/fake_model_server.ts";
import type { ExecutionSpec } from "../ports.ts";
import { createAdapterMetrics } from "./adapter_metrics.ts";
import { recordingSink } from "./contract_case.ts";
import {
  type CaseRunner,
  type HttpAdapterSubject,
  never,
  rejectsWith,
  within,
} from "./http_adapter_cases.ts";

const EMBED_INPUTS = ["one two", "three", "four five six"];

/** Registers the embedding cases for one adapter, each named `${name}: <behaviour>`. */
export function embeddingCases(name: string, subject: HttpAdapterSubject, run: CaseRunner): void {
  const embedSpec = (partial: Partial<ExecutionSpec["embed"]> = {}): Partial<ExecutionSpec> => ({
    messages: [],
    embed: { inputs: EMBED_INPUTS, ...partial },
  });

  Deno.test(
    `${name}: embeds each input in order, with the backend's input token count`,
    run({ embeddingDimensions: 16 }, {}, async ({ fake, adapter, spec }) => {
      const sink = recordingSink();
      const result = await adapter.execute(spec, sink, { signal: never() });
      assert.deepEqual(
        sink.embeddings,
        EMBED_INPUTS.map((text, index) => ({ index, values: fakeEmbedding(text, 16) })),
      );
      assert.deepEqual(result, {
        finishReason: "stop",
        usage: { inputTokens: 6, outputTokens: 0 },
      });
      assert.deepEqual(sink.deltas, []);
      assert.equal(fake.requests.length, 1);
      assert.equal(fake.requests[0]!.path, subject.embedPath);
      assert.deepEqual((fake.requests[0]!.body as { input: unknown }).input, EMBED_INPUTS);
    }, embedSpec()),
  );

  Deno.test(
    `${name}: embeds to the dimensions asked for`,
    run({ embeddingDimensions: 16 }, {}, async ({ fake, adapter, spec }) => {
      const sink = recordingSink();
      await adapter.execute(spec, sink, { signal: never() });
      assert.deepEqual(
        sink.embeddings.map((e) => e.values),
        EMBED_INPUTS.map((text) => shortenEmbedding(fakeEmbedding(text, 16), 4)),
      );
      assert.equal((fake.requests[0]!.body as { dimensions: unknown }).dimensions, 4);
    }, embedSpec({ dimensions: 4 })),
  );

  Deno.test(
    `${name}: a model that cannot shorten its vectors is refused, not relayed as asked`,
    run({ embeddingDimensions: 8, ignoreDimensions: true }, {}, async ({ adapter, spec }) => {
      // The fake answers 8 values whatever `dimensions` says, as such a model does.
      const sink = recordingSink();
      const err = await rejectsWith(
        adapter.execute(spec, sink, { signal: never() }),
        "INVALID_ARGUMENT",
      );
      assert.match(
        err.message,
        /^Cannot embed as dimensions: .+ answered 8 values per vector, not the 4 asked for$/,
      );
      assert.deepEqual(sink.embeddings, []);
    }, embedSpec({ dimensions: 4 })),
  );

  Deno.test(
    `${name}: an embeddings answer over the byte cap fails the run, with no vector relayed`,
    run(
      { embeddingDimensions: 256 },
      {},
      async ({ fake, adapter, spec }) => {
        const sink = recordingSink();
        const err = await rejectsWith(
          adapter.execute(spec, sink, { signal: never() }),
          "BACKEND_ERROR",
        );
        assert.equal(err.message, "Cannot read the embeddings answer as it exceeds 2000 bytes");
        assert.deepEqual(sink.embeddings, []);
        await within(fake.requests[0]!.ended, 1000, "the answer's end");
      },
      embedSpec(),
      { maxEmbeddingsAnswerBytes: 2000 },
    ),
  );

  Deno.test(
    `${name}: an embedding run's answer counts as its first token`,
    async () => {
      const registry = new Registry();
      await run(
        {},
        { firstTokenTimeoutMs: 60_000 },
        async ({ adapter, spec }) => {
          await adapter.execute(spec, recordingSink(), { signal: never() });
        },
        embedSpec(),
        { metrics: createAdapterMetrics(registry) },
      )();
      assert.match(
        await registry.metrics(),
        /iop_node_adapter_time_to_first_token_seconds_count\{adapter_kind="[a-z_]+"\} 1/,
      );
    },
  );

  const errorCases: [string, FakeBehavior, string, boolean][] = [
    [
      "500 as BACKEND_ERROR, retryable",
      { errorStatus: 500, errorMessage: "kaput" },
      "BACKEND_ERROR",
      true,
    ],
    [
      "400 as INVALID_ARGUMENT",
      { errorStatus: 400, errorMessage: "bad input" },
      "INVALID_ARGUMENT",
      false,
    ],
    ["503 as OVERLOADED, retryable", { overloaded: true }, "OVERLOADED", true],
  ];
  for (const [label, behavior, code, retryable] of errorCases) {
    Deno.test(
      `${name}: an embedding run maps HTTP ${label}, with no vector relayed`,
      run(behavior, {}, async ({ adapter, spec }) => {
        const sink = recordingSink();
        const err = await rejectsWith(adapter.execute(spec, sink, { signal: never() }), code);
        assert.equal(err.retryable, retryable);
        if (behavior.errorMessage) assert.equal(err.message, behavior.errorMessage);
        assert.deepEqual(sink.embeddings, []);
      }, embedSpec()),
    );
  }

  Deno.test(
    `${name}: an embedding run on an unknown model fails with NOT_FOUND`,
    run({}, {}, async ({ adapter, spec }) => {
      const err = await rejectsWith(
        adapter.execute({ ...spec, target: "no-such-model" }, recordingSink(), { signal: never() }),
        "NOT_FOUND",
      );
      assert.match(err.message, /no-such-model/);
    }, embedSpec()),
  );

  Deno.test(
    `${name}: cancel of an embedding run closes the server's connection within 1 s`,
    run({ firstTokenDelayMs: 10_000 }, {}, async ({ fake, adapter, spec }) => {
      const sink = recordingSink();
      const controller = new AbortController();
      const execution = adapter.execute(spec, sink, { signal: controller.signal });
      const received = await fake.log.waitForRequest(1);
      const reason = new DOMException("user pressed stop", "AbortError");
      controller.abort(reason);
      const err = await within(execution.then(() => undefined, (e) => e), 1000, "execute");
      assert.equal(err, reason, "execute rejects with the signal's reason");
      assert.equal(await within(received.ended, 1000, "the server noticing"), "client_closed");
      assert.deepEqual(sink.embeddings, []);
    }, embedSpec()),
  );

  const limitCases: [string, Partial<Parameters<CaseRunner>[1]>, Partial<ExecutionSpec>][] = [
    ["firstTokenTimeoutMs", { firstTokenTimeoutMs: 150 }, {}],
    ["spec.timeoutMs", {}, { timeoutMs: 150 }],
  ];
  for (const [limit, limits, extra] of limitCases) {
    Deno.test(
      `${name}: ${limit} bounds an embedding run's whole answer`,
      run(
        { firstTokenDelayMs: 5_000 },
        limits,
        async ({ fake, adapter, spec }) => {
          const err = await rejectsWith(
            adapter.execute(spec, recordingSink(), { signal: never() }),
            "TIMEOUT",
          );
          assert.match(err.message, /(firstTokenTimeoutMs|totalTimeoutMs)=150/);
          assert.equal(
            await within(fake.requests[0]!.ended, 1000, "the server noticing"),
            "client_closed",
          );
        },
        { ...embedSpec(), ...extra },
      ),
    );
  }
}
