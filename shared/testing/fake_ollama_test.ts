import assert from "node:assert/strict";
import { Ollama } from "ollama";
import {
  BEHAVIOR_HEADER,
  fakeEmbedding,
  OLLAMA_BUSY,
  OLLAMA_CONTEXT_EXCEEDED,
  shortenEmbedding,
  startFakeOllama,
} from "./fake_ollama.ts";

const withBehavior = (host: string, behavior: object) =>
  new Ollama({ host, headers: { [BEHAVIOR_HEADER]: JSON.stringify(behavior) } });

Deno.test("fake Ollama answers the ollama client's list, version and ps", async () => {
  await using fake = startFakeOllama({ models: ["llama3.2", "qwen3:8b"] });
  const client = new Ollama({ host: fake.url });
  const list = await client.list();
  assert.deepEqual(list.models.map((m) => m.name), ["llama3.2:latest", "qwen3:8b"]);
  assert.equal(list.models[0]?.details.family, "llama");
  assert.equal((await client.version()).version, "0.12.6");
  assert.deepEqual((await client.ps()).models, []);
  const root = await fetch(fake.url + "/");
  assert.equal(await root.text(), "Ollama is running");
});

Deno.test("fake Ollama streams chat pieces then a done chunk with counts and durations", async () => {
  await using fake = startFakeOllama({ defaults: { reply: "Hello there friend" } });
  const client = new Ollama({ host: fake.url });
  const stream = await client.chat({
    model: "llama3.2",
    messages: [{ role: "user", content: "say hi to me" }],
    stream: true,
  });
  const parts: string[] = [];
  let last;
  for await (const chunk of stream) {
    parts.push(chunk.message.content);
    last = chunk;
  }
  assert.deepEqual(parts, ["Hello", " there", " friend", ""]);
  assert.ok(last?.done);
  assert.equal(last.done_reason, "stop");
  assert.equal(last.prompt_eval_count, 4);
  assert.equal(last.eval_count, 3);
  assert.ok(last.total_duration > 0 && last.eval_duration >= 0);
  assert.equal(fake.requests[0]?.path, "/api/chat");
});

Deno.test("fake Ollama streams NDJSON by default when the request omits stream", async () => {
  await using fake = startFakeOllama({ defaults: { tokens: 2 } });
  const res = await fetch(fake.url + "/api/chat", {
    method: "POST",
    body: JSON.stringify({ model: "llama3.2", messages: [{ role: "user", content: "x" }] }),
  });
  assert.equal(res.headers.get("content-type"), "application/x-ndjson");
  const lines = (await res.text()).trim().split("\n").map((l) => JSON.parse(l));
  assert.equal(lines.length, 3);
  assert.equal(lines.at(-1).done, true);
});

Deno.test("fake Ollama answers stream:false chat and generate with one object", async () => {
  await using fake = startFakeOllama({ defaults: { reply: "one two" } });
  const client = new Ollama({ host: fake.url });
  const chat = await client.chat({ model: "llama3.2", messages: [{ role: "user", content: "q" }] });
  assert.equal(chat.message.content, "one two");
  assert.equal(chat.done, true);
  const gen = await client.generate({ model: "llama3.2", prompt: "q" });
  assert.equal(gen.response, "one two");
  assert.equal(gen.eval_count, 2);
});

Deno.test("fake Ollama cuts the answer at num_predict with done_reason length", async () => {
  await using fake = startFakeOllama({ defaults: { tokens: 10 } });
  const client = new Ollama({ host: fake.url });
  const res = await client.generate({
    model: "llama3.2",
    prompt: "q",
    options: { num_predict: 4 },
  });
  assert.equal(res.response, "tok0 tok1 tok2 tok3");
  assert.equal(res.done_reason, "length");
});

Deno.test("fake Ollama returns tool calls in message.tool_calls when tools are offered", async () => {
  await using fake = startFakeOllama({
    defaults: { reply: "", toolCalls: [{ name: "get_weather", arguments: { city: "Oslo" } }] },
  });
  const client = new Ollama({ host: fake.url });
  const res = await client.chat({
    model: "llama3.2",
    messages: [{ role: "user", content: "weather?" }],
    tools: [{
      type: "function",
      function: { name: "get_weather", parameters: { type: "object" } },
    }],
  });
  assert.equal(res.message.tool_calls?.[0]?.function.name, "get_weather");
  assert.deepEqual(res.message.tool_calls?.[0]?.function.arguments, { city: "Oslo" });
});

Deno.test("fake Ollama errors reach the client as ResponseError with status", async () => {
  await using fake = startFakeOllama();
  const msgs = [{ role: "user", content: "x" }];
  const notFound = await new Ollama({ host: fake.url }).chat({ model: "nope", messages: msgs })
    .catch((e) => e);
  assert.equal(notFound.name, "ResponseError");
  assert.equal(notFound.status_code, 404);
  assert.equal(notFound.message, "model 'nope' not found");
  const busy = await withBehavior(fake.url, { overloaded: true })
    .chat({ model: "llama3.2", messages: msgs }).catch((e) => e);
  assert.equal(busy.status_code, 503);
  assert.equal(busy.message, OLLAMA_BUSY);
  const bad = await new Ollama({ host: fake.url }).chat({ model: "", messages: msgs })
    .catch((e) => e);
  assert.equal(bad.status_code, 400);
  assert.equal(bad.message, "model is required");
});

Deno.test("fake Ollama mid-stream error line makes the client's stream throw", async () => {
  await using fake = startFakeOllama();
  const client = withBehavior(fake.url, {
    tokens: 5,
    failAfterChunks: 2,
    failMessage: "gpu on fire",
  });
  const stream = await client.chat({
    model: "llama3.2",
    messages: [{ role: "user", content: "x" }],
    stream: true,
  });
  const parts: string[] = [];
  const err = await (async () => {
    for await (const c of stream) parts.push(c.message.content);
  })().catch((e) => e);
  assert.deepEqual(parts, ["tok0", " tok1"]);
  assert.equal(err.message, "gpu on fire");
});

Deno.test("fake Ollama abrupt disconnect ends the client's stream with an error", async () => {
  await using fake = startFakeOllama();
  const client = withBehavior(fake.url, { tokens: 5, disconnectAfterChunks: 1 });
  const stream = await client.chat({
    model: "llama3.2",
    messages: [{ role: "user", content: "x" }],
    stream: true,
  });
  const err = await (async () => {
    for await (const _ of stream) { /* drain */ }
  })().then(() => undefined, (e) => e);
  assert.ok(err instanceof Error, "a dropped connection must not look like a finished stream");
  assert.equal(await fake.requests[0]?.ended, "disconnected");
});

Deno.test("fake Ollama sees the connection closed when the client aborts a stream", async () => {
  await using fake = startFakeOllama({ defaults: { tokens: 100, chunkDelayMs: 50 } });
  const client = new Ollama({ host: fake.url });
  const stream = await client.chat({
    model: "llama3.2",
    messages: [{ role: "user", content: "x" }],
    stream: true,
  });
  const started = performance.now();
  const consume = (async () => {
    for await (const _ of stream) stream.abort();
  })().catch((e) => e);
  assert.equal(await fake.requests[0]?.ended, "client_closed");
  assert.ok(performance.now() - started < 1000);
  assert.equal((await consume).name, "AbortError");
  assert.equal(fake.log.closedByClient.length, 1);
  assert.equal(fake.log.openRequests, 0);
});

Deno.test("fake Ollama embeds through /api/embed for the ollama client, per model dimensions", async () => {
  await using fake = startFakeOllama({
    models: ["llama3.2", "nomic-embed-text"],
    perModel: { "nomic-embed-text": { embeddingDimensions: 768 } },
  });
  const client = new Ollama({ host: fake.url });
  const res = await client.embed({ model: "nomic-embed-text", input: ["why is the sky", "blue"] });
  assert.equal(res.model, "nomic-embed-text");
  assert.deepEqual(res.embeddings, [
    fakeEmbedding("why is the sky", 768),
    fakeEmbedding("blue", 768),
  ]);
  assert.equal(res.prompt_eval_count, 5);
  assert.ok(res.total_duration > 0 && res.load_duration > 0);
  const norm = Math.hypot(...res.embeddings[0]!);
  assert.ok(Math.abs(norm - 1) < 1e-6);
  const single = await client.embed({ model: "llama3.2", input: "blue" });
  assert.deepEqual(single.embeddings, [fakeEmbedding("blue", 8)]);
  assert.deepEqual(fake.requests.map((r) => r.path), ["/api/embed", "/api/embed"]);
  assert.deepEqual(fake.requests[0]!.body, {
    model: "nomic-embed-text",
    input: ["why is the sky", "blue"],
  });
});

Deno.test("fake Ollama shortens vectors to dimensions and cuts or refuses inputs past the context", async () => {
  await using fake = startFakeOllama({ defaults: { embeddingDimensions: 16, contextTokens: 2 } });
  const post = (body: object) =>
    fetch(`${fake.url}/api/embed`, { method: "POST", body: JSON.stringify(body) });
  const short = await (await post({ model: "llama3.2", input: ["a b"], dimensions: 4 })).json();
  assert.deepEqual(short.embeddings, [shortenEmbedding(fakeEmbedding("a b", 16), 4)]);
  // Asking for more than the model has answers the model's own length, as Ollama does.
  const long = await (await post({ model: "llama3.2", input: ["a b"], dimensions: 64 })).json();
  assert.equal(long.embeddings[0].length, 16);
  const cut = await (await post({ model: "llama3.2", input: ["a b c d"] })).json();
  assert.deepEqual(cut.embeddings, [fakeEmbedding("a b", 16)]);
  assert.equal(cut.prompt_eval_count, 2);
  const refused = await post({ model: "llama3.2", input: ["a b c d"], truncate: false });
  assert.equal(refused.status, 400);
  assert.deepEqual(await refused.json(), { error: OLLAMA_CONTEXT_EXCEEDED });
  const wrong = await post({ model: "llama3.2", input: [1, 2] });
  assert.equal(wrong.status, 400);
  assert.deepEqual(await wrong.json(), { error: "invalid input type" });
  const missing = await post({ model: "nope", input: "x" });
  assert.equal(missing.status, 404);
  assert.deepEqual(await missing.json(), { error: "model 'nope' not found" });
});

Deno.test("fake Ollama serves the older /api/embeddings with one prompt", async () => {
  await using fake = startFakeOllama({ defaults: { embeddingDimensions: 4 } });
  const client = new Ollama({ host: fake.url });
  const res = await client.embeddings({ model: "llama3.2", prompt: "hello there" });
  assert.deepEqual(res.embedding, fakeEmbedding("hello there", 4));
  assert.equal(fake.requests[0]!.path, "/api/embeddings");
  const empty = await client.embeddings({ model: "llama3.2", prompt: "" });
  assert.deepEqual(empty.embedding, []);
});

Deno.test("fake Ollama embed honours errors, overload and a client that goes away", async () => {
  await using fake = startFakeOllama();
  const client = withBehavior(fake.url, { errorStatus: 500, errorMessage: "runner died" });
  await assert.rejects(client.embed({ model: "llama3.2", input: "x" }), {
    name: "ResponseError",
    status_code: 500,
    error: "runner died",
  });
  const busy = withBehavior(fake.url, { overloaded: true });
  await assert.rejects(busy.embed({ model: "llama3.2", input: "x" }), { status_code: 503 });
  const controller = new AbortController();
  const slow = fetch(`${fake.url}/api/embed`, {
    method: "POST",
    headers: { [BEHAVIOR_HEADER]: JSON.stringify({ firstTokenDelayMs: 10_000 }) },
    body: JSON.stringify({ model: "llama3.2", input: "x" }),
    signal: controller.signal,
  }).catch((e) => e);
  const received = await fake.log.waitForRequest(3);
  controller.abort();
  await slow;
  assert.equal(await received.ended, "client_closed");
});

Deno.test("fake Ollama takes base64 images in chat and generate, and refuses anything else", async () => {
  await using fake = startFakeOllama({ defaults: { reply: "a red dot" } });
  const client = new Ollama({ host: fake.url });
  const png = "iVBORw0KGgo=";
  const res = await client.chat({
    model: "llama3.2",
    messages: [{ role: "user", content: "what is it?", images: [png] }],
  });
  assert.equal(res.message.content, "a red dot");
  assert.deepEqual((fake.requests[0]!.body as { messages: unknown }).messages, [
    { role: "user", content: "what is it?", images: [png] },
  ]);
  await client.generate({ model: "llama3.2", prompt: "and now?", images: [png] });
  assert.deepEqual((fake.requests[1]!.body as { images: unknown }).images, [png]);
  const refused = await fetch(`${fake.url}/api/chat`, {
    method: "POST",
    body: JSON.stringify({
      model: "llama3.2",
      messages: [{ role: "user", content: "x", images: [`data:image/png;base64,${png}`] }],
    }),
  });
  assert.equal(refused.status, 400);
  assert.deepEqual(await refused.json(), { error: "illegal base64 data at input byte 4" });
});
