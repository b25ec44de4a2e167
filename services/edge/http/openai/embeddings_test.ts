import assert from "node:assert/strict";
import { FieldError, JsonFields } from "../json_fields.ts";
import { MAX_EMBEDDING_INPUTS } from "../embedding_run.ts";
import { embeddingList, float32Base64, parseEmbeddingsRequest } from "./embeddings.ts";

const parse = (body: Record<string, unknown>) => parseEmbeddingsRequest(new JsonFields(body));

Deno.test("parseEmbeddingsRequest carries the inputs and dimensions as an embedding run", () => {
  const one = parse({ model: "e", input: "hello" });
  assert.equal(one.encoding, "float");
  assert.deepEqual(one.input.embed, { inputs: ["hello"] });
  assert.deepEqual(one.input.messages, []);
  const many = parse({
    model: "e",
    input: ["a", "b"],
    encoding_format: "base64",
    dimensions: 8,
    user: "user-1234",
  });
  assert.equal(many.encoding, "base64");
  assert.deepEqual(many.input.embed, { inputs: ["a", "b"], dimensions: 8 });
});

Deno.test("parseEmbeddingsRequest refuses token arrays, empty input and bad options, naming the field", () => {
  const cases: [Record<string, unknown>, string, RegExp][] = [
    [{ model: "e", input: [1, 2, 3] }, "input", /token ids/],
    [{ model: "e", input: [[1, 2], [3]] }, "input", /token ids/],
    [{ model: "e" }, "input", /is required/],
    [{ model: "e", input: "" }, "input", /must not be empty/],
    [{ model: "e", input: [] }, "input", /at least one/],
    [{ model: "e", input: ["a", ""] }, "input[1]", /must not be empty/],
    [{ model: "e", input: ["a", { text: "b" }] }, "input[1]", /must be a string/],
    [{ model: "e", input: { text: "a" } }, "input", /string or an array/],
    [{ model: "e", input: Array(MAX_EMBEDDING_INPUTS + 1).fill("x") }, "input", /at most 2048/],
    [{ model: "e", input: "a", encoding_format: "int8" }, "encoding_format", /float or base64/],
    [{ model: "e", input: "a", dimensions: 0 }, "dimensions", /at least 1/],
    [{ model: "e", input: "a", dimensions: 1.5 }, "dimensions", /integer/],
    [{ model: "e", input: "a", truncate: true }, "truncate", /not a parameter of \/v1\/embeddings/],
    [{ input: "a" }, "model", /is required/],
  ];
  for (const [body, param, problem] of cases) {
    assert.throws(() => parse(body), (err: unknown) => {
      assert.ok(err instanceof FieldError, `${param}: ${err}`);
      assert.equal(err.code, "INVALID_ARGUMENT");
      assert.equal(err.param, param);
      assert.match(err.message, problem);
      return true;
    });
  }
});

Deno.test("float32Base64 writes little-endian float32 bytes, as OpenAI does", () => {
  const encoded = float32Base64([1, -2.5, 0.1]);
  const bytes = Uint8Array.from(atob(encoded), (c) => c.charCodeAt(0));
  assert.deepEqual([...bytes.subarray(0, 4)], [0x00, 0x00, 0x80, 0x3f]);
  const view = new DataView(bytes.buffer);
  assert.deepEqual([0, 4, 8].map((at) => view.getFloat32(at, true)), [1, -2.5, Math.fround(0.1)]);
  const long = Array.from({ length: 40_000 }, (_, i) => i);
  const back = new Float32Array(
    Uint8Array.from(atob(float32Base64(long)), (c) => c.charCodeAt(0)).buffer,
  );
  assert.deepEqual([...back], long);
});

Deno.test("embeddingList answers OpenAI's list with indexes, the asked model name and usage", () => {
  const answer = { vectors: [[0.5, 1], [2, 4]], inputTokens: 3 };
  assert.deepEqual(embeddingList("alias", "float", answer), {
    object: "list",
    data: [
      { object: "embedding", index: 0, embedding: [0.5, 1] },
      { object: "embedding", index: 1, embedding: [2, 4] },
    ],
    model: "alias",
    usage: { prompt_tokens: 3, total_tokens: 3 },
  });
  const encoded = embeddingList("alias", "base64", answer).data as { embedding: string }[];
  assert.deepEqual(encoded.map((d) => d.embedding), [
    float32Base64([0.5, 1]),
    float32Base64([2, 4]),
  ]);
});
