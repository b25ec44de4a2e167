import assert from "node:assert/strict";
import { FieldError, JsonFields } from "../json_fields.ts";
import { ollamaEmbedAnswer, parseOllamaEmbed, parseOllamaEmbeddings } from "./embed.ts";

Deno.test("parseOllamaEmbed carries input, truncate, dimensions and sampling options on the run", () => {
  const req = parseOllamaEmbed(
    new JsonFields({
      model: "e",
      input: ["a", "b"],
      truncate: false,
      dimensions: 16,
      keep_alive: "5m",
      options: { num_ctx: 512, num_thread: 4 },
    }),
  );
  assert.equal(req.model, "e");
  assert.deepEqual(req.input.embed, { inputs: ["a", "b"], truncate: false, dimensions: 16 });
  assert.deepEqual(req.input.sampling, { extra: { num_ctx: 512 } });
  assert.deepEqual(req.droppedOptions, ["num_thread"]);
  assert.deepEqual(parseOllamaEmbed(new JsonFields({ model: "e", input: "one" })).input.embed, {
    inputs: ["one"],
  });
  assert.deepEqual(
    parseOllamaEmbeddings(new JsonFields({ model: "e", prompt: "old" })).input.embed,
    { inputs: ["old"] },
  );
});

Deno.test("parseOllamaEmbed and parseOllamaEmbeddings refuse empty or malformed input naming it", () => {
  const cases: [() => unknown, string, RegExp][] = [
    [() => parseOllamaEmbed(new JsonFields({ model: "e" })), "input", /is required/],
    [() => parseOllamaEmbed(new JsonFields({ model: "e", input: "" })), "input", /empty/],
    [() => parseOllamaEmbed(new JsonFields({ model: "e", input: [] })), "input", /at least one/],
    [() => parseOllamaEmbed(new JsonFields({ model: "e", input: ["a", 1] })), "input[1]", /string/],
    [
      () => parseOllamaEmbed(new JsonFields({ model: "e", input: "a", truncate: "yes" })),
      "truncate",
      /boolean/,
    ],
    [
      () => parseOllamaEmbed(new JsonFields({ model: "e", input: "a", options: { mirror: 1 } })),
      "options.mirror",
      /not an option/,
    ],
    [() => parseOllamaEmbeddings(new JsonFields({ model: "e", prompt: "" })), "prompt", /empty/],
    [() => parseOllamaEmbeddings(new JsonFields({ model: "e" })), "prompt", /is required/],
  ];
  for (const [run, param, problem] of cases) {
    assert.throws(run, (err: unknown) => {
      assert.ok(err instanceof FieldError, `${param}: ${err}`);
      assert.equal(err.param, param);
      assert.match(err.message, problem);
      return true;
    });
  }
});

Deno.test("ollamaEmbedAnswer answers Ollama's embed shape with the input token count", () => {
  const answer = ollamaEmbedAnswer("e", { vectors: [[1, 2]], inputTokens: 4 }, 0);
  assert.deepEqual({ ...answer, total_duration: 0 }, {
    model: "e",
    embeddings: [[1, 2]],
    total_duration: 0,
    load_duration: 0,
    prompt_eval_count: 4,
  });
  assert.ok((answer.total_duration as number) > 0);
});
