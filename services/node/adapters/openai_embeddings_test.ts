import assert from "node:assert/strict";
import { fakeEmbedding, startFakeOpenAI } from "../../../shared/testing/fake_openai.ts";
import { recordingSink, specFor } from "./contract_case.ts";
import { never, rejectsWith, settingsFor } from "./http_adapter_cases.ts";
import { createOpenAICompatAdapter } from "./openai_compat.ts";
import { createVllmAdapter } from "./vllm.ts";

const INPUTS = ["one two", "three", "four five six"];

Deno.test("openai_compat asks /v1/embeddings for float vectors, with dimensions and the key", async () => {
  await using fake = startFakeOpenAI({ apiKey: "sk-e", defaults: { embeddingDimensions: 64 } });
  const adapter = createOpenAICompatAdapter("openai", settingsFor(fake.url, { apiKey: "sk-e" }));
  const sink = recordingSink();
  const result = await adapter.execute(
    specFor({ target: "test-model", embed: { inputs: ["x y", "z"], dimensions: 32 } }),
    sink,
    { signal: never() },
  );
  const sent = fake.requests[0]!;
  assert.equal(sent.headers.authorization, "Bearer sk-e");
  assert.deepEqual(sent.body, {
    model: "test-model",
    input: ["x y", "z"],
    encoding_format: "float",
    dimensions: 32,
  });
  assert.deepEqual(sink.embeddings.map((e) => [e.index, e.values.length]), [[0, 32], [1, 32]]);
  assert.deepEqual(result.usage, { inputTokens: 3, outputTokens: 0 });
});

Deno.test("openai_compat refuses truncate: true before any request, and sends truncate: false as OpenAI's default", async () => {
  await using fake = startFakeOpenAI();
  const adapter = createOpenAICompatAdapter("openai", settingsFor(fake.url));
  const err = await rejectsWith(
    adapter.execute(
      specFor({ target: "test-model", embed: { inputs: ["x"], truncate: true } }),
      recordingSink(),
      { signal: never() },
    ),
    "INVALID_ARGUMENT",
  );
  assert.match(err.message, /^Cannot run as truncate: openai_compat cannot cut/);
  assert.equal(err.retryable, false);
  assert.equal(fake.requests.length, 0);
  const sink = recordingSink();
  await adapter.execute(
    specFor({ target: "test-model", embed: { inputs: ["x"], truncate: false } }),
    sink,
    { signal: never() },
  );
  // The real OpenAI refuses fields it does not know; the fake does too.
  assert.deepEqual(Object.keys(fake.requests[0]!.body as object).sort(), [
    "encoding_format",
    "input",
    "model",
  ]);
  assert.equal(sink.embeddings.length, 1);
});

Deno.test("openai_compat relays vectors in input order however data lists them, base64 or not", async () => {
  // A server may list data in any order and answer base64 though floats were asked for.
  await using fake = startFakeOpenAI({ defaults: { shuffleEmbeddings: true, forceBase64: true } });
  const adapter = createOpenAICompatAdapter("openai", settingsFor(fake.url));
  const sink = recordingSink();
  await adapter.execute(specFor({ target: "test-model", embed: { inputs: INPUTS } }), sink, {
    signal: never(),
  });
  assert.equal((fake.requests[0]!.body as Record<string, unknown>).encoding_format, "float");
  assert.deepEqual(
    sink.embeddings,
    INPUTS.map((text, index) => ({ index, values: fakeEmbedding(text, 8) })),
  );
});

Deno.test("openai_compat refuses an answer whose indexes repeat or name no input", async () => {
  await using fake = startFakeOpenAI();
  const adapter = createOpenAICompatAdapter("openai", settingsFor(fake.url));
  const cases: [number[], string][] = [
    [[0, 0, 2], "two embeddings for input 0 (data[0] and data[1])"],
    [[0, 1, 3], "an embedding for index 3 of 3 inputs (data[2])"],
  ];
  for (const [indexes, what] of cases) {
    fake.setBehavior("test-model", { embeddingIndexes: indexes });
    const sink = recordingSink();
    const err = await rejectsWith(
      adapter.execute(specFor({ target: "test-model", embed: { inputs: INPUTS } }), sink, {
        signal: never(),
      }),
      "BACKEND_ERROR",
    );
    assert.equal(err.message, `Cannot relay the embeddings as the model server answered ${what}`);
    assert.deepEqual(sink.embeddings, []);
  }
});

Deno.test("vllm asks for base64 vectors and relays them as the same float32 values", async () => {
  await using fake = startFakeOpenAI({ flavor: "vllm", defaults: { embeddingDimensions: 1024 } });
  const adapter = createVllmAdapter("gpu-vllm", settingsFor(fake.url));
  const sink = recordingSink();
  await adapter.execute(specFor({ target: "test-model", embed: { inputs: INPUTS } }), sink, {
    signal: never(),
  });
  assert.equal((fake.requests[0]!.body as Record<string, unknown>).encoding_format, "base64");
  assert.deepEqual(
    sink.embeddings,
    INPUTS.map((text, index) => ({ index, values: fakeEmbedding(text, 1024) })),
  );
});

Deno.test("openai_compat and vllm refuse an embedding run's sampling options before any request", async () => {
  for (const kind of ["openai_compat", "vllm"] as const) {
    await using fake = startFakeOpenAI({ flavor: kind === "vllm" ? "vllm" : "openai" });
    const adapter = kind === "vllm"
      ? createVllmAdapter("v", settingsFor(fake.url))
      : createOpenAICompatAdapter("o", settingsFor(fake.url));
    const err = await rejectsWith(
      adapter.execute(
        specFor({
          target: "test-model",
          embed: { inputs: ["a"] },
          sampling: { extra: { num_ctx: 4096 } },
        }),
        recordingSink(),
        { signal: never() },
      ),
      "INVALID_ARGUMENT",
    );
    assert.equal(
      err.message,
      `Cannot run as sampling: ${kind} cannot pass the option 'num_ctx' to its embeddings API ` +
        "(it has no such field)",
    );
    assert.equal(fake.requests.length, 0, kind);
  }
});
