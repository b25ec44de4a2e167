import assert from "node:assert/strict";
import type { RunEvent } from "../../../../shared/run.ts";
import type { RequestMeter } from "../http_metrics.ts";
import { FieldError, JsonFields } from "../json_fields.ts";
import { chatChunks, chatCompletion, parseChatRequest } from "./chat.ts";

function parse(body: Record<string, unknown>) {
  return parseChatRequest(new JsonFields(body));
}

const event = (e: DistributiveOmit<RunEvent, "runId" | "seq" | "timestampMs">, seq = 1) =>
  ({ ...e, runId: "run_1", seq, timestampMs: 0 }) as RunEvent;
type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

Deno.test("parseChatRequest maps the OpenAI body to a run input and asks non-streaming calls for the whole answer", () => {
  const req = parse({
    model: "demo",
    messages: [
      { role: "system", content: "be brief" },
      { role: "user", content: [{ type: "text", text: "hi " }, { type: "text", text: "there" }] },
    ],
    temperature: 0.5,
    max_tokens: 20,
    stop: "END",
    metadata: { team: "ops" },
  });
  assert.equal(req.model, "demo");
  assert.equal(req.stream, false);
  assert.equal(req.input.wholeAnswer, true);
  assert.deepEqual(req.input.messages, [
    { role: "system", content: "be brief" },
    { role: "user", content: "hi there" },
  ]);
  assert.deepEqual(req.input.sampling, { temperature: 0.5, maxTokens: 20, stop: ["END"] });
  assert.deepEqual(req.input.metadata, { team: "ops" });
  assert.equal(
    parse({ model: "m", messages: [{ role: "user", content: "x" }], stream: true })
      .input.wholeAnswer,
    false,
  );
});

Deno.test("parseChatRequest refuses what it cannot carry, naming the field", () => {
  const cases: [Record<string, unknown>, string][] = [
    [{ model: "m", messages: [] }, "messages"],
    [{ model: "m", messages: [{ role: "user", content: "x" }], n: 2 }, "n"],
    [{ model: "m", messages: [{ role: "robot", content: "x" }] }, "messages[0].role"],
    [{ model: "m", messages: [{ role: "user", content: "x" }], temperature: 3 }, "temperature"],
    [
      { model: "m", messages: [{ role: "user", content: "x" }], stream_options: {} },
      "stream_options",
    ],
  ];
  for (const [body, param] of cases) {
    assert.throws(() => parse(body), (err: unknown) => {
      assert.ok(err instanceof FieldError, `${param}: ${err}`);
      assert.equal(err.param, param);
      assert.equal(err.code, "INVALID_ARGUMENT");
      return true;
    });
  }
});

Deno.test("chatCompletion answers with the text, tool calls, finish reason and usage", () => {
  const body = chatCompletion("demo", {
    text: "",
    toolCalls: [{ index: 0, id: "call_1", name: "lookup", arguments: '{"q":1}' }],
    finishReason: "tool_calls",
    usage: { inputTokens: 3, outputTokens: 5 },
  }) as { choices: { message: Record<string, unknown>; finish_reason: string }[]; usage: unknown };
  assert.equal(body.choices[0]!.message.content, null);
  assert.deepEqual(body.choices[0]!.message.tool_calls, [
    { id: "call_1", type: "function", function: { name: "lookup", arguments: '{"q":1}' } },
  ]);
  assert.equal(body.choices[0]!.finish_reason, "tool_calls");
  assert.deepEqual(body.usage, { prompt_tokens: 3, completion_tokens: 5, total_tokens: 8 });
});

Deno.test("chatChunks writes the role delta, each delta, the finish chunk, usage and [DONE]", () => {
  const written: string[] = [];
  let firstTokens = 0;
  const usages: number[][] = [];
  const m: RequestMeter = {
    firstToken: () => void firstTokens++,
    usage: (i, o) => void usages.push([i, o]),
    streamEnded: () => {},
  };
  const writer = chatChunks("demo", true, m, (text) => written.push(text));
  writer.next();
  writer.next(event({ type: "started", nodeId: "n", adapter: "a", target: "t" }));
  writer.next(event({ type: "output", text: "Hel" }, 2));
  writer.next(event({ type: "output", text: "lo" }, 3));
  writer.next(event({ type: "usage", usage: { inputTokens: 2, outputTokens: 2 } }, 4));
  const end = writer.next(event({ type: "completed", finishReason: "stop", exitCode: 0 }, 5));
  assert.equal(end.done, true, "the writer ends with the stream");
  const frames = written.map((t) => t.replace(/^data: /, "").trim());
  assert.equal(frames.at(-1), "[DONE]");
  const chunks = frames.slice(0, -1).map((f) => JSON.parse(f));
  assert.deepEqual(chunks.map((c) => c.choices[0]?.delta ?? null), [
    { role: "assistant", content: "" },
    { content: "Hel" },
    { content: "lo" },
    {},
    null,
  ]);
  assert.equal(chunks[3].choices[0].finish_reason, "stop");
  assert.deepEqual(chunks[4].usage, { prompt_tokens: 2, completion_tokens: 2, total_tokens: 4 });
  assert.equal(new Set(chunks.map((c) => c.id)).size, 1, "one completion id for every chunk");
  assert.equal(firstTokens, 2);
  assert.deepEqual(usages, [[2, 2]]);
});

Deno.test("chatChunks ends a failed run with an OpenAI error frame and no [DONE]", () => {
  const written: string[] = [];
  const writer = chatChunks(
    "demo",
    false,
    { firstToken() {}, usage() {}, streamEnded() {} },
    (t) => written.push(t),
  );
  writer.next();
  const end = writer.next(event({
    type: "failed",
    code: "NODE_LOST",
    message: "node went away",
    retryable: true,
    exitCode: 0,
  }));
  assert.equal(end.done, true);
  const last = JSON.parse(written.at(-1)!.replace(/^data: /, ""));
  assert.deepEqual(last.error, {
    message: "node went away",
    type: "server_error",
    param: null,
    code: "node_lost",
  });
  assert.ok(!written.some((t) => t.includes("[DONE]")));
});

/** Asserts that parsing `body` fails with a FieldError about `param` whose message matches. */
function refusedChat(body: Record<string, unknown>, param: string, problem: RegExp): void {
  assert.throws(() => parse(body), (err: unknown) => {
    assert.ok(err instanceof FieldError);
    assert.equal(err.param, param);
    assert.match(err.message, problem);
    return true;
  });
}

const user = [{ role: "user", content: "x" }];
const tools = [{ type: "function", function: { name: "get_weather", parameters: {} } }];

Deno.test("parseChatRequest carries response_format, tool_choice and parallel_tool_calls on the run", () => {
  const schema = { type: "object", properties: { a: { type: "string" } } };
  const req = parse({
    model: "m",
    messages: user,
    tools,
    response_format: { type: "json_schema", json_schema: { name: "answer", schema, strict: true } },
    tool_choice: { type: "function", function: { name: "get_weather" } },
    parallel_tool_calls: false,
  });
  assert.deepEqual(req.input.outputFormat, {
    type: "json_schema",
    name: "answer",
    schema,
    strict: true,
  });
  assert.deepEqual(req.input.toolChoice, { function: "get_weather" });
  assert.equal(req.input.parallelToolCalls, false);
  const json = parse({
    model: "m",
    messages: user,
    tools,
    response_format: { type: "json_object" },
    tool_choice: "required",
  });
  assert.deepEqual(json.input.outputFormat, { type: "json_object" });
  assert.equal(json.input.toolChoice, "required");
  const plain = parse({ model: "m", messages: user, response_format: { type: "text" } });
  for (const key of ["outputFormat", "toolChoice", "parallelToolCalls"]) {
    assert.ok(!(key in plain.input), key);
  }
});

Deno.test("parseChatRequest refuses a malformed response_format or tool_choice naming the field", () => {
  const body = (fields: Record<string, unknown>) => ({
    model: "m",
    messages: user,
    tools,
    ...fields,
  });
  refusedChat(body({ response_format: "json" }), "response_format", /must be an object/);
  refusedChat(body({ response_format: { type: "yaml" } }), "response_format.type", /got 'yaml'/);
  refusedChat(
    body({ response_format: { type: "json_schema" } }),
    "response_format.json_schema",
    /is required/,
  );
  refusedChat(
    body({ response_format: { type: "json_schema", json_schema: { name: "a b" } } }),
    "response_format.json_schema.name",
    /letters, digits/,
  );
  refusedChat(
    body({ response_format: { type: "json_schema", json_schema: { name: "a", schema: "{}" } } }),
    "response_format.json_schema.schema",
    /must be an object/,
  );
  refusedChat(body({ tool_choice: "always" }), "tool_choice", /got 'always'/);
  refusedChat(
    body({ tool_choice: { type: "allowed_tools" } }),
    "tool_choice.type",
    /not supported/,
  );
  refusedChat(
    body({ tool_choice: { type: "function", function: { name: "nope" } } }),
    "tool_choice.function.name",
    /names no tool in 'tools'/,
  );
  refusedChat({ model: "m", messages: user, tool_choice: "required" }, "tool_choice", /no 'tools'/);
  refusedChat(body({ parallel_tool_calls: "no" }), "parallel_tool_calls", /must be a boolean/);
});

const PNG_URL = `data:image/png;base64,${
  btoa(String.fromCharCode(0x89, ...[..."PNG\r\n\x1a\n"].map((c) => c.charCodeAt(0))))
}`;

Deno.test("parseChatRequest carries a user message's image_url parts in order, with its text joined by newlines", () => {
  const req = parseChatRequest(
    new JsonFields({
      model: "m",
      messages: [{
        role: "user",
        content: [
          { type: "text", text: "What is in" },
          { type: "image_url", image_url: { url: PNG_URL } },
          { type: "text", text: "and in" },
          { type: "image_url", image_url: { url: "https://img.example/b.jpg", detail: "low" } },
        ],
      }],
    }),
    { allowImageLinks: true },
  );
  assert.deepEqual(req.input.messages, [{
    role: "user",
    content: "What is in\nand in",
    parts: [
      { type: "text", text: "What is in" },
      { type: "image", url: PNG_URL },
      { type: "text", text: "and in" },
      { type: "image", url: "https://img.example/b.jpg", detail: "low" },
    ],
  }]);
});

Deno.test("parseChatRequest refuses an image link unless http.allow_image_links is on, naming it", () => {
  const body = {
    model: "m",
    messages: [{
      role: "user",
      content: [{ type: "image_url", image_url: { url: "http://169.254.169.254/latest" } }],
    }],
  };
  assert.throws(() => parse(body), (err: unknown) => {
    assert.ok(err instanceof FieldError);
    assert.equal(err.param, "messages[0].content[0].image_url.url");
    assert.match(err.message, /image links are off on this Edge.*http\.allow_image_links/);
    return true;
  });
  const allowed = parseChatRequest(new JsonFields(body), { allowImageLinks: true });
  assert.equal(allowed.input.messages[0]?.parts?.[0]?.type, "image");
});

Deno.test("parseChatRequest refuses a bad image part naming it", () => {
  const image = (image_url: unknown, role = "user") => ({
    model: "m",
    messages: [{ role, content: [{ type: "text", text: "x" }, { type: "image_url", image_url }] }],
  });
  const cases: [Record<string, unknown>, string, RegExp][] = [
    [image({ url: "file:///etc/passwd" }), "messages[0].content[1].image_url.url", /scheme 'file'/],
    [
      image({ url: "data:text/plain;base64,aGk=" }),
      "messages[0].content[1].image_url.url",
      /data:/,
    ],
    [image({}), "messages[0].content[1].image_url.url", /is required/],
    [image(PNG_URL), "messages[0].content[1].image_url", /must be an object/],
    [
      image({ url: PNG_URL, detail: "max" }),
      "messages[0].content[1].image_url.detail",
      /auto, low, high/,
    ],
    [
      image({ url: PNG_URL }, "system"),
      "messages[0].content[1].type",
      /only allowed in user messages/,
    ],
    [
      {
        model: "m",
        messages: [{
          role: "user",
          content: [{ type: "input_audio" }, { type: "image_url", image_url: { url: PNG_URL } }],
        }],
      },
      "messages[0].content[0].type",
      /only text and image_url parts are/,
    ],
  ];
  for (const [body, param, problem] of cases) {
    assert.throws(() => parse(body), (err: unknown) => {
      assert.ok(err instanceof FieldError, `${param}: ${err}`);
      assert.equal(err.param, param);
      assert.match(err.message, problem);
      return true;
    });
  }
});
