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
import type { RunInput } from "../../../../shared/run.ts";
import { UINT32_MAX } from "../../../../shared/run_codec.ts";
import type { RunGateway } from "../../ports.ts";
import { callerOf } from "../auth.ts";
import { checkDeclared, checkFeatures, type FeatureFields } from "../capabilities.ts";
import { type HttpMetrics, meterOf, meterRoute } from "../http_metrics.ts";
import { requireJsonBody } from "../json_content_type.ts";
import { checkFields, type FieldPolicy } from "../field_policy.ts";
import { type JsonFields, readJsonBody } from "../json_fields.ts";
import { resolveModel, submissionFor } from "../model_resolver.ts";
import { type EmbeddingAnswer, embedRun } from "../run_bridge.ts";
import { ACCOUNTING_FIELDS } from "./chat.ts";
import { openaiMethodNotAllowed } from "./errors.ts";

/** How a vector is written in the answer. */
export type EmbeddingEncoding = "float" | "base64";

/** A parsed embeddings request. */
export interface EmbeddingsRequest {
  model: string;
  encoding: EmbeddingEncoding;
  input: Omit<RunInput, "adapter" | "target"> & { embed: NonNullable<RunInput["embed"]> };
}

/** OpenAI's limit on the inputs of one request. */
export const MAX_EMBEDDING_INPUTS = 2048;

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
};

/**
 * OpenAI's `input`: a string or a list of strings, none empty. Token arrays (a list of
 * integers, or of such lists) are refused: the run carries text, never a model's token ids.
 */
function inputsOf(body: JsonFields): string[] {
  const v = body.value.input;
  if (v === undefined || v === null) body.fail("input", "is required");
  if (typeof v === "string") {
    if (v === "") body.fail("input", "must not be empty");
    return [v];
  }
  if (!Array.isArray(v)) body.fail("input", "must be a string or an array of strings");
  if (v.length === 0) body.fail("input", "must hold at least one string");
  if (v.some((item) => typeof item === "number" || Array.isArray(item))) {
    body.fail("input", "holds token ids, which this Edge cannot carry: send the text instead");
  }
  if (v.length > MAX_EMBEDDING_INPUTS) {
    body.fail("input", `must hold at most ${MAX_EMBEDDING_INPUTS} strings: got ${v.length}`);
  }
  for (const [i, item] of v.entries()) {
    if (typeof item !== "string") body.fail(`input[${i}]`, "must be a string");
    if (item === "") body.fail(`input[${i}]`, "must not be empty");
  }
  return v as string[];
}

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
  const inputs = inputsOf(body);
  const format = body.string("encoding_format") ?? "float";
  if (format !== "float" && format !== "base64") {
    body.fail("encoding_format", `must be float or base64: got '${format}'`);
  }
  const dimensions = body.number("dimensions", { min: 1, max: UINT32_MAX, integer: true });
  return {
    model,
    encoding: format,
    input: {
      messages: [],
      prompt: "",
      sampling: {},
      tools: [],
      sessionId: "",
      metadata: {},
      timeoutMs: 0,
      wholeAnswer: true,
      embed: { inputs, ...(dimensions !== undefined ? { dimensions } : {}) },
    },
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
    const caller = callerOf(c);
    const model = resolveModel(service.config, req.model, caller);
    checkDeclared(model, req.input, EMBEDDING_FIELDS);
    checkFeatures(service.config, model, req.input, EMBEDDING_FIELDS);
    const meter = meterOf(c);
    meter.model?.(model.name);
    const submission = { ...submissionFor(model, req.input), embed: req.input.embed };
    const answer = await embedRun(service, submission, c.req.raw.signal, caller);
    // Vectors are not output tokens: an embedding run counts input only (no tokens per second).
    meter.usage(answer.inputTokens, 0);
    return c.json(embeddingList(req.model, req.encoding, answer));
  });
  app.all("/embeddings", openaiMethodNotAllowed("POST"));
}
