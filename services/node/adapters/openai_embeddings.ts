/**
 * The embeddings wire of the OpenAI-compatible adapters: the `POST /v1/embeddings` body of an
 * embedding run, and the vectors of its answer in input order.
 *
 * OpenAI's API has no truncation: an input longer than the context fails, which is
 * `truncate: false` (`true` is refused before dispatch, see `shared/adapter_kinds`). vLLM reads
 * `truncate_prompt_tokens`, where -1 cuts to the model's own limit (keeping the last tokens),
 * and is asked for base64 vectors (little-endian float32 bytes, a third of the JSON floats'
 * size); other servers are asked for floats, which every one of them answers, but one that
 * answers base64 anyway is read too.
 * @module
 */
import type { EmbedInput } from "../../../shared/run.ts";
import { float32FromBase64, relayError } from "./embedding.ts";

/** OpenAI's answer of `/v1/embeddings`. */
interface WireEmbeddings {
  data?: { index?: unknown; embedding?: unknown }[];
  usage?: { prompt_tokens?: number } | null;
}

/** How messages name the backend of `kind`. */
export function embeddingsBackend(kind: "openai_compat" | "vllm"): string {
  return kind === "vllm" ? "vLLM" : "the model server";
}

/** The `/v1/embeddings` body of an embedding run on `model`. */
export function openAIEmbeddingsBody(
  model: string,
  embed: EmbedInput,
  kind: "openai_compat" | "vllm",
): Record<string, unknown> {
  const body: Record<string, unknown> = {
    model,
    input: embed.inputs,
    encoding_format: kind === "vllm" ? "base64" : "float",
  };
  if (embed.dimensions !== undefined) body.dimensions = embed.dimensions;
  if (kind === "vllm" && embed.truncate === true) body.truncate_prompt_tokens = -1;
  return body;
}

/**
 * The vectors and input tokens of an embeddings answer for `inputs` inputs: `data` in input
 * order whatever order it lists them in, base64 decoded. Each item must name a distinct input
 * by its `index`; what the vectors hold is checked after (`checkedVectors`).
 */
export function openAIVectors(
  answer: unknown,
  inputs: number,
  backend: string,
): { vectors: unknown; inputTokens: number } {
  const { data, usage } = answer as WireEmbeddings;
  const inputTokens = usage?.prompt_tokens ?? 0;
  // A list of the wrong length is refused by the count check, naming both numbers.
  if (!Array.isArray(data) || data.length !== inputs) return { vectors: data, inputTokens };
  const vectors: unknown[] = new Array(inputs);
  const from: number[] = new Array(inputs);
  for (const [position, item] of data.entries()) {
    const index = item?.index;
    if (typeof index !== "number" || !Number.isInteger(index)) {
      throw relayError(backend, `an embedding without an index (data[${position}])`);
    }
    if (index < 0 || index >= inputs) {
      throw relayError(
        backend,
        `an embedding for index ${index} of ${inputs} inputs (data[${position}])`,
      );
    }
    if (from[index] !== undefined) {
      throw relayError(
        backend,
        `two embeddings for input ${index} (data[${from[index]}] and data[${position}])`,
      );
    }
    from[index] = position;
    const values = item.embedding;
    vectors[index] = typeof values === "string"
      ? float32FromBase64(values, backend, index)
      : values;
  }
  return { vectors, inputTokens };
}
