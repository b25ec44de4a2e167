import assert from "node:assert/strict";
import { createLogger } from "../../../shared/log.ts";
import { startFakeOllama } from "../../../shared/testing/fake_ollama.ts";
import { recordingSink, specFor } from "./contract_case.ts";
import { httpAdapterCases, never, rejectsWith, settingsFor } from "./http_adapter_cases.ts";
import { createOllamaAdapter } from "./ollama.ts";

httpAdapterCases("ollama", {
  model: "llama3.2:latest",
  embedPath: "/api/embed",
  startFake: () => startFakeOllama(),
  create: (settings, options) => createOllamaAdapter("ollama", settings, options),
});

const chat = (partial: Parameters<typeof specFor>[0] = {}) =>
  specFor({
    adapter: "ollama",
    target: "llama3.2",
    messages: [
      { role: "developer", content: "be brief" },
      { role: "user", content: "say hello" },
    ],
    ...partial,
  });

Deno.test("ollama streams /api/chat deltas in order and reports the backend's usage", async () => {
  await using fake = startFakeOllama({ defaults: { reply: "Hello big world" } });
  const adapter = createOllamaAdapter("ollama", settingsFor(fake.url));
  const sink = recordingSink();
  const result = await adapter.execute(chat(), sink, { signal: never() });
  assert.deepEqual(sink.deltas, ["Hello", " big", " world"]);
  assert.deepEqual(result, { finishReason: "stop", usage: { inputTokens: 4, outputTokens: 3 } });
  const sent = fake.requests[0]!;
  assert.equal(sent.path, "/api/chat");
  assert.deepEqual((sent.body as { messages: unknown }).messages, [
    { role: "system", content: "be brief" },
    { role: "user", content: "say hello" },
  ]);
});

Deno.test("ollama sends sampling as options, with extra fields merged in", async () => {
  await using fake = startFakeOllama();
  const adapter = createOllamaAdapter("ollama", settingsFor(fake.url));
  await adapter.execute(
    chat({
      sampling: {
        temperature: 0.2,
        topP: 0.9,
        maxTokens: 50,
        stop: ["END"],
        seed: 7,
        extra: { top_k: 20 },
      },
    }),
    recordingSink(),
    { signal: never() },
  );
  const body = fake.requests[0]!.body as Record<string, unknown>;
  assert.equal(body.stream, true);
  assert.deepEqual(body.options, {
    temperature: 0.2,
    top_p: 0.9,
    num_predict: 50,
    stop: ["END"],
    seed: 7,
    top_k: 20,
  });
});

Deno.test("ollama runs prompt-only specs through /api/generate", async () => {
  await using fake = startFakeOllama({ defaults: { reply: "Paris" } });
  const adapter = createOllamaAdapter("ollama", settingsFor(fake.url));
  const sink = recordingSink();
  const result = await adapter.execute(
    specFor({ target: "llama3.2", prompt: "Capital of France?" }),
    sink,
    { signal: never() },
  );
  assert.equal(fake.requests[0]!.path, "/api/generate");
  assert.equal((fake.requests[0]!.body as { prompt: string }).prompt, "Capital of France?");
  assert.deepEqual(sink.deltas, ["Paris"]);
  assert.equal(result.usage?.inputTokens, 3);
});

Deno.test("ollama reports finish reason length when num_predict cuts the answer", async () => {
  await using fake = startFakeOllama({ defaults: { tokens: 10 } });
  const adapter = createOllamaAdapter("ollama", settingsFor(fake.url));
  const sink = recordingSink();
  const result = await adapter.execute(chat({ sampling: { maxTokens: 2 } }), sink, {
    signal: never(),
  });
  assert.equal(result.finishReason, "length");
  assert.equal(sink.deltas.join(""), "tok0 tok1");
});

Deno.test("ollama asked for the whole answer asks for one object and still emits the text", async () => {
  await using fake = startFakeOllama({ defaults: { reply: "all at once" } });
  const adapter = createOllamaAdapter("ollama", settingsFor(fake.url));
  const sink = recordingSink();
  const result = await adapter.execute(chat({ wholeAnswer: true }), sink, {
    signal: never(),
  });
  assert.equal((fake.requests[0]!.body as { stream: boolean }).stream, false);
  assert.deepEqual(sink.deltas, ["all at once"]);
  assert.deepEqual(result.usage, { inputTokens: 4, outputTokens: 3 });
});

Deno.test("ollama maps tools out and tool calls back, finishing with tool_calls", async () => {
  await using fake = startFakeOllama({
    defaults: { reply: "", toolCalls: [{ name: "get_weather", arguments: { city: "Oslo" } }] },
  });
  const adapter = createOllamaAdapter("ollama", settingsFor(fake.url));
  const sink = recordingSink();
  const tool = { name: "get_weather", description: "Weather", parameters: { type: "object" } };
  const result = await adapter.execute(chat({ tools: [tool] }), sink, { signal: never() });
  assert.deepEqual((fake.requests[0]!.body as { tools: unknown }).tools, [
    {
      type: "function",
      function: { name: "get_weather", description: "Weather", parameters: { type: "object" } },
    },
  ]);
  assert.equal(result.finishReason, "tool_calls");
  assert.equal(sink.toolCalls.length, 1);
  assert.equal(sink.toolCalls[0]!.name, "get_weather");
  assert.deepEqual(JSON.parse(sink.toolCalls[0]!.arguments), { city: "Oslo" });
  assert.match(sink.toolCalls[0]!.id, /^call_/);
});

Deno.test("ollama sends earlier tool calls and tool results back in Ollama's shape", async () => {
  await using fake = startFakeOllama();
  const adapter = createOllamaAdapter("ollama", settingsFor(fake.url));
  await adapter.execute(
    chat({
      messages: [
        { role: "user", content: "weather?" },
        {
          role: "assistant",
          content: "",
          toolCalls: [{ index: 0, id: "c1", name: "get_weather", arguments: '{"city":"Oslo"}' }],
        },
        { role: "tool", content: "rainy", toolCallId: "c1", name: "get_weather" },
      ],
    }),
    recordingSink(),
    { signal: never() },
  );
  const messages = (fake.requests[0]!.body as { messages: unknown[] }).messages;
  assert.deepEqual(messages[1], {
    role: "assistant",
    content: "",
    tool_calls: [{ function: { name: "get_weather", arguments: { city: "Oslo" } } }],
  });
  assert.deepEqual(messages[2], { role: "tool", content: "rainy", tool_name: "get_weather" });
});

Deno.test("ollama fails with BACKEND_ERROR when the stream ends without done", async () => {
  await using server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    () =>
      new Response(
        '{"model":"m","created_at":"x","message":{"role":"assistant","content":"Hi"},"done":false}\n',
        { headers: { "content-type": "application/x-ndjson" } },
      ),
  );
  const adapter = createOllamaAdapter(
    "ollama",
    settingsFor(`http://127.0.0.1:${server.addr.port}`),
  );
  const sink = recordingSink();
  const err = await rejectsWith(
    adapter.execute(chat(), sink, { signal: never() }),
    "BACKEND_ERROR",
  );
  assert.match(err.message, /stream ended early/);
  assert.deepEqual(sink.deltas, ["Hi"]);
});

Deno.test("ollama capabilities list the installed models and the server version", async () => {
  await using fake = startFakeOllama({ models: ["llama3.2", "qwen3:8b"], version: "0.9.0" });
  const adapter = createOllamaAdapter("ollama", settingsFor(fake.url + "/"));
  const caps = await adapter.capabilities({ signal: never() });
  assert.deepEqual(caps.targets, ["llama3.2:latest", "qwen3:8b"]);
  assert.equal(caps.healthy, true);
  assert.equal(caps.streaming && caps.tools && !caps.sessions, true);
  assert.match(caps.detail, /0\.9\.0/);
});

Deno.test('ollama sends an output format as format: "json" or the schema, on chat and generate', async () => {
  await using fake = startFakeOllama();
  const adapter = createOllamaAdapter("ollama", settingsFor(fake.url));
  const schema = { type: "object", properties: { n: { type: "integer" } } };
  const run = (partial: Parameters<typeof specFor>[0]) =>
    adapter.execute(chat(partial), recordingSink(), { signal: never() });
  await run({ outputFormat: { type: "json_object" } });
  await run({ outputFormat: { type: "json_schema", name: "response", schema, strict: true } });
  await run({ messages: [], prompt: "hi", outputFormat: { type: "json_object" } });
  await run({});
  const bodies = fake.requests.map((r) => r.body as Record<string, unknown>);
  assert.deepEqual(bodies.map((b) => b.format), ["json", schema, "json", undefined]);
  assert.equal(fake.requests[2]!.path, "/api/generate");
  assert.ok(!("format" in bodies[3]!));
});

Deno.test("ollama honours tool_choice none by not offering the tools, and refuses required", async () => {
  await using fake = startFakeOllama();
  const adapter = createOllamaAdapter("ollama", settingsFor(fake.url));
  const tools = [{ name: "f", description: "", parameters: { type: "object" } }];
  await adapter.execute(chat({ tools, toolChoice: "none" }), recordingSink(), {
    signal: never(),
  });
  await adapter.execute(chat({ tools, toolChoice: "auto" }), recordingSink(), {
    signal: never(),
  });
  const [none, auto] = fake.requests.map((r) => r.body as Record<string, unknown>);
  assert.ok(!("tools" in none!));
  assert.equal((auto!.tools as unknown[]).length, 1);
  for (const toolChoice of ["required", { function: "f" }] as const) {
    await assert.rejects(
      adapter.execute(chat({ tools, toolChoice }), recordingSink(), { signal: never() }),
      { name: "IopError", code: "INVALID_ARGUMENT", message: /^Cannot run as tool_choice: ollama/ },
    );
  }
  await assert.rejects(
    adapter.execute(chat({ tools, parallelToolCalls: false }), recordingSink(), {
      signal: never(),
    }),
    { code: "INVALID_ARGUMENT", message: /parallel_tool_calls: ollama cannot limit/ },
  );
  assert.equal(fake.requests.length, 2);
});

Deno.test("ollama names a tool result by the call it answers when it carries only the call id", async () => {
  await using fake = startFakeOllama();
  const adapter = createOllamaAdapter("ollama", settingsFor(fake.url));
  await adapter.execute(
    chat({
      messages: [
        { role: "user", content: "weather?" },
        {
          role: "assistant",
          content: "",
          toolCalls: [{ index: 0, id: "call_9", name: "get_weather", arguments: '{"c":"Oslo"}' }],
        },
        { role: "tool", content: "sunny", toolCallId: "call_9" },
      ],
    }),
    recordingSink(),
    { signal: never() },
  );
  const messages = (fake.requests[0]!.body as { messages: Record<string, unknown>[] }).messages;
  assert.deepEqual(messages[1]!.tool_calls, [
    { function: { name: "get_weather", arguments: { c: "Oslo" } } },
  ]);
  assert.deepEqual(messages[2], { role: "tool", content: "sunny", tool_name: "get_weather" });
});

Deno.test("ollama keeps its own options from sampling.extra and never lets one replace a mapped field", async () => {
  await using fake = startFakeOllama();
  const adapter = createOllamaAdapter("ollama", settingsFor(fake.url), {
    logger: createLogger("test", { writer: () => {} }),
  });
  await adapter.execute(
    chat({
      sampling: {
        temperature: 0.1,
        extra: { num_ctx: 4096, repeat_penalty: 1.1, temperature: 2, repetition_penalty: 1 },
      },
    }),
    recordingSink(),
    { signal: never() },
  );
  assert.deepEqual((fake.requests[0]!.body as Record<string, unknown>).options, {
    temperature: 0.1,
    num_ctx: 4096,
    repeat_penalty: 1.1,
  });
});

const PNG = "iVBORw0KGgo=";

Deno.test("ollama sends image parts as the base64 of their data: URLs beside the joined text", async () => {
  await using fake = startFakeOllama({ defaults: { reply: "a cat" } });
  const adapter = createOllamaAdapter("ollama", settingsFor(fake.url));
  const sink = recordingSink();
  await adapter.execute(
    chat({
      messages: [{
        role: "user",
        content: "what is this?\nand this?",
        parts: [
          { type: "text", text: "what is this?" },
          { type: "image", url: `data:image/png;base64,${PNG}` },
          { type: "text", text: "and this?" },
          { type: "image", url: `data:image/jpeg;base64,${PNG}`, detail: "low" },
        ],
      }],
    }),
    sink,
    { signal: never() },
  );
  assert.deepEqual((fake.requests[0]!.body as { messages: unknown }).messages, [
    { role: "user", content: "what is this?\nand this?", images: [PNG, PNG] },
  ]);
  assert.equal(sink.deltas.join(""), "a cat");
});

Deno.test("ollama refuses an image link, and a data: URL that is not base64, before any request", async () => {
  await using fake = startFakeOllama();
  const adapter = createOllamaAdapter("ollama", settingsFor(fake.url));
  const withImage = (url: string) =>
    chat({
      messages: [{
        role: "user",
        content: "look",
        parts: [{ type: "text", text: "look" }, { type: "image", url }],
      }],
    });
  const link = await rejectsWith(
    adapter.execute(withImage("https://example.com/cat.png"), recordingSink(), {
      signal: never(),
    }),
    "INVALID_ARGUMENT",
  );
  assert.match(
    link.message,
    /^Cannot run as image \(message 0, part 1\): ollama takes images as data: URLs/,
  );
  const plain = await rejectsWith(
    adapter.execute(withImage("data:text/plain,hello"), recordingSink(), { signal: never() }),
    "INVALID_ARGUMENT",
  );
  assert.match(
    plain.message,
    /^Cannot run as image \(message 0, part 1\): ollama takes images as base64/,
  );
  assert.equal(fake.requests.length, 0);
});
