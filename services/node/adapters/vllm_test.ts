import assert from "node:assert/strict";
import { createLogger } from "../../../shared/log.ts";
import { fakeEmbedding, startFakeOpenAI } from "../../../shared/testing/fake_openai.ts";
import { recordingSink, specFor } from "./contract_case.ts";
import { httpAdapterCases, never, settingsFor } from "./http_adapter_cases.ts";
import { createVllmAdapter } from "./vllm.ts";

httpAdapterCases("vllm", {
  model: "Qwen/Qwen3-8B",
  embedPath: "/v1/embeddings",
  startFake: () => startFakeOpenAI({ flavor: "vllm", models: ["Qwen/Qwen3-8B"] }),
  create: (settings, options) => createVllmAdapter("gpu-vllm", settings, options),
});

Deno.test("vllm passes top_k, min_p and repetition_penalty from sampling.extra in the body", async () => {
  await using fake = startFakeOpenAI({ flavor: "vllm", defaults: { reply: "ok then" } });
  const adapter = createVllmAdapter("gpu-vllm", settingsFor(fake.url));
  const sink = recordingSink();
  const result = await adapter.execute(
    specFor({
      target: "test-model",
      messages: [{ role: "user", content: "hi" }],
      sampling: { temperature: 0.7, extra: { top_k: 40, min_p: 0.05, repetition_penalty: 1.1 } },
    }),
    sink,
    { signal: never() },
  );
  const body = fake.requests[0]!.body as Record<string, unknown>;
  assert.deepEqual([body.top_k, body.min_p, body.repetition_penalty, body.temperature], [
    40,
    0.05,
    1.1,
    0.7,
  ]);
  assert.deepEqual(sink.deltas, ["ok", " then"]);
  assert.deepEqual(result.usage, { inputTokens: 1, outputTokens: 2 });
  assert.equal(adapter.kind, "vllm");
});

Deno.test("vllm maps Ollama's repeat_penalty to repetition_penalty and drops num_ctx", async () => {
  await using fake = startFakeOpenAI({ flavor: "vllm" });
  const adapter = createVllmAdapter("gpu-vllm", settingsFor(fake.url), {
    logger: createLogger("test", { writer: () => {} }),
  });
  await adapter.execute(
    specFor({
      target: "test-model",
      messages: [{ role: "user", content: "hi" }],
      sampling: { extra: { repeat_penalty: 1.2, num_ctx: 8192, top_k: 5 } },
    }),
    recordingSink(),
    { signal: never() },
  );
  const body = fake.requests[0]!.body as Record<string, unknown>;
  assert.equal(body.repetition_penalty, 1.2);
  assert.equal(body.top_k, 5);
  assert.ok(!("repeat_penalty" in body) && !("num_ctx" in body));
});

Deno.test("vllm is healthy while /health answers 200 and unhealthy when the engine is dead", async () => {
  await using fake = startFakeOpenAI({ flavor: "vllm", models: ["m1"] });
  const adapter = createVllmAdapter("gpu-vllm", settingsFor(fake.url + "/v1"));
  const up = await adapter.capabilities({ signal: never() });
  assert.deepEqual(up.targets, ["m1"]);
  assert.equal(up.healthy, true);
  fake.setEngineDead(true);
  const down = await adapter.capabilities({ signal: never() });
  assert.equal(down.healthy, false);
  assert.match(down.detail, /\/health answered 503/);
  assert.deepEqual(down.targets, ["m1"]);
  assert.ok(fake.requests.some((r) => r.path === "/health"));
});

Deno.test("vllm sends its api key and reads vLLM's plain Unauthorized answer", async () => {
  await using fake = startFakeOpenAI({ flavor: "vllm", apiKey: "vk-1" });
  const good = createVllmAdapter("v", settingsFor(fake.url, { apiKey: "vk-1" }));
  assert.equal((await good.capabilities({ signal: never() })).healthy, true);
  const bad = createVllmAdapter("v", settingsFor(fake.url, { apiKey: "vk-2" }));
  const err = await bad.execute(
    specFor({ target: "test-model", messages: [{ role: "user", content: "x" }] }),
    recordingSink(),
    { signal: never() },
  ).catch((e) => e);
  assert.equal(err.code, "UNAUTHENTICATED");
  assert.equal(err.message, "Unauthorized");
});

Deno.test("vllm asks for truncate_prompt_tokens -1 on truncate: true, and cuts to the model's context", async () => {
  await using fake = startFakeOpenAI({ flavor: "vllm", defaults: { contextTokens: 2 } });
  const adapter = createVllmAdapter("gpu-vllm", settingsFor(fake.url));
  const sink = recordingSink();
  const result = await adapter.execute(
    specFor({ target: "test-model", embed: { inputs: ["one two three"], truncate: true } }),
    sink,
    { signal: never() },
  );
  assert.equal((fake.requests[0]!.body as Record<string, unknown>).truncate_prompt_tokens, -1);
  // vLLM keeps the last tokens.
  assert.deepEqual(sink.embeddings, [{ index: 0, values: fakeEmbedding("two three", 8) }]);
  assert.deepEqual(result.usage, { inputTokens: 2, outputTokens: 0 });
  const err = await adapter.execute(
    specFor({ target: "test-model", embed: { inputs: ["one two three"], truncate: false } }),
    recordingSink(),
    { signal: never() },
  ).catch((e) => e);
  assert.equal(err.code, "INVALID_ARGUMENT");
  assert.match(err.message, /maximum context length is 2 tokens/);
  assert.ok(!("truncate_prompt_tokens" in (fake.requests[1]!.body as object)));
});
