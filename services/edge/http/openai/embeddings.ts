/**
 * `POST /v1/embeddings`: `{model, input, encoding_format?, dimensions?, user?}` becomes an
 * embedding run (`RunInput.embed`) through the same path as a chat (tenant admission, the
 * pool's queue, metrics, cancelled when the client goes away); the answer is OpenAI's
 * `{object:"list", data:[{object:"embedding", index, embedding}], model, usage}`, each vector a
 * list of floats or, with `encoding_format: "base64"`, its little-endian float32 bytes in base64
 * (what the `openai` client asks for, and decodes, when the caller names no format).
 * @module
 */
import type { Hono } from "hono";
import { UINT32_MAX } from "../../../../shared/run_codec.ts";
import type { RunGateway } from "../../ports.ts";
import type { FeatureFields } from "../capabilities.ts";
import {
  answerEmbedding,
  embeddingInputs,
  type EmbeddingRequest,
  embeddingRunInput,
} from "../embedding_run.ts";
import { type HttpMetrics, meterRoute } from "../http_metrics.ts";
import { requireJsonBody } from "../json_content_type.ts";
import { checkFields, type FieldPolicy } from "../field_policy.ts";
import { type JsonFields, readJsonBody } from "../json_fields.ts";
import type { EmbeddingAnswer } from "../run_bridge.ts";
import { ACCOUNTING_FIELDS } from "./chat.ts";
import { openaiMethodNotAllowed } from "./errors.ts";

/** How a vector is written in the answer. */
export type EmbeddingEncoding = "float" | "base64";

/** A parsed embeddings request. */
export interface EmbeddingsRequest extends EmbeddingRequest {
  encoding: EmbeddingEncoding;
}

/** How an embeddings request names the fields the capability check refuses. */
const EMBEDDING_FIELDS: FeatureFields = {
  output_format: "input",
  tool_choice: "input",
  parallel_tool_calls: "input",
  tool_result: () => "input",
  image: () => "input",
  embed: "input",
  tools: "input",
  truncate: "input",
  sampling: "input",
};

/** Every field of an embeddings request, and how it is treated. */
const EMBEDDINGS_FIELDS: FieldPolicy = {
  ...ACCOUNTING_FIELDS,
  model: "carried",
  input: "carried",
  encoding_format: "carried",
  dimensions: "carried",
};

/** Validates an embeddings body; errors name the bad field. */
export function parseEmbeddingsRequest(body: JsonFields): EmbeddingsRequest {
  checkFields(body, EMBEDDINGS_FIELDS, "/v1/embeddings");
  const model = body.requiredString("model");
  const inputs = embeddingInputs(body, { allowEmpty: false });
  const format = body.string("encoding_format") ?? "float";
  if (format !== "float" && format !== "base64") {
    body.fail("encoding_format", `must be float or base64: got '${format}'`);
  }
  const dimensions = body.number("dimensions", { min: 1, max: UINT32_MAX, integer: true });
  return {
    model,
    encoding: format,
    input: embeddingRunInput({ inputs, ...(dimensions !== undefined ? { dimensions } : {}) }),
  };
}

/** A vector as little-endian float32 bytes in base64, as OpenAI encodes it. */
export function float32Base64(values: readonly number[]): string {
  const bytes = new Uint8Array(values.length * 4);
  const view = new DataView(bytes.buffer);
  for (const [i, v] of values.entries()) view.setFloat32(i * 4, v, true);
  let binary = "";
  // In slices: String.fromCharCode takes its bytes as arguments, and arguments are bounded.
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}

/** The `list` answer of an embeddings request. */
export function embeddingList(
  model: string,
  encoding: EmbeddingEncoding,
  answer: EmbeddingAnswer,
): Record<string, unknown> {
  return {
    object: "list",
    data: answer.vectors.map((values, index) => ({
      object: "embedding",
      index,
      embedding: encoding === "base64" ? float32Base64(values) : values,
    })),
    model,
    usage: { prompt_tokens: answer.inputTokens, total_tokens: answer.inputTokens },
  };
}

/** Registers `POST /embeddings` (and 405 for its other methods) on the `/v1` app. */
export function mountEmbeddings(
  app: Hono,
  deps: { service: RunGateway; metrics?: HttpMetrics | undefined },
): void {
  const { service, metrics } = deps;
  app.post("/embeddings", meterRoute(metrics, "/v1/embeddings"), requireJsonBody(), async (c) => {
    const req = parseEmbeddingsRequest(await readJsonBody(c.req.raw));
    const answer = await answerEmbedding(c, service, req, EMBEDDING_FIELDS);
    return c.json(embeddingList(req.model, req.encoding, answer));
  });
  app.all("/embeddings", openaiMethodNotAllowed("POST"));
}
