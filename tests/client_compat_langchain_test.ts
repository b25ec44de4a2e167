/**
 * LangChain JS (`@langchain/openai` and `@langchain/ollama` on `@langchain/core`), unmodified,
 * against a real Edge whose Node drives fake OpenAI-compatible and Ollama backends: each case
 * checks what LangChain hands the application and what the backend received.
 * @module
 */
import assert from "node:assert/strict";
import { ChatOpenAI, OpenAIEmbeddings } from "@langchain/openai";
import { ChatOllama, OllamaEmbeddings } from "@langchain/ollama";
import { type AIMessageChunk, HumanMessage, type UsageMetadata } from "@langchain/core/messages";
import { tool } from "@langchain/core/tools";
import { z } from "zod";
import {
  DEFAULT_EMBEDDING_DIMENSIONS,
  fakeEmbedding,
} from "../shared/testing/fake_model_server.ts";
import {
  CHAT,
  type Fidelity,
  JSON_REPLY,
  onlyPost,
  PARSED,
  PNG_BASE64,
  posted,
  startFidelity,
} from "./client_compat_stack.ts";

const Weather = z.object({ city: z.string(), temp_c: z.number() });

const getWeather = tool(({ city }) => `sunny in ${city}`, {
  name: "get_weather",
  description: "Weather of a city",
  schema: z.object({ city: z.string() }),
});

/** ChatOpenAI pointed at the Edge's `/v1`, as an application would configure it. */
function chatOpenAI(s: Fidelity, model: string): ChatOpenAI {
  return new ChatOpenAI({
    model,
    apiKey: "unused",
    maxRetries: 0,
    configuration: { baseURL: `${s.edge.url}/v1` },
  });
}

/** ChatOllama pointed at the Edge's Ollama surface. */
function chatOllama(s: Fidelity, model: string, format?: string): ChatOllama {
  return new ChatOllama({
    model,
    baseUrl: s.edge.url,
    maxRetries: 0,
    ...(format ? { format } : {}),
  });
}

/**
 * A message's token usage. Read through a cast because, under this project's strict compiler
 * options, `usage_metadata` of a ChatOpenAI/ChatOllama message infers as `never`.
 */
function usageOf(message: object): UsageMetadata | undefined {
  return (message as { usage_metadata?: UsageMetadata }).usage_metadata;
}

/** The `response_format` of the only chat request the OpenAI-compatible backend received. */
function sentResponseFormat(s: Fidelity) {
  return onlyPost(s.openai, CHAT).response_format as {
    type: string;
    json_schema: { name: string; strict?: boolean; schema: Record<string, unknown> };
  };
}

Deno.test("LangChain ChatOpenAI invoke gets the backend's answer and token usage", async () => {
  await using s = await startFidelity();
  const message = await chatOpenAI(s, "cloud").invoke("Say ok");
  assert.equal(message.content, "ok");
  assert.equal(usageOf(message)?.output_tokens, 1);
  assert.ok((usageOf(message)?.input_tokens ?? 0) > 0);
  const sent = onlyPost(s.openai, CHAT);
  assert.equal(sent.model, "gpt-test");
  assert.deepEqual(sent.messages, [{ role: "user", content: "Say ok" }]);
});

Deno.test("LangChain ChatOpenAI stream yields the text in chunks and the usage at the end", async () => {
  await using s = await startFidelity();
  s.openai.setBehavior("gpt-test", { reply: "Hello from the fake backend" });
  const chunks: AIMessageChunk[] = [];
  for await (const chunk of await chatOpenAI(s, "cloud").stream("Greet me")) chunks.push(chunk);
  const texts = chunks.map((c) => c.content).filter((t) => t !== "");
  assert.equal(texts.join(""), "Hello from the fake backend");
  assert.ok(texts.length > 1, `one chunk only: ${JSON.stringify(texts)}`);
  const usage = chunks.map(usageOf).find((u) => u !== undefined);
  assert.equal(usage?.output_tokens, 5);
  assert.equal(onlyPost(s.openai, CHAT).stream, true);
});

Deno.test("LangChain ChatOpenAI withStructuredOutput defaults to response_format json_schema and parses the object", async () => {
  await using s = await startFidelity();
  const parsed = await chatOpenAI(s, "cloud-json").withStructuredOutput(Weather).invoke(
    "Weather in Oslo",
  );
  assert.deepEqual(parsed, PARSED);
  const format = sentResponseFormat(s);
  assert.equal(format.type, "json_schema");
  assert.equal(format.json_schema.name, "extract");
  assert.deepEqual(format.json_schema.schema.required, ["city", "temp_c"]);
});

Deno.test('LangChain ChatOpenAI withStructuredOutput method "jsonSchema" carries its name and strict flag', async () => {
  await using s = await startFidelity();
  const parsed = await chatOpenAI(s, "cloud-json")
    .withStructuredOutput(Weather, { method: "jsonSchema", name: "weather", strict: true })
    .invoke("Weather in Oslo");
  assert.deepEqual(parsed, PARSED);
  const format = sentResponseFormat(s);
  assert.equal(format.type, "json_schema");
  assert.equal(format.json_schema.name, "weather");
  assert.equal(format.json_schema.strict, true);
});

Deno.test('LangChain ChatOpenAI withStructuredOutput method "functionCalling" forces the named tool and parses its arguments', async () => {
  await using s = await startFidelity();
  s.openai.setBehavior("gpt-test", {
    reply: "",
    toolCalls: [{ name: "weather", arguments: PARSED }],
  });
  const parsed = await chatOpenAI(s, "cloud")
    .withStructuredOutput(Weather, { method: "functionCalling", name: "weather" })
    .invoke("Weather in Oslo");
  assert.deepEqual(parsed, PARSED);
  const sent = onlyPost(s.openai, CHAT);
  assert.deepEqual(sent.tool_choice, { type: "function", function: { name: "weather" } });
  const tools = sent.tools as { function: { name: string } }[];
  assert.deepEqual(tools.map((t) => t.function.name), ["weather"]);
  assert.ok(!("response_format" in sent));
});

Deno.test("LangChain ChatOpenAI bindTools with tool_choice required and a named tool reach the backend and return the tool call", async () => {
  await using s = await startFidelity();
  const model = chatOpenAI(s, "cloud");
  const required = await model.bindTools([getWeather], { tool_choice: "required" }).invoke(
    "Weather in Oslo?",
  );
  assert.deepEqual(required.tool_calls?.map((c) => [c.name, c.args]), [[
    "get_weather",
    { city: "Oslo" },
  ]]);
  const streamed: AIMessageChunk[] = [];
  const named = model.bindTools([getWeather], { tool_choice: "get_weather" });
  for await (const chunk of await named.stream("Weather in Oslo?")) streamed.push(chunk);
  const merged = streamed.reduce((a, b) => a.concat(b));
  assert.deepEqual(merged.tool_calls?.map((c) => [c.name, c.args]), [[
    "get_weather",
    { city: "Oslo" },
  ]]);
  const [first, second] = posted(s.openai, CHAT);
  assert.equal(first!.tool_choice, "required");
  assert.deepEqual(second!.tool_choice, { type: "function", function: { name: "get_weather" } });
  for (const body of [first!, second!]) {
    const tools = body.tools as { type: string; function: { name: string } }[];
    assert.deepEqual(tools.map((t) => [t.type, t.function.name]), [["function", "get_weather"]]);
  }
});

Deno.test("LangChain ChatOpenAI forcing a tool on an Ollama-backed model gets a 400 naming tool_choice, and Ollama is not called", async () => {
  await using s = await startFidelity();
  const err = await chatOpenAI(s, "local")
    .bindTools([getWeather], { tool_choice: "required" })
    .invoke("Weather?")
    .then(
      () => assert.fail("expected a refusal"),
      (e: unknown) => e as Error & { status?: number },
    );
  assert.equal(err.status, 400, String(err));
  assert.match(err.message, /tool_choice: model 'local' is served by an ollama adapter/);
  assert.deepEqual(posted(s.ollama, "/api/chat"), []);
});

Deno.test("LangChain ChatOllama invoke and stream get the backend's answer", async () => {
  await using s = await startFidelity();
  const model = chatOllama(s, "local");
  const message = await model.invoke("Say something");
  assert.equal(message.content, "tok0 tok1 tok2");
  assert.equal(usageOf(message)?.output_tokens, 3);
  const texts: string[] = [];
  for await (const chunk of await model.stream("Say more")) {
    if (chunk.content !== "") texts.push(String(chunk.content));
  }
  assert.deepEqual(texts, ["tok0", " tok1", " tok2"]);
  const [first, second] = posted(s.ollama, "/api/chat");
  assert.equal(first!.model, "llama3.2");
  assert.deepEqual(first!.messages, [{ role: "user", content: "Say something" }]);
  assert.deepEqual(second!.messages, [{ role: "user", content: "Say more" }]);
});

Deno.test("LangChain ChatOllama withStructuredOutput sends the JSON schema as format and parses the object", async () => {
  await using s = await startFidelity();
  const parsed = await chatOllama(s, "local-json").withStructuredOutput(Weather).invoke(
    "Weather in Oslo",
  );
  assert.deepEqual(parsed, PARSED);
  const format = onlyPost(s.ollama, "/api/chat").format as Record<string, unknown>;
  assert.equal(format.type, "object");
  assert.deepEqual(format.required, ["city", "temp_c"]);
});

Deno.test('LangChain ChatOllama format "json" reaches the backend as format json', async () => {
  await using s = await startFidelity();
  const message = await chatOllama(s, "local-json", "json").invoke("Weather in Oslo as JSON");
  assert.equal(message.content, JSON_REPLY);
  assert.equal(onlyPost(s.ollama, "/api/chat").format, "json");
});

Deno.test("LangChain OpenAIEmbeddings and OllamaEmbeddings get one vector per text", async () => {
  await using s = await startFidelity();
  const openai = new OpenAIEmbeddings({
    model: "cloud-embed",
    apiKey: "unused",
    maxRetries: 0,
    configuration: { baseURL: `${s.edge.url}/v1` },
  });
  const vectorOf = (text: string) => fakeEmbedding(text, DEFAULT_EMBEDDING_DIMENSIONS);
  // The openai client under OpenAIEmbeddings asks for base64 vectors and decodes them.
  assert.deepEqual(await openai.embedQuery("sunny day"), vectorOf("sunny day"));
  const texts = ["sunny day", "rainy night"];
  assert.deepEqual(await openai.embedDocuments(texts), texts.map(vectorOf));
  const ollama = new OllamaEmbeddings({ model: "local-embed", baseUrl: s.edge.url });
  assert.deepEqual(await ollama.embedDocuments(texts), texts.map(vectorOf));
  const [one, two] = posted(s.openai, "/v1/embeddings");
  assert.equal(one!.model, "text-embed");
  assert.deepEqual([one!.input, two!.input], [["sunny day"], ["sunny day", "rainy night"]]);
  const embedded = onlyPost(s.ollama, "/api/embed");
  assert.equal(embedded.model, "nomic-embed-text");
  assert.deepEqual(embedded.input, ["sunny day", "rainy night"]);
  // OllamaEmbeddings sends truncate: false (Ollama's default is true); it must arrive.
  assert.equal(embedded.truncate, false);
});

Deno.test("LangChain image content reaches an OpenAI-compatible backend as image_url and Ollama as images", async () => {
  await using s = await startFidelity();
  const picture = () =>
    new HumanMessage({
      content: [
        { type: "text", text: "Describe it" },
        { type: "image_url", image_url: { url: `data:image/png;base64,${PNG_BASE64}` } },
      ],
    });
  assert.equal((await chatOpenAI(s, "cloud-vision").invoke([picture()])).content, "ok");
  const openaiSent = onlyPost(s.openai, CHAT).messages as { content: unknown }[];
  assert.deepEqual(openaiSent[0]!.content, [
    { type: "text", text: "Describe it" },
    { type: "image_url", image_url: { url: `data:image/png;base64,${PNG_BASE64}` } },
  ]);
  await chatOllama(s, "local-vision").invoke([picture()]);
  // ChatOllama sends each content part as a user message of its own.
  const ollamaSent = onlyPost(s.ollama, "/api/chat").messages as Record<string, unknown>[];
  assert.deepEqual(ollamaSent.map((m) => [m.content, m.images]), [
    ["Describe it", undefined],
    ["", [PNG_BASE64]],
  ]);
});
