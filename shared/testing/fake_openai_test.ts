import assert from "node:assert/strict";
import OpenAI from "openai";
import {
  BEHAVIOR_HEADER,
  fakeEmbedding,
  shortenEmbedding,
  startFakeOpenAI,
} from "./fake_openai.ts";

const client = (url: string, extra: { apiKey?: string; behavior?: object } = {}) =>
  new OpenAI({
    baseURL: url + "/v1",
    apiKey: extra.apiKey ?? "sk-test",
    maxRetries: 0,
    ...(extra.behavior
      ? { defaultHeaders: { [BEHAVIOR_HEADER]: JSON.stringify(extra.behavior) } }
      : {}),
  });

const user = [{ role: "user" as const, content: "hello model" }];

Deno.test("fake OpenAI lists models for the openai client, vLLM cards included", async () => {
  await using openai = startFakeOpenAI({ models: ["gpt-x"] });
  const page = await client(openai.url).models.list();
  assert.deepEqual(page.data.map((m) => m.id), ["gpt-x"]);
  await using vllm = startFakeOpenAI({ flavor: "vllm", models: ["Qwen/Qwen3-8B"] });
  const card = (await client(vllm.url).models.list()).data[0] as unknown as Record<string, unknown>;
  assert.equal(card.owned_by, "vllm");
  assert.equal(card.root, "Qwen/Qwen3-8B");
  assert.equal(card.max_model_len, 4096);
});

Deno.test("fake OpenAI answers a non-streaming chat completion with usage", async () => {
  await using fake = startFakeOpenAI({ defaults: { reply: "Hi you" } });
  const res = await client(fake.url).chat.completions.create({
    model: "test-model",
    messages: user,
  });
  assert.equal(res.object, "chat.completion");
  assert.equal(res.choices[0]?.message.content, "Hi you");
  assert.equal(res.choices[0]?.finish_reason, "stop");
  assert.deepEqual(res.usage, { prompt_tokens: 2, completion_tokens: 2, total_tokens: 4 });
});

Deno.test("fake OpenAI streams SSE chunks in the exact order the SDK expects", async () => {
  await using fake = startFakeOpenAI({ defaults: { reply: "a b c" } });
  const stream = await client(fake.url).chat.completions.create({
    model: "test-model",
    messages: user,
    stream: true,
    stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  assert.deepEqual(chunks[0]?.choices[0]?.delta, { role: "assistant", content: "" });
  assert.deepEqual(chunks.slice(1, 4).map((c) => c.choices[0]?.delta.content), ["a", " b", " c"]);
  assert.deepEqual(chunks[4]?.choices[0]?.delta, {});
  assert.equal(chunks[4]?.choices[0]?.finish_reason, "stop");
  assert.deepEqual(chunks[5]?.choices, []);
  assert.equal(chunks[5]?.usage?.completion_tokens, 3);
  assert.equal(chunks.length, 6);
  assert.equal(new Set(chunks.map((c) => c.id)).size, 1);
  assert.equal(new Set(chunks.map((c) => c.created)).size, 1);
  const raw = await (await fetch(fake.url + "/v1/chat/completions", {
    method: "POST",
    body: JSON.stringify({ model: "test-model", messages: user, stream: true }),
  })).text();
  assert.ok(raw.endsWith("data: [DONE]\n\n"));
  assert.ok(!raw.includes('"usage"'), "usage only appears when include_usage is asked");
});

Deno.test("fake OpenAI streams tool call deltas the SDK can reassemble", async () => {
  await using fake = startFakeOpenAI({
    defaults: { reply: "", toolCalls: [{ name: "lookup", arguments: { q: "deno" } }] },
  });
  const runner = client(fake.url).chat.completions.stream({
    model: "test-model",
    messages: user,
    tools: [{ type: "function", function: { name: "lookup", parameters: { type: "object" } } }],
  });
  const final = await runner.finalChatCompletion();
  const call = final.choices[0]?.message.tool_calls?.[0];
  assert.equal(final.choices[0]?.finish_reason, "tool_calls");
  assert.ok(call?.type === "function");
  assert.equal(call.function.name, "lookup");
  assert.equal(call.function.arguments, '{"q":"deno"}');
});

Deno.test("fake OpenAI errors map to the SDK's error classes", async () => {
  await using fake = startFakeOpenAI({ apiKey: "sk-right" });
  const create = (c: OpenAI, model = "test-model") =>
    c.chat.completions.create({ model, messages: user }).catch((e) => e);
  const notFound = await create(client(fake.url, { apiKey: "sk-right" }), "missing");
  assert.ok(notFound instanceof OpenAI.NotFoundError);
  assert.equal(notFound.code, "model_not_found");
  assert.ok(
    await create(client(fake.url, { apiKey: "sk-wrong" })) instanceof OpenAI.AuthenticationError,
  );
  const limited = await create(
    client(fake.url, {
      apiKey: "sk-right",
      behavior: { errorStatus: 429, errorMessage: "slow down" },
    }),
  );
  assert.ok(limited instanceof OpenAI.RateLimitError);
  assert.match(limited.message, /slow down/);
  const busy = await create(
    client(fake.url, { apiKey: "sk-right", behavior: { overloaded: true } }),
  );
  assert.ok(busy instanceof OpenAI.InternalServerError);
  assert.equal(busy.status, 503);
});

Deno.test("fake vLLM answers 401 Unauthorized, numeric error codes, and /health", async () => {
  await using fake = startFakeOpenAI({ flavor: "vllm", apiKey: "k1" });
  const denied = await fetch(fake.url + "/v1/models");
  assert.equal(denied.status, 401);
  assert.deepEqual(await denied.json(), { error: "Unauthorized" });
  const missing = await client(fake.url, { apiKey: "k1" }).chat.completions
    .create({ model: "other", messages: user }).catch((e) => e);
  assert.ok(missing instanceof OpenAI.NotFoundError);
  assert.equal(missing.code, 404);
  const health = await fetch(fake.url + "/health");
  assert.equal(health.status, 200);
  assert.equal(await health.text(), "");
  fake.setEngineDead(true);
  const dead = await fetch(fake.url + "/health");
  await dead.body?.cancel();
  assert.equal(dead.status, 503);
  assert.equal((await (await fetch(fake.url + "/version")).json()).version, "0.11.0");
});

Deno.test("fake OpenAI mid-stream error event makes the SDK stream throw", async () => {
  await using fake = startFakeOpenAI();
  const stream = await client(fake.url, { behavior: { tokens: 5, failAfterChunks: 2 } })
    .chat.completions.create({ model: "test-model", messages: user, stream: true });
  const parts: string[] = [];
  const err = await (async () => {
    for await (const c of stream) parts.push(c.choices[0]?.delta.content ?? "");
  })().catch((e) => e);
  assert.deepEqual(parts, ["", "tok0", " tok1"]);
  assert.ok(err instanceof OpenAI.APIError);
  assert.match(err.message, /had an error/);
});

Deno.test("fake OpenAI sees the connection closed when the SDK aborts mid-stream", async () => {
  await using fake = startFakeOpenAI({ defaults: { tokens: 100, chunkDelayMs: 50 } });
  const controller = new AbortController();
  const stream = await client(fake.url).chat.completions.create(
    { model: "test-model", messages: user, stream: true },
    { signal: controller.signal },
  );
  const started = performance.now();
  const consume = (async () => {
    for await (const _ of stream) controller.abort();
  })().catch((e) => e);
  assert.equal(await fake.requests[0]?.ended, "client_closed");
  assert.ok(performance.now() - started < 1000);
  await consume;
  assert.equal(fake.log.openRequests, 0);
});

Deno.test("fake OpenAI abrupt disconnect is not a finished stream for the SDK", async () => {
  await using fake = startFakeOpenAI();
  const stream = await client(fake.url, { behavior: { tokens: 5, disconnectAfterChunks: 1 } })
    .chat.completions.create({ model: "test-model", messages: user, stream: true });
  const err = await (async () => {
    for await (const _ of stream) { /* drain */ }
  })().then(() => undefined, (e) => e);
  assert.ok(err instanceof Error);
  assert.equal(await fake.requests[0]?.ended, "disconnected");
});

Deno.test("fake OpenAI embeds for the SDK, which asks for base64 floats by default", async () => {
  await using fake = startFakeOpenAI({
    models: ["text-embedding-3-small"],
    perModel: { "text-embedding-3-small": { embeddingDimensions: 1536 } },
  });
  const res = await client(fake.url).embeddings.create({
    model: "text-embedding-3-small",
    input: ["the quick fox", "jumps"],
  });
  assert.equal((fake.requests[0]!.body as { encoding_format: string }).encoding_format, "base64");
  assert.equal(res.object, "list");
  assert.deepEqual(res.data.map((d) => [d.object, d.index]), [["embedding", 0], ["embedding", 1]]);
  assert.deepEqual(res.data[0]!.embedding, fakeEmbedding("the quick fox", 1536));
  assert.deepEqual(res.data[1]!.embedding, fakeEmbedding("jumps", 1536));
  assert.deepEqual(res.usage, { prompt_tokens: 4, total_tokens: 4 });
  const floats = await client(fake.url).embeddings.create({
    model: "text-embedding-3-small",
    input: "jumps",
    encoding_format: "float",
    dimensions: 256,
  });
  assert.deepEqual(floats.data[0]!.embedding, shortenEmbedding(fakeEmbedding("jumps", 1536), 256));
});

Deno.test("fake OpenAI refuses what OpenAI refuses on /v1/embeddings", async () => {
  await using fake = startFakeOpenAI({ defaults: { embeddingDimensions: 8, contextTokens: 3 } });
  const sdk = client(fake.url);
  const refused = async (body: Record<string, unknown>, param: string | null) => {
    const err = await sdk.embeddings.create(body as never).catch((e) => e);
    assert.ok(err instanceof OpenAI.BadRequestError, String(err));
    assert.equal(err.param, param);
  };
  await refused({ model: "test-model", input: "x", dimensions: 9 }, "dimensions");
  await refused({ model: "test-model", input: "" }, "input");
  await refused({ model: "test-model", input: "x", truncate_prompt_tokens: -1 }, null);
  await refused({ model: "test-model", input: "a b c d" }, "input");
  const missing = await sdk.embeddings.create({ model: "nope", input: "x" }).catch((e) => e);
  assert.ok(missing instanceof OpenAI.NotFoundError);
  const tokens = await sdk.embeddings.create({
    model: "test-model",
    input: [[1, 2], [3]],
    encoding_format: "float",
  });
  assert.deepEqual(tokens.usage.prompt_tokens, 3);
});

Deno.test("fake vLLM cuts embedding inputs to their last truncate_prompt_tokens words", async () => {
  await using fake = startFakeOpenAI({ flavor: "vllm", defaults: { contextTokens: 2 } });
  const post = (body: object) =>
    fetch(`${fake.url}/v1/embeddings`, { method: "POST", body: JSON.stringify(body) });
  const cut = await (await post({
    model: "test-model",
    input: ["a b c"],
    truncate_prompt_tokens: -1,
  })).json();
  assert.deepEqual(cut.data[0].embedding, fakeEmbedding("b c", 8));
  assert.equal(cut.usage.prompt_tokens, 2);
  assert.match(cut.id, /^embd-/);
  const refused = await post({ model: "test-model", input: ["a b c"] });
  assert.equal(refused.status, 400);
  const body = await refused.json();
  assert.equal(body.error.code, 400);
  assert.match(body.error.message, /maximum context length is 2 tokens/);
});

Deno.test("fake OpenAI takes chat content parts with images and records them as sent", async () => {
  await using fake = startFakeOpenAI({ defaults: { reply: "a dot" } });
  const content = [
    { type: "text" as const, text: "what is in" },
    { type: "image_url" as const, image_url: { url: "data:image/png;base64,iVBORw0KGgo=" } },
    { type: "text" as const, text: "this picture" },
  ];
  const res = await client(fake.url).chat.completions.create({
    model: "test-model",
    messages: [{ role: "user", content }],
  });
  assert.equal(res.choices[0]?.message.content, "a dot");
  assert.equal(res.usage?.prompt_tokens, 5);
  assert.deepEqual((fake.requests[0]!.body as { messages: unknown }).messages, [
    { role: "user", content },
  ]);
  const err = await client(fake.url).chat.completions.create({
    model: "test-model",
    messages: [{ role: "user", content: [{ type: "image_url", image_url: {} }] as never }],
  }).catch((e) => e);
  assert.ok(err instanceof OpenAI.BadRequestError);
  assert.equal(err.param, "messages[0].content[0]");
});
