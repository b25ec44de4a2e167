import assert from "node:assert/strict";
import { MAX_EMBEDDING_INPUTS } from "../embedding_run.ts";
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

Deno.test("parseOllamaEmbed and parseOllamaEmbeddings take nothing to embed as a model load, as Ollama", () => {
  for (const body of [{ model: "e" }, { model: "e", input: "" }, { model: "e", input: [] }]) {
    assert.deepEqual(parseOllamaEmbed(new JsonFields(body)).input.embed, { inputs: [] });
  }
  for (const body of [{ model: "e" }, { model: "e", prompt: "" }]) {
    assert.deepEqual(parseOllamaEmbeddings(new JsonFields(body)).input.embed, { inputs: [] });
  }
});

Deno.test("parseOllamaEmbed refuses more than 2048 inputs, as /v1/embeddings does", () => {
  const many = Array(MAX_EMBEDDING_INPUTS).fill("x");
  assert.equal(
    parseOllamaEmbed(new JsonFields({ model: "e", input: many })).input.embed.inputs.length,
    2048,
  );
  assert.throws(
    () => parseOllamaEmbed(new JsonFields({ model: "e", input: [...many, "x"] })),
    (err: unknown) => {
      assert.ok(err instanceof FieldError);
      assert.equal(err.param, "input");
      assert.match(err.message, /must hold at most 2048 strings: got 2049/);
      return true;
    },
  );
});

Deno.test("parseOllamaEmbed and parseOllamaEmbeddings refuse malformed input naming it", () => {
  const cases: [() => unknown, string, RegExp][] = [
    [() => parseOllamaEmbed(new JsonFields({ model: "e", input: ["a", 1] })), "input[1]", /string/],
    [() => parseOllamaEmbed(new JsonFields({ model: "e", input: ["a", ""] })), "input[1]", /empty/],
    [
      () => parseOllamaEmbed(new JsonFields({ model: "e", input: { a: 1 } })),
      "input",
      /string or an array/,
    ],
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
    [() => parseOllamaEmbeddings(new JsonFields({ model: "e", prompt: 3 })), "prompt", /string/],
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

Deno.test("ollamaEmbedAnswer answers Ollama's embed shape: the input token count, the ns since the start", () => {
  const answer = ollamaEmbedAnswer("e", { vectors: [[1, 2]], inputTokens: 4 }, 5_000, 7_500.4);
  assert.deepEqual(answer, {
    model: "e",
    embeddings: [[1, 2]],
    total_duration: 2_500,
    load_duration: 0,
    prompt_eval_count: 4,
  });
  // A clock read before the start (it never is) still answers no negative duration.
  assert.equal(ollamaEmbedAnswer("e", { vectors: [], inputTokens: 0 }, 9, 1).total_duration, 0);
});
