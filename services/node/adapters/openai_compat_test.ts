import assert from "node:assert/strict";
import { createLogger } from "../../../shared/log.ts";
import { startFakeOpenAI } from "../../../shared/testing/fake_openai.ts";
import { recordingSink, specFor } from "./contract_case.ts";
import { httpAdapterCases, never, rejectsWith, settingsFor } from "./http_adapter_cases.ts";
import { createOpenAICompatAdapter } from "./openai_compat.ts";

httpAdapterCases("openai_compat", {
  model: "test-model",
  embedPath: "/v1/embeddings",
  startFake: () => startFakeOpenAI(),
  create: (settings, options) => createOpenAICompatAdapter("openai", settings, options),
});

const chat = (partial: Parameters<typeof specFor>[0] = {}) =>
  specFor({
    adapter: "openai",
    target: "test-model",
    messages: [{ role: "system", content: "be brief" }, { role: "user", content: "say hello" }],
    ...partial,
  });

Deno.test("openai_compat streams SSE deltas in order and reports usage from the usage chunk", async () => {
  await using fake = startFakeOpenAI({ defaults: { reply: "Hello big world" } });
  const adapter = createOpenAICompatAdapter("openai", settingsFor(fake.url + "/v1"));
  const sink = recordingSink();
  const result = await adapter.execute(chat(), sink, { signal: never() });
  assert.deepEqual(sink.deltas, ["Hello", " big", " world"]);
  assert.deepEqual(result, { finishReason: "stop", usage: { inputTokens: 4, outputTokens: 3 } });
  const body = fake.requests[0]!.body as Record<string, unknown>;
  assert.equal(fake.requests[0]!.path, "/v1/chat/completions");
  assert.equal(body.stream, true);
  assert.deepEqual(body.stream_options, { include_usage: true });
  assert.equal(adapter.kind, "openai_compat");
});

Deno.test("openai_compat sends sampling fields and only OpenAI's extras, warning about the rest", async () => {
  await using fake = startFakeOpenAI();
  const lines: Record<string, unknown>[] = [];
  const logger = createLogger("test", { writer: (l) => lines.push(JSON.parse(l)) });
  const adapter = createOpenAICompatAdapter("openai", settingsFor(fake.url), { logger });
  await adapter.execute(
    chat({
      sampling: {
        temperature: 0,
        topP: 0.5,
        maxTokens: 9,
        stop: ["x"],
        seed: 1,
        extra: { frequency_penalty: 0.5, num_ctx: 4096, repeat_penalty: 1.1, top_k: 40 },
      },
    }),
    recordingSink(),
    { signal: never() },
  );
  const body = fake.requests[0]!.body as Record<string, unknown>;
  assert.deepEqual(
    [body.temperature, body.top_p, body.max_tokens, body.stop, body.seed, body.frequency_penalty],
    [0, 0.5, 9, ["x"], 1, 0.5],
  );
  // Real OpenAI refuses unknown fields: Ollama-only options never reach it.
  for (const key of ["num_ctx", "repeat_penalty", "repetition_penalty", "top_k"]) {
    assert.ok(!(key in body), `${key} reached the backend`);
  }
  const warn = lines.find((l) => l.msg === "sampling options dropped");
  assert.equal(warn?.level, "warn");
  assert.equal(warn?.options, "num_ctx,repeat_penalty,top_k");
});

Deno.test("openai_compat sends response_format, tool_choice and parallel_tool_calls as OpenAI defines them", async () => {
  await using fake = startFakeOpenAI();
  const adapter = createOpenAICompatAdapter("openai", settingsFor(fake.url));
  const tools = [{ name: "get_weather", description: "", parameters: { type: "object" } }];
  const schema = { type: "object", properties: { a: { type: "string" } }, required: ["a"] };
  await adapter.execute(
    chat({
      tools,
      toolChoice: { function: "get_weather" },
      parallelToolCalls: false,
      outputFormat: { type: "json_schema", name: "answer", schema, strict: true },
    }),
    recordingSink(),
    { signal: never() },
  );
  await adapter.execute(
    chat({ tools, toolChoice: "required", outputFormat: { type: "json_object" } }),
    recordingSink(),
    { signal: never() },
  );
  await adapter.execute(chat(), recordingSink(), { signal: never() });
  const [named, required, plain] = fake.requests.map((r) => r.body as Record<string, unknown>);
  assert.deepEqual(named!.response_format, {
    type: "json_schema",
    json_schema: { name: "answer", schema, strict: true },
  });
  assert.deepEqual(named!.tool_choice, { type: "function", function: { name: "get_weather" } });
  assert.equal(named!.parallel_tool_calls, false);
  assert.deepEqual(required!.response_format, { type: "json_object" });
  assert.equal(required!.tool_choice, "required");
  assert.ok(!("parallel_tool_calls" in required!));
  for (const key of ["response_format", "tool_choice", "parallel_tool_calls"]) {
    assert.ok(!(key in plain!), `${key} sent unasked`);
  }
});

Deno.test("openai_compat extras never replace a field the adapter sets", async () => {
  await using fake = startFakeOpenAI();
  const adapter = createOpenAICompatAdapter("openai", settingsFor(fake.url));
  await adapter.execute(
    chat({ sampling: { extra: { model: "other", messages: [], stream: false } } }),
    recordingSink(),
    { signal: never() },
  );
  const body = fake.requests[0]!.body as Record<string, unknown>;
  assert.equal(body.model, "test-model");
  assert.equal(body.stream, true);
  assert.equal((body.messages as unknown[]).length, 2);
});

Deno.test("openai_compat refuses a tool result without the id of its call, before any request", async () => {
  await using fake = startFakeOpenAI();
  const adapter = createOpenAICompatAdapter("openai", settingsFor(fake.url));
  await assert.rejects(
    adapter.execute(
      chat({ messages: [{ role: "user", content: "x" }, { role: "tool", content: "{}" }] }),
      recordingSink(),
      { signal: never() },
    ),
    {
      name: "IopError",
      code: "INVALID_ARGUMENT",
      message:
        /^Cannot run as tool_result \(message 1\): openai_compat needs the id of the tool call/,
    },
  );
  assert.equal(fake.requests.length, 0);
});

Deno.test("openai_compat turns a prompt-only spec into one user message", async () => {
  await using fake = startFakeOpenAI();
  const adapter = createOpenAICompatAdapter("openai", settingsFor(fake.url));
  await adapter.execute(specFor({ target: "test-model", prompt: "hi" }), recordingSink(), {
    signal: never(),
  });
  assert.deepEqual((fake.requests[0]!.body as { messages: unknown }).messages, [
    { role: "user", content: "hi" },
  ]);
});

Deno.test("openai_compat asked for the whole answer uses a non-streaming completion", async () => {
  await using fake = startFakeOpenAI({ defaults: { reply: "all at once" } });
  const adapter = createOpenAICompatAdapter("openai", settingsFor(fake.url));
  const sink = recordingSink();
  const result = await adapter.execute(chat({ wholeAnswer: true }), sink, {
    signal: never(),
  });
  const body = fake.requests[0]!.body as Record<string, unknown>;
  assert.equal(body.stream, false);
  assert.equal(body.stream_options, undefined);
  assert.deepEqual(sink.deltas, ["all at once"]);
  assert.deepEqual(result, { finishReason: "stop", usage: { inputTokens: 4, outputTokens: 3 } });
});

Deno.test("openai_compat forwards tool call deltas and finishes with tool_calls", async () => {
  await using fake = startFakeOpenAI({
    defaults: { reply: "", toolCalls: [{ name: "lookup", arguments: { q: "deno" } }] },
  });
  const adapter = createOpenAICompatAdapter("openai", settingsFor(fake.url));
  const sink = recordingSink();
  const tool = { name: "lookup", description: "Search", parameters: { type: "object" } };
  const result = await adapter.execute(chat({ tools: [tool] }), sink, { signal: never() });
  assert.equal(result.finishReason, "tool_calls");
  assert.equal(sink.toolCalls[0]!.name, "lookup");
  assert.match(sink.toolCalls[0]!.id, /^call_/);
  assert.ok(sink.toolCalls.length > 1, "arguments arrive in several deltas");
  assert.equal(sink.toolCalls.map((c) => c.arguments).join(""), '{"q":"deno"}');
  assert.ok(sink.toolCalls.every((c) => c.index === 0));
  const sent = (fake.requests[0]!.body as { tools: unknown[] }).tools;
  assert.deepEqual(sent, [{ type: "function", function: { ...tool } }]);
});

Deno.test("openai_compat keeps the tool calls of a whole answer apart by their position", async () => {
  // A non-streamed answer's message.tool_calls carry no index, unlike a stream's deltas.
  await using fake = startFakeOpenAI({
    defaults: {
      reply: "",
      toolCalls: [
        { name: "lookup", arguments: { q: "deno" } },
        { name: "fetch", arguments: { url: "https://deno.com" } },
      ],
    },
  });
  const adapter = createOpenAICompatAdapter("openai", settingsFor(fake.url));
  const sink = recordingSink();
  const tools = ["lookup", "fetch"].map((name) => ({ name, description: "", parameters: {} }));
  const result = await adapter.execute(chat({ tools, wholeAnswer: true }), sink, {
    signal: never(),
  });
  assert.equal(result.finishReason, "tool_calls");
  assert.deepEqual(sink.toolCalls.map((c) => [c.index, c.name, c.arguments]), [
    [0, "lookup", '{"q":"deno"}'],
    [1, "fetch", '{"url":"https://deno.com"}'],
  ]);
  assert.notEqual(sink.toolCalls[0]!.id, sink.toolCalls[1]!.id);
});

Deno.test("openai_compat sends tool results with tool_call_id and earlier calls in wire shape", async () => {
  await using fake = startFakeOpenAI();
  const adapter = createOpenAICompatAdapter("openai", settingsFor(fake.url));
  const call = { index: 0, id: "call_1", name: "lookup", arguments: "{}" };
  await adapter.execute(
    chat({
      messages: [
        { role: "assistant", content: "", toolCalls: [call] },
        { role: "tool", content: "found", toolCallId: "call_1" },
      ],
    }),
    recordingSink(),
    { signal: never() },
  );
  assert.deepEqual((fake.requests[0]!.body as { messages: unknown }).messages, [
    {
      role: "assistant",
      content: "",
      tool_calls: [{
        id: "call_1",
        type: "function",
        function: { name: "lookup", arguments: "{}" },
      }],
    },
    { role: "tool", content: "found", tool_call_id: "call_1" },
  ]);
});

Deno.test("openai_compat reports finish reason length when max_tokens cuts the answer", async () => {
  await using fake = startFakeOpenAI({ defaults: { tokens: 10 } });
  const adapter = createOpenAICompatAdapter("openai", settingsFor(fake.url));
  const result = await adapter.execute(chat({ sampling: { maxTokens: 3 } }), recordingSink(), {
    signal: never(),
  });
  assert.equal(result.finishReason, "length");
  assert.equal(result.usage?.outputTokens, 3);
});

Deno.test("openai_compat sends the key from apiKeyEnv as a Bearer token", async () => {
  await using fake = startFakeOpenAI({ apiKey: "sk-from-env-123" });
  Deno.env.set("IOP_TEST_OPENAI_KEY", "sk-from-env-123");
  try {
    const adapter = createOpenAICompatAdapter(
      "openai",
      settingsFor(fake.url, { apiKeyEnv: "IOP_TEST_OPENAI_KEY" }),
    );
    await adapter.execute(chat(), recordingSink(), { signal: never() });
    assert.equal(fake.requests[0]!.headers.authorization, "Bearer sk-from-env-123");
    assert.deepEqual((await adapter.capabilities({ signal: never() })).targets, ["test-model"]);
  } finally {
    Deno.env.delete("IOP_TEST_OPENAI_KEY");
  }
});

Deno.test("openai_compat rejects a wrong key as UNAUTHENTICATED and never logs the key", async () => {
  const secret = "sk-super-secret-key-9f8e7d";
  await using fake = startFakeOpenAI({ apiKey: "sk-the-right-one" });
  const lines: string[] = [];
  const logger = createLogger("test", { level: "debug", writer: (l) => lines.push(l) });
  const adapter = createOpenAICompatAdapter("openai", settingsFor(fake.url, { apiKey: secret }), {
    logger,
  });
  const err = await rejectsWith(
    adapter.execute(chat(), recordingSink(), { signal: never() }),
    "UNAUTHENTICATED",
  );
  assert.match(err.message, /Incorrect API key/);
  await adapter.capabilities({ signal: never() });
  assert.ok(lines.length >= 2, "debug lines were written");
  for (const line of lines) assert.ok(!line.includes(secret), `key leaked into log: ${line}`);
  assert.equal(fake.requests[0]!.headers.authorization, `Bearer ${secret}`);
});

Deno.test("openai_compat removes the key from a backend message that echoes it", async () => {
  const secret = "sk-echoed-secret-55";
  await using fake = startFakeOpenAI({
    defaults: { errorStatus: 400, errorMessage: `invalid header Bearer ${secret}` },
  });
  const lines: string[] = [];
  const logger = createLogger("test", { level: "debug", writer: (l) => lines.push(l) });
  const adapter = createOpenAICompatAdapter("openai", settingsFor(fake.url, { apiKey: secret }), {
    logger,
  });
  const err = await rejectsWith(
    adapter.execute(chat(), recordingSink(), { signal: never() }),
    "INVALID_ARGUMENT",
  );
  assert.equal(err.message, "invalid header Bearer [redacted]");
  assert.ok(lines.every((l) => !l.includes(secret)));
});

Deno.test("openai_compat capabilities list /v1/models and fall back to configured models", async () => {
  await using fake = startFakeOpenAI({ models: ["a", "b"] });
  const adapter = createOpenAICompatAdapter("openai", settingsFor(fake.url));
  const caps = await adapter.capabilities({ signal: never() });
  assert.deepEqual(caps.targets, ["a", "b"]);
  assert.equal(caps.healthy, true);
  await using locked = startFakeOpenAI({ apiKey: "k" });
  const denied = createOpenAICompatAdapter("o", settingsFor(locked.url, { models: ["fallback"] }));
  const fallback = await denied.capabilities({ signal: never() });
  assert.deepEqual(fallback.targets, ["fallback"]);
  assert.equal(fallback.healthy, false);
  assert.match(fallback.detail, /401/);
});

Deno.test("openai_compat sends a message with images as OpenAI's content parts, in order", async () => {
  await using fake = startFakeOpenAI({ defaults: { reply: "two cats" } });
  const adapter = createOpenAICompatAdapter("openai", settingsFor(fake.url));
  const sink = recordingSink();
  const result = await adapter.execute(
    chat({
      messages: [{
        role: "user",
        content: "compare\nplease",
        parts: [
          { type: "text", text: "compare" },
          { type: "image", url: "https://example.com/a.png", detail: "high" },
          { type: "image", url: "data:image/png;base64,iVBORw0KGgo=" },
          { type: "text", text: "please" },
        ],
      }, { role: "assistant", content: "ok" }],
    }),
    sink,
    { signal: never() },
  );
  assert.deepEqual((fake.requests[0]!.body as { messages: unknown }).messages, [
    {
      role: "user",
      content: [
        { type: "text", text: "compare" },
        { type: "image_url", image_url: { url: "https://example.com/a.png", detail: "high" } },
        { type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0KGgo=" } },
        { type: "text", text: "please" },
      ],
    },
    { role: "assistant", content: "ok" },
  ]);
  assert.equal(sink.deltas.join(""), "two cats");
  // Only the text parts are prompt words.
  assert.equal(result.usage?.inputTokens, 3);
});
