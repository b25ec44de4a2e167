import assert from "node:assert/strict";
import { FieldError, JsonFields } from "../json_fields.ts";
import { parseOllamaChat, parseOllamaGenerate } from "./convert.ts";

const chat = (options: Record<string, unknown>) =>
  parseOllamaChat(
    new JsonFields({ model: "m", messages: [{ role: "user", content: "x" }], options }),
  );

function refused(options: Record<string, unknown>, param: string, problem: RegExp): void {
  assert.throws(() => chat(options), (err: unknown) => {
    assert.ok(err instanceof FieldError);
    assert.equal(err.code, "INVALID_ARGUMENT");
    assert.equal(err.param, param);
    assert.match(err.message, problem);
    return true;
  });
}

Deno.test("parseOllamaChat maps sampling options and passes known extras under their own names", () => {
  const req = chat({
    temperature: 0.5,
    top_p: 0.9,
    num_predict: 64,
    stop: ["\n"],
    seed: 7,
    top_k: 40,
    repeat_penalty: 1.1,
    num_ctx: 4096,
  });
  assert.deepEqual(req.input.sampling, {
    temperature: 0.5,
    topP: 0.9,
    maxTokens: 64,
    stop: ["\n"],
    seed: 7,
    extra: { top_k: 40, repeat_penalty: 1.1, num_ctx: 4096 },
  });
  assert.deepEqual(req.droppedOptions, []);
});

Deno.test("parseOllamaChat refuses options that would override the Edge's own fields", () => {
  for (const key of ["model", "messages", "stream", "n", "max_tokens", "prompt", "tools"]) {
    refused({ [key]: 1 }, `options.${key}`, /is not an option this Edge accepts/);
  }
});

Deno.test("parseOllamaChat drops Ollama runner options and reports them", () => {
  const req = chat({ num_gpu: 99, num_thread: 8, use_mmap: false, temperature: 0 });
  assert.deepEqual(req.droppedOptions, ["num_gpu", "num_thread", "use_mmap"]);
  assert.deepEqual(req.input.sampling, { temperature: 0 });
});

Deno.test("parseOllamaChat refuses numbers the wire or backend cannot carry, naming them", () => {
  refused({ num_predict: 2 ** 32 }, "options.num_predict", /at most 4294967295/);
  refused({ num_ctx: 2 ** 31 }, "options.num_ctx", /at most 2147483647/);
  refused({ seed: 2 ** 60 }, "options.seed", /at most 9007199254740991/);
  refused({ top_p: 1.5 }, "options.top_p", /at most 1/);
  refused({ temperature: -1 }, "options.temperature", /at least 0/);
  refused({ top_k: 1.5 }, "options.top_k", /must be an integer/);
  refused({ presence_penalty: 3 }, "options.presence_penalty", /at most 2/);
});

const ollamaChat = (body: Record<string, unknown>) =>
  parseOllamaChat(
    new JsonFields({ model: "m", messages: [{ role: "user", content: "x" }], ...body }),
  );

Deno.test("Ollama's format becomes the run's output format: \"json\" → json_object, a schema → json_schema", () => {
  assert.deepEqual(ollamaChat({ format: "json" }).input.outputFormat, { type: "json_object" });
  const schema = { type: "object", properties: { n: { type: "integer" } } };
  assert.deepEqual(ollamaChat({ format: schema }).input.outputFormat, {
    type: "json_schema",
    name: "response",
    schema,
  });
  assert.ok(!("outputFormat" in ollamaChat({}).input));
  assert.ok(!("outputFormat" in ollamaChat({ format: "" }).input));
  assert.deepEqual(
    parseOllamaGenerate(new JsonFields({ model: "m", prompt: "p", format: "json" })).input
      .outputFormat,
    { type: "json_object" },
  );
  for (const format of ["yaml", 3, ["json"]]) {
    assert.throws(() => ollamaChat({ format }), (err: unknown) => {
      assert.ok(err instanceof FieldError);
      assert.equal(err.param, "format");
      return true;
    });
  }
});

Deno.test("an Ollama tool result gets the id of the earlier call it answers, by tool_name, else by order", () => {
  const call = (name: string) => ({ function: { name, arguments: { q: name } } });
  const req = ollamaChat({
    messages: [
      { role: "user", content: "x" },
      { role: "assistant", content: "", tool_calls: [call("a"), call("b")] },
      { role: "tool", content: "B", tool_name: "b" },
      { role: "tool", content: "A" },
      { role: "assistant", content: "", tool_calls: [call("a")] },
      { role: "tool", content: "A2", tool_name: "a" },
      { role: "tool", content: "orphan", tool_name: "c" },
    ],
  });
  const m = req.input.messages;
  const ids = m[1]!.toolCalls!.map((c) => c.id);
  assert.equal(new Set([...ids, m[4]!.toolCalls![0]!.id]).size, 3, "call ids are unique");
  assert.deepEqual([m[2]!.toolCallId, m[2]!.name], [ids[1], "b"]);
  assert.deepEqual([m[3]!.toolCallId, m[3]!.name], [ids[0], "a"]);
  assert.deepEqual([m[5]!.toolCallId, m[5]!.name], [m[4]!.toolCalls![0]!.id, "a"]);
  assert.deepEqual([m[6]!.toolCallId, m[6]!.name], [undefined, "c"]);
});

const PNG = btoa(String.fromCharCode(0x89, ...[..."PNG\r\n\x1a\n"].map((c) => c.charCodeAt(0))));
const JPEG = btoa(String.fromCharCode(0xff, 0xd8, 0xff, 0xe0));

Deno.test("Ollama images become data: URLs typed by their bytes, after the message's text", () => {
  const req = parseOllamaChat(
    new JsonFields({
      model: "m",
      messages: [
        { role: "user", content: "what is this?", images: [PNG, JPEG] },
        { role: "user", images: [JPEG] },
        { role: "user", content: "no image", images: [] },
      ],
    }),
  );
  assert.deepEqual(req.input.messages, [
    {
      role: "user",
      content: "what is this?",
      parts: [
        { type: "text", text: "what is this?" },
        { type: "image", url: `data:image/png;base64,${PNG}` },
        { type: "image", url: `data:image/jpeg;base64,${JPEG}` },
      ],
    },
    {
      role: "user",
      content: "",
      parts: [{ type: "image", url: `data:image/jpeg;base64,${JPEG}` }],
    },
    { role: "user", content: "no image" },
  ]);
  const generate = parseOllamaGenerate(
    new JsonFields({ model: "m", system: "s", prompt: "describe", images: [PNG] }),
  );
  assert.deepEqual(generate.input.messages[1], {
    role: "user",
    content: "describe",
    parts: [
      { type: "text", text: "describe" },
      { type: "image", url: `data:image/png;base64,${PNG}` },
    ],
  });
});

Deno.test("Ollama images that are not base64 image bytes are refused naming the image", () => {
  const cases: [Record<string, unknown>, string, RegExp][] = [
    [{ messages: [{ role: "user", images: [PNG, "%%"] }] }, "messages[0].images[1]", /base64/],
    [{ messages: [{ role: "user", images: [7] }] }, "messages[0].images[0]", /base64 string/],
    [
      { messages: [{ role: "user", images: [`data:image/png;base64,${PNG}`] }] },
      "messages[0].images[0]",
      /without a data: prefix/,
    ],
    [{ messages: [{ role: "user", images: "x" }] }, "messages[0].images", /must be an array/],
  ];
  for (const [body, param, problem] of cases) {
    assert.throws(
      () => parseOllamaChat(new JsonFields({ model: "m", ...body })),
      (err: unknown) => {
        assert.ok(err instanceof FieldError);
        assert.equal(err.param, param);
        assert.match(err.message, problem);
        return true;
      },
    );
  }
  assert.throws(
    () => parseOllamaGenerate(new JsonFields({ model: "m", prompt: "p", images: [btoa("text")] })),
    (err: unknown) => err instanceof FieldError && err.param === "images[0]",
  );
});
