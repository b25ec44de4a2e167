import assert from "node:assert/strict";
import { float32Base64 } from "../../../shared/testing/fake_model_server.ts";
import { checkedVectors, float32FromBase64, MAX_EMBEDDING_VALUES } from "./embedding.ts";

Deno.test("float32FromBase64 reads OpenAI's little-endian float32 bytes", () => {
  const values = [0.5, -1.25, Math.fround(0.1), 0];
  assert.deepEqual(float32FromBase64(float32Base64(values)), values);
  assert.throws(() => float32FromBase64("AAA="), { code: "BACKEND_ERROR", message: /2 bytes/ });
  assert.throws(() => float32FromBase64("not base64!"), { code: "BACKEND_ERROR" });
});

Deno.test("checkedVectors refuses an answer that does not match the inputs", () => {
  const embed = { inputs: ["a", "b"] };
  assert.deepEqual(checkedVectors([[1], [2]], embed, "X"), [[1], [2]]);
  assert.throws(() => checkedVectors([[1]], embed, "X"), {
    code: "BACKEND_ERROR",
    message: "X answered 1 embeddings for 2 inputs",
  });
  assert.throws(() => checkedVectors([[1], [NaN]], embed, "X"), {
    code: "BACKEND_ERROR",
    message: /not a list of numbers for input 1/,
  });
  assert.throws(() => checkedVectors([[1, 2], [3, 4]], { ...embed, dimensions: 3 }, "X"), {
    code: "INVALID_ARGUMENT",
    message: "Cannot embed as dimensions: X answered 2 values per vector, not the 3 asked for",
  });
  const huge = new Array(MAX_EMBEDDING_VALUES + 1).fill(0);
  assert.throws(() => checkedVectors([huge], { inputs: ["a"] }, "X"), { code: "BACKEND_ERROR" });
});
