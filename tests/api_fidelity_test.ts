/**
 * Structured output and tool choice reach the backend in its own shape, or are refused before
 * dispatch — never dropped. The unmodified `openai` and `ollama` clients talk to a real Edge
 * HTTP server whose Node drives fake Ollama and OpenAI-compatible servers (which record every
 * request) through the real adapters over the real node wire.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import {
  CHAT,
  onlyPost,
  PARSED,
  posted,
  startFidelity,
  WEATHER_SCHEMA,
  WEATHER_TOOL,
} from "./client_compat_stack.ts";

/** What the ollama client throws for an error answer. */
type ResponseError = Error & { status_code?: number; error?: string };

Deno.test("openai chat.completions.parse() with a json_schema response_format gets parsed JSON, and the backend received response_format unchanged", async () => {
  await using s = await startFidelity();
  const responseFormat = {
    type: "json_schema" as const,
    json_schema: { name: "weather", description: "A report", schema: WEATHER_SCHEMA, strict: true },
  };
  const completion = await s.oa.chat.completions.parse({
    model: "cloud-json",
    messages: [{ role: "user", content: "Weather in Oslo as JSON" }],
    response_format: responseFormat,
  });
  assert.deepEqual(completion.choices[0]!.message.parsed, PARSED);
  assert.deepEqual(onlyPost(s.openai, CHAT).response_format, responseFormat);
});

Deno.test("the Responses API text.format json_schema reaches an openai_compat backend as response_format and is echoed", async () => {
  await using s = await startFidelity();
  const response = await s.oa.responses.create({
    model: "cloud-json",
    input: "Weather in Oslo as JSON",
    text: {
      format: { type: "json_schema", name: "weather", schema: WEATHER_SCHEMA, strict: true },
    },
  });
  assert.deepEqual(JSON.parse(response.output_text), PARSED);
  assert.deepEqual(response.text?.format, {
    type: "json_schema",
    name: "weather",
    schema: WEATHER_SCHEMA,
    strict: true,
  });
  assert.deepEqual(onlyPost(s.openai, CHAT).response_format, {
    type: "json_schema",
    json_schema: { name: "weather", schema: WEATHER_SCHEMA, strict: true },
  });
});

Deno.test('the ollama client\'s format "json" and a schema reach an Ollama backend as format', async () => {
  await using s = await startFidelity();
  const messages = [{ role: "user", content: "Weather in Oslo as JSON" }];
  const asJson = await s.ol.chat({ model: "local-json", messages, format: "json", stream: false });
  assert.deepEqual(JSON.parse(asJson.message.content), PARSED);
  await s.ol.chat({ model: "local-json", messages, format: WEATHER_SCHEMA, stream: false });
  const generated = await s.ol.generate({
    model: "local-json",
    prompt: "Weather?",
    format: "json",
    stream: false,
  });
  assert.deepEqual(JSON.parse(generated.response!), PARSED);
  // The Edge runs a generate request as a one-message chat, so all three arrive on /api/chat.
  assert.deepEqual(posted(s.ollama, "/api/chat").map((b) => b.format), [
    "json",
    WEATHER_SCHEMA,
    "json",
  ]);
});

Deno.test("the ollama client's format to an OpenAI-compatible backend arrives as response_format", async () => {
  await using s = await startFidelity();
  const messages = [{ role: "user", content: "Weather in Oslo as JSON" }];
  const answer = await s.ol.chat({ model: "cloud-json", messages, format: "json", stream: false });
  assert.deepEqual(JSON.parse(answer.message.content), PARSED);
  const stream = await s.ol.chat({
    model: "cloud-json",
    messages,
    format: WEATHER_SCHEMA,
    stream: true,
  });
  for await (const _ of stream) { /* read to the end */ }
  const [json, schema] = posted(s.openai, CHAT);
  assert.deepEqual(json!.response_format, { type: "json_object" });
  assert.deepEqual(schema!.response_format, {
    type: "json_schema",
    json_schema: { name: "response", schema: WEATHER_SCHEMA },
  });
  assert.ok(!("format" in json!) && !("format" in schema!));
});

Deno.test("tool_choice required, a named function and parallel_tool_calls reach an openai_compat backend", async () => {
  await using s = await startFidelity();
  const messages = [{ role: "user" as const, content: "Weather in Oslo?" }];
  const required = await s.oa.chat.completions.create({
    model: "cloud",
    messages,
    tools: [WEATHER_TOOL],
    tool_choice: "required",
    parallel_tool_calls: false,
  });
  assert.equal(required.choices[0]!.message.tool_calls?.[0]?.type, "function");
  const named = await s.oa.chat.completions.create({
    model: "cloud",
    messages,
    tools: [WEATHER_TOOL],
    tool_choice: { type: "function", function: { name: "get_weather" } },
    stream: true,
  });
  for await (const _ of named) { /* read to the end */ }
  const [first, second] = posted(s.openai, CHAT);
  assert.equal(first!.tool_choice, "required");
  assert.equal(first!.parallel_tool_calls, false);
  assert.deepEqual(second!.tool_choice, { type: "function", function: { name: "get_weather" } });
  assert.ok(!("parallel_tool_calls" in second!));
});

Deno.test("tool_choice required to an Ollama-backed model is refused with 400 naming tool_choice, before any backend call", async () => {
  await using s = await startFidelity();
  const err = await s.oa.chat.completions.create({
    model: "local",
    messages: [{ role: "user", content: "Weather?" }],
    tools: [WEATHER_TOOL],
    tool_choice: "required",
  }).then(() => undefined, (e: unknown) => e);
  assert.ok(err instanceof OpenAI.BadRequestError, String(err));
  assert.equal(err.param, "tool_choice");
  assert.equal(
    err.message,
    "400 tool_choice: model 'local' is served by an ollama adapter, which cannot force a tool call",
  );
  assert.deepEqual(posted(s.ollama, "/api/chat"), []);
});

Deno.test("response_format to a mock or cli model is refused with 400 on every surface", async () => {
  await using s = await startFidelity();
  for (const model of ["mocked", "shell"]) {
    const err = await s.oa.chat.completions.create({
      model,
      messages: [{ role: "user", content: "x" }],
      response_format: { type: "json_object" },
    }).then(() => undefined, (e: unknown) => e);
    assert.ok(err instanceof OpenAI.BadRequestError, String(err));
    assert.equal(err.param, "response_format");
    assert.match(
      err.message,
      new RegExp(
        `model '${model}' is served by a (mock|cli) adapter, which cannot constrain output to JSON`,
      ),
    );
  }
  const viaResponses = await s.oa.responses.create({
    model: "shell",
    input: "x",
    text: { format: { type: "json_object" } },
  }).then(() => undefined, (e: unknown) => e);
  assert.ok(viaResponses instanceof OpenAI.BadRequestError);
  assert.equal(viaResponses.param, "text.format");
  const viaOllama = await s.ol.chat({
    model: "mocked",
    messages: [{ role: "user", content: "x" }],
    format: "json",
    stream: false,
  }).then(() => undefined, (e: unknown) => e as ResponseError);
  assert.equal(viaOllama?.status_code, 400);
  assert.equal(
    viaOllama?.error,
    "format: model 'mocked' is served by a mock adapter, which cannot constrain output to JSON",
  );
});

Deno.test("an Ollama client's tool result reaches an openai_compat backend with the tool_call_id of its call", async () => {
  await using s = await startFidelity();
  await s.ol.chat({
    model: "cloud",
    stream: false,
    tools: [WEATHER_TOOL],
    messages: [
      { role: "user", content: "Weather in Oslo and Rome?" },
      {
        role: "assistant",
        content: "",
        tool_calls: [
          { function: { name: "get_weather", arguments: { city: "Oslo" } } },
          { function: { name: "get_time", arguments: { city: "Rome" } } },
        ],
      },
      { role: "tool", content: "12:00", tool_name: "get_time" },
      { role: "tool", content: "sunny", tool_name: "get_weather" },
    ],
  });
  const messages = onlyPost(s.openai, CHAT).messages as Record<string, unknown>[];
  const calls = messages[1]!.tool_calls as { id: string; function: { name: string } }[];
  const idOf = (name: string) => calls.find((c) => c.function.name === name)!.id;
  assert.equal(new Set(calls.map((c) => c.id)).size, 2);
  assert.deepEqual(messages[2], { role: "tool", content: "12:00", tool_call_id: idOf("get_time") });
  assert.deepEqual(messages[3], {
    role: "tool",
    content: "sunny",
    tool_call_id: idOf("get_weather"),
  });
});

Deno.test("an Ollama tool result that answers no earlier call is refused with 400 naming it for an openai_compat backend", async () => {
  await using s = await startFidelity();
  const err = await s.ol.chat({
    model: "cloud",
    stream: false,
    messages: [
      { role: "user", content: "Weather?" },
      { role: "tool", content: "sunny", tool_name: "get_weather" },
    ],
  }).then(() => undefined, (e: unknown) => e as ResponseError);
  assert.equal(err?.status_code, 400);
  assert.match(
    err?.error ?? "",
    /^messages\[1\]\.tool_name: model 'cloud' is served by an openai_compat adapter/,
  );
  assert.deepEqual(posted(s.openai, CHAT), []);
});

Deno.test("Ollama options map to OpenAI fields for an openai_compat backend; num_ctx and repeat_penalty never reach it", async () => {
  await using s = await startFidelity();
  const options = {
    temperature: 0.3,
    num_predict: 64,
    presence_penalty: 0.5,
    num_ctx: 8192,
    repeat_penalty: 1.1,
    top_k: 40,
  };
  const messages = [{ role: "user", content: "hi" }];
  await s.ol.chat({ model: "cloud", messages, options, stream: false });
  await s.ol.chat({ model: "local", messages, options, stream: false });
  const cloud = onlyPost(s.openai, CHAT);
  assert.deepEqual([cloud.temperature, cloud.max_tokens, cloud.presence_penalty], [0.3, 64, 0.5]);
  for (const key of ["num_ctx", "repeat_penalty", "top_k", "num_predict", "options"]) {
    assert.ok(!(key in cloud), `${key} reached the openai_compat backend`);
  }
  // The same options reach Ollama itself, where they mean something.
  assert.deepEqual(onlyPost(s.ollama, "/api/chat").options, options);
});

Deno.test("/v1/models says what each model supports", async () => {
  await using s = await startFidelity();
  const models = new Map<string, unknown>();
  for await (const m of s.oa.models.list()) {
    models.set(m.id, (m as unknown as { capabilities: unknown }).capabilities);
  }
  assert.deepEqual(models.get("cloud"), {
    response_format: ["text", "json_object", "json_schema"],
    tool_choice: ["auto", "none", "required", "function"],
    parallel_tool_calls: true,
    capabilities: ["chat"],
  });
  assert.deepEqual(models.get("local"), {
    response_format: ["text", "json_object", "json_schema"],
    tool_choice: ["auto", "none"],
    parallel_tool_calls: false,
    capabilities: ["chat"],
  });
  assert.deepEqual(models.get("shell"), {
    response_format: ["text"],
    tool_choice: ["auto", "none"],
    parallel_tool_calls: true,
    capabilities: ["chat"],
  });
  assert.deepEqual((models.get("cloud-embed") as { capabilities: unknown }).capabilities, [
    "embeddings",
  ]);
});

Deno.test("penalties and vLLM's samplers reach the backend; fields no backend here honours are refused naming them", async () => {
  await using s = await startFidelity();
  const messages = [{ role: "user" as const, content: "hi" }];
  await s.oa.chat.completions.create({
    model: "cloud",
    messages,
    frequency_penalty: 0.5,
    presence_penalty: -0.25,
    user: "end-user-7",
    logprobs: false,
  });
  const carried = onlyPost(s.openai, CHAT);
  assert.equal(carried.frequency_penalty, 0.5);
  assert.equal(carried.presence_penalty, -0.25);
  assert.ok(!("user" in carried) && !("logprobs" in carried), "accounting and defaults stay here");

  const refusals: [Record<string, unknown>, string, RegExp][] = [
    [{ logprobs: true }, "logprobs", /no backend of this Edge reports log probabilities/],
    [{ logit_bias: { "50256": -100 } }, "logit_bias", /must be empty/],
    [{ reasoning_effort: "high" }, "reasoning_effort", /cannot be honoured/],
    [{ store: true }, "store", /Responses API stores/],
    [{ guided_regex: "a+" }, "guided_regex", /is not a parameter of \/v1\/chat\/completions/],
  ];
  for (const [extra, param, message] of refusals) {
    const err = await s.oa.chat.completions.create({ model: "cloud", messages, ...extra } as never)
      .then(() => undefined, (e: unknown) => e);
    assert.ok(err instanceof OpenAI.BadRequestError, `${param}: ${err}`);
    assert.equal(err.param, param);
    assert.match(err.message, message);
  }
  const background = await s.oa.responses.create({ model: "cloud", input: "hi", background: true })
    .then(() => undefined, (e: unknown) => e);
  assert.ok(background instanceof OpenAI.BadRequestError, String(background));
  assert.equal(background.param, "background");
  const think = await s.ol.chat({ model: "local", messages, think: true })
    .then(() => undefined, (e: unknown) => e as ResponseError);
  assert.equal(think?.status_code, 400);
  assert.match(think?.error ?? "", /'think' cannot be true/);
  assert.equal(posted(s.openai, CHAT).length, 1, "no refused request reached a backend");
  assert.deepEqual(posted(s.ollama, "/api/chat"), []);
});
