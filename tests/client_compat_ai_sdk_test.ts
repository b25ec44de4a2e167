/**
 * The Vercel AI SDK (`ai` with `@ai-sdk/openai-compatible`), unmodified, against a real Edge whose
 * Node drives fake OpenAI-compatible and Ollama backends: each case checks what the SDK hands the
 * application and what the backend received.
 * @module
 */
import assert from "node:assert/strict";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import {
  APICallError,
  embed,
  embedMany,
  generateObject,
  generateText,
  Output,
  streamText,
  tool,
} from "ai";
import { z } from "zod";
import {
  DEFAULT_EMBEDDING_DIMENSIONS,
  fakeEmbedding,
} from "../shared/testing/fake_model_server.ts";
import {
  CHAT,
  type Fidelity,
  onlyPost,
  PARSED,
  PNG_BASE64,
  posted,
  startFidelity,
} from "./client_compat_stack.ts";

// The SDK logs its call warnings to the console; the cases assert them on the result instead.
(globalThis as { AI_SDK_LOG_WARNINGS?: boolean }).AI_SDK_LOG_WARNINGS = false;

const Weather = z.object({ city: z.string(), temp_c: z.number() });

const getWeather = tool({
  description: "Weather of a city",
  inputSchema: z.object({ city: z.string() }),
  execute: ({ city }) => `sunny in ${city}`,
});

/** The SDK's provider for the Edge, as an application would configure it. */
function edgeProvider(s: Fidelity, settings: { supportsStructuredOutputs?: boolean } = {}) {
  return createOpenAICompatible({
    baseURL: `${s.edge.url}/v1`,
    name: "iop",
    apiKey: "unused",
    includeUsage: true,
    ...settings,
  });
}

/** The vector the fake backends answer for `text`. */
function vectorOf(text: string): number[] {
  return fakeEmbedding(text, DEFAULT_EMBEDDING_DIMENSIONS);
}

/** The error a call rejected with, or a failure when it did not reject. */
async function rejection(call: Promise<unknown>): Promise<unknown> {
  return await call.then(
    () => assert.fail("expected the call to be refused"),
    (err: unknown) => err,
  );
}

Deno.test("AI SDK generateText gets the backend's answer, finish reason and usage", async () => {
  await using s = await startFidelity();
  const iop = edgeProvider(s);
  const result = await generateText({
    model: iop("cloud"),
    prompt: "Say ok",
    temperature: 0.2,
    maxOutputTokens: 32,
    maxRetries: 0,
  });
  assert.equal(result.text, "ok");
  assert.equal(result.finishReason, "stop");
  assert.equal(result.usage.outputTokens, 1);
  assert.ok((result.usage.inputTokens ?? 0) > 0, `usage: ${JSON.stringify(result.usage)}`);
  const sent = onlyPost(s.openai, CHAT);
  assert.equal(sent.model, "gpt-test");
  assert.deepEqual(sent.messages, [{ role: "user", content: "Say ok" }]);
  assert.equal(sent.temperature, 0.2);
  assert.equal(sent.max_tokens, 32);
});

Deno.test("AI SDK streamText receives the text in deltas, then the usage", async () => {
  await using s = await startFidelity();
  s.openai.setBehavior("gpt-test", { reply: "Hello from the fake backend" });
  const result = streamText({ model: edgeProvider(s)("cloud"), prompt: "Greet me", maxRetries: 0 });
  const deltas: string[] = [];
  for await (const delta of result.textStream) deltas.push(delta);
  assert.equal(deltas.join(""), "Hello from the fake backend");
  assert.ok(deltas.length > 1, `one delta only: ${JSON.stringify(deltas)}`);
  const usage = await result.usage;
  assert.equal(usage.outputTokens, 5);
  assert.ok((usage.inputTokens ?? 0) > 0, `usage: ${JSON.stringify(usage)}`);
  assert.equal(await result.finishReason, "stop");
  const sent = onlyPost(s.openai, CHAT);
  assert.equal(sent.stream, true);
  assert.deepEqual(sent.messages, [{ role: "user", content: "Greet me" }]);
});

Deno.test("AI SDK generateObject with a zod schema sends response_format json_schema and parses the object", async () => {
  await using s = await startFidelity();
  const result = await generateObject({
    model: edgeProvider(s, { supportsStructuredOutputs: true })("cloud-json"),
    schema: Weather,
    schemaName: "weather",
    prompt: "Weather in Oslo",
    maxRetries: 0,
  });
  assert.deepEqual(result.object, PARSED);
  const format = onlyPost(s.openai, CHAT).response_format as {
    type: string;
    json_schema: { name: string; strict: boolean; schema: Record<string, unknown> };
  };
  assert.equal(format.type, "json_schema");
  assert.equal(format.json_schema.name, "weather");
  assert.equal(format.json_schema.strict, true);
  assert.deepEqual(format.json_schema.schema.required, ["city", "temp_c"]);
  assert.deepEqual(Object.keys(format.json_schema.schema.properties as object), [
    "city",
    "temp_c",
  ]);
});

Deno.test("AI SDK generateObject without structured-outputs support falls back to json_object", async () => {
  await using s = await startFidelity();
  const result = await generateObject({
    model: edgeProvider(s)("cloud-json"),
    schema: Weather,
    prompt: "Weather in Oslo",
    maxRetries: 0,
  });
  assert.deepEqual(result.object, PARSED);
  assert.ok(
    result.warnings?.some((w) => w.type === "unsupported" && w.feature === "responseFormat"),
    `warnings: ${JSON.stringify(result.warnings)}`,
  );
  assert.deepEqual(onlyPost(s.openai, CHAT).response_format, { type: "json_object" });
});

Deno.test("AI SDK generateText with Output.object parses the backend's JSON, sent as json_schema", async () => {
  await using s = await startFidelity();
  const result = await generateText({
    model: edgeProvider(s, { supportsStructuredOutputs: true })("cloud-json"),
    output: Output.object({ schema: Weather }),
    prompt: "Weather in Oslo",
    maxRetries: 0,
  });
  assert.deepEqual(result.output, PARSED);
  const format = onlyPost(s.openai, CHAT).response_format as { type: string };
  assert.equal(format.type, "json_schema");
});

Deno.test("AI SDK toolChoice required and a named tool reach the backend, and the tool call comes back", async () => {
  await using s = await startFidelity();
  const model = edgeProvider(s)("cloud");
  const tools = { get_weather: getWeather };
  const required = await generateText({
    model,
    tools,
    toolChoice: "required",
    prompt: "Weather in Oslo?",
    maxRetries: 0,
  });
  assert.equal(required.finishReason, "tool-calls");
  assert.deepEqual(
    required.toolCalls.map((c) => [c.toolName, c.input]),
    [["get_weather", { city: "Oslo" }]],
  );
  assert.deepEqual(required.toolResults.map((r) => r.output), ["sunny in Oslo"]);
  const named = streamText({
    model,
    tools,
    toolChoice: { type: "tool", toolName: "get_weather" },
    prompt: "Weather in Oslo?",
    maxRetries: 0,
  });
  const streamedCalls = await named.toolCalls;
  assert.deepEqual(
    streamedCalls.map((c) => [c.toolName, c.input]),
    [["get_weather", { city: "Oslo" }]],
  );
  const [first, second] = posted(s.openai, CHAT);
  assert.equal(first!.tool_choice, "required");
  assert.deepEqual(second!.tool_choice, { type: "function", function: { name: "get_weather" } });
  assert.equal(second!.stream, true);
  for (const body of [first!, second!]) {
    const tools = body.tools as { type: string; function: { name: string; parameters: object } }[];
    assert.deepEqual(tools.map((t) => [t.type, t.function.name]), [["function", "get_weather"]]);
    assert.deepEqual(
      Object.keys((tools[0]!.function.parameters as { properties: object }).properties),
      [
        "city",
      ],
    );
  }
});

Deno.test('AI SDK toolChoice "none" reaches the backend as tool_choice none', async () => {
  await using s = await startFidelity();
  // The fake answers tool calls whenever tools are offered; this model answers in text, as a
  // backend honouring tool_choice "none" would.
  s.openai.setBehavior("gpt-test", { reply: "No tool needed" });
  const result = await generateText({
    model: edgeProvider(s)("cloud"),
    tools: { get_weather: getWeather },
    toolChoice: "none",
    prompt: "Just talk",
    maxRetries: 0,
  });
  assert.equal(result.text, "No tool needed");
  assert.deepEqual(result.toolCalls, []);
  assert.equal(onlyPost(s.openai, CHAT).tool_choice, "none");
});

Deno.test("AI SDK gets an APICallError 400 naming the field when a model cannot honour it, and no backend is called", async () => {
  await using s = await startFidelity();
  const iop = edgeProvider(s);
  const forced = await rejection(generateText({
    model: iop("local"),
    tools: { get_weather: getWeather },
    toolChoice: "required",
    prompt: "Weather?",
    maxRetries: 0,
  }));
  assert.ok(APICallError.isInstance(forced), String(forced));
  assert.equal(forced.statusCode, 400);
  assert.equal(
    forced.message,
    "tool_choice: model 'local' is served by an ollama adapter, which cannot force a tool call",
  );
  const structured = await rejection(generateObject({
    model: iop("shell"),
    schema: Weather,
    prompt: "Weather?",
    maxRetries: 0,
  }));
  assert.ok(APICallError.isInstance(structured), String(structured));
  assert.equal(structured.statusCode, 400);
  assert.match(structured.message, /^response_format: model 'shell' is served by a cli adapter/);
  assert.deepEqual(posted(s.ollama, "/api/chat"), []);
  assert.deepEqual(posted(s.openai, CHAT), []);
});

Deno.test("AI SDK embed and embedMany get one vector per value, from each backend kind", async () => {
  await using s = await startFidelity();
  const iop = edgeProvider(s);
  const one = await embed({
    model: iop.embeddingModel("cloud-embed"),
    value: "sunny day",
    maxRetries: 0,
  });
  assert.deepEqual(one.embedding, vectorOf("sunny day"));
  const many = await embedMany({
    model: iop.embeddingModel("local-embed"),
    values: ["sunny day", "rainy night"],
    maxRetries: 0,
  });
  assert.deepEqual(many.embeddings, [vectorOf("sunny day"), vectorOf("rainy night")]);
  assert.deepEqual(onlyPost(s.openai, "/v1/embeddings").input, ["sunny day"]);
  assert.equal(onlyPost(s.openai, "/v1/embeddings").model, "text-embed");
  assert.deepEqual(onlyPost(s.ollama, "/api/embed").input, ["sunny day", "rainy night"]);
});

Deno.test("AI SDK image parts reach a vision model's backend as image_url data; a model without vision refuses them", async () => {
  await using s = await startFidelity();
  const iop = edgeProvider(s);
  const messages = [{
    role: "user" as const,
    content: [
      { type: "text" as const, text: "What is in this picture?" },
      { type: "image" as const, image: PNG_BASE64, mediaType: "image/png" },
    ],
  }];
  const result = await generateText({ model: iop("cloud-vision"), messages, maxRetries: 0 });
  assert.equal(result.text, "ok");
  const sent = onlyPost(s.openai, CHAT).messages as { content: unknown }[];
  assert.deepEqual(sent[0]!.content, [
    { type: "text", text: "What is in this picture?" },
    { type: "image_url", image_url: { url: `data:image/png;base64,${PNG_BASE64}` } },
  ]);
  const refused = await rejection(generateText({ model: iop("cloud"), messages, maxRetries: 0 }));
  assert.ok(APICallError.isInstance(refused), String(refused));
  assert.equal(refused.statusCode, 400);
  assert.match(refused.message, /vision/);
  assert.equal(posted(s.openai, CHAT).length, 1, "the refused request reached no backend");
});
