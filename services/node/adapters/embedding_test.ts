import assert from "node:assert/strict";
import { IopError } from "../../../shared/errors.ts";
import { float32Base64 } from "../../../shared/testing/fake_model_server.ts";
import { checkedVectors, float32FromBase64 } from "./embedding.ts";
import { openAIVectors } from "./openai_embeddings.ts";

/** Asserts that `fn` throws an IopError with exactly this code and message. */
function throwsIop(fn: () => unknown, code: string, message: string): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof IopError, `threw ${String(err)}, not an IopError`);
    assert.equal(err.code, code);
    assert.equal(err.message, message);
    return true;
  });
}

Deno.test("float32FromBase64 reads OpenAI's little-endian float32 bytes", () => {
  const values = [0.5, -1.25, Math.fround(0.1), 0];
  assert.deepEqual(float32FromBase64(float32Base64(values), "X", 0), values);
  const long = Array.from({ length: 3072 }, (_, i) => Math.fround(Math.sin(i)));
  assert.deepEqual(float32FromBase64(float32Base64(long), "X", 0), long);
  throwsIop(
    () => float32FromBase64("AAA=", "vLLM", 2),
    "BACKEND_ERROR",
    "Cannot relay the embeddings as vLLM answered a base64 vector of 2 bytes for input 2, " +
      "not whole float32 values",
  );
  throwsIop(
    () => float32FromBase64("not base64!", "vLLM", 1),
    "BACKEND_ERROR",
    "Cannot relay the embeddings as vLLM answered a vector that is not base64 for input 1",
  );
});

Deno.test("checkedVectors refuses an answer that does not match the inputs", () => {
  const embed = { inputs: ["a", "b"] };
  assert.deepEqual(checkedVectors([[1], [2]], embed, "X"), [[1], [2]]);
  throwsIop(
    () => checkedVectors([[1]], embed, "X"),
    "BACKEND_ERROR",
    "Cannot relay the embeddings as X answered 1 vector for 2 inputs",
  );
  throwsIop(
    () => checkedVectors(undefined, { inputs: ["a"] }, "X"),
    "BACKEND_ERROR",
    "Cannot relay the embeddings as X answered no vectors for 1 input",
  );
  throwsIop(
    () => checkedVectors([[1], [NaN]], embed, "X"),
    "BACKEND_ERROR",
    "Cannot relay the embeddings as X answered a vector that is not a list of numbers for input 1",
  );
  throwsIop(
    () => checkedVectors([[], []], embed, "X"),
    "BACKEND_ERROR",
    "Cannot relay the embeddings as X answered a vector that is not a list of numbers for input 0",
  );
  throwsIop(
    () => checkedVectors([[1, 2], [3, 4]], { ...embed, dimensions: 3 }, "X"),
    "INVALID_ARGUMENT",
    "Cannot embed as dimensions: X answered 2 values per vector, not the 3 asked for",
  );
});

Deno.test("checkedVectors refuses vectors of different lengths, with or without dimensions", () => {
  const ragged = [[1, 2, 3], [1, 2, 3], [1, 2]];
  throwsIop(
    () => checkedVectors(ragged, { inputs: ["a", "b", "c"] }, "Ollama"),
    "BACKEND_ERROR",
    "Cannot relay the embeddings as Ollama answered vectors of different lengths: 3 values " +
      "for input 0, 2 for input 2",
  );
});

Deno.test("openAIVectors orders data by index, decodes base64, and names a bad index", () => {
  const answer = (data: unknown[]) => ({ data, usage: { prompt_tokens: 4 } });
  assert.deepEqual(
    openAIVectors(
      answer([
        { index: 1, embedding: float32Base64([0.5, 0.25]) },
        { index: 0, embedding: [1, 2] },
      ]),
      2,
      "vLLM",
    ),
    { vectors: [[1, 2], [0.5, 0.25]], inputTokens: 4 },
  );
  throwsIop(
    () => openAIVectors(answer([{ embedding: [1] }, { index: 0, embedding: [1] }]), 2, "X"),
    "BACKEND_ERROR",
    "Cannot relay the embeddings as X answered an embedding without an index (data[0])",
  );
  throwsIop(
    () => openAIVectors(answer([{ index: 0, embedding: [1] }, { index: 7 }]), 2, "X"),
    "BACKEND_ERROR",
    "Cannot relay the embeddings as X answered an embedding for index 7 of 2 inputs (data[1])",
  );
  throwsIop(
    () => openAIVectors(answer([{ index: 0, embedding: [1] }, { index: 0 }]), 2, "X"),
    "BACKEND_ERROR",
    "Cannot relay the embeddings as X answered two embeddings for input 0 (data[0] and data[1])",
  );
  // A list of the wrong length is left to the count check, which names both numbers.
  assert.deepEqual(openAIVectors(answer([{ index: 0 }]), 2, "X").vectors, [{ index: 0 }]);
});
