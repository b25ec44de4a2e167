/**
 * What the embedding routes share (`/v1/embeddings`, Ollama's `/api/embed` and older
 * `/api/embeddings`): the `input` read as a bounded list of strings (at most OpenAI's 2048, so
 * one request cannot make a backend, and the Node in front of it, busy for minutes), the run
 * input an embedding becomes, and the route's work: resolve the model for the caller, check it
 * embeds, run, count input tokens only (vectors are not output tokens). A request with nothing to
 * embed, which Ollama takes to load a model, runs nothing and answers no vectors.
 * @module
 */
import type { Context } from "hono";
import type { RunInput } from "../../../shared/run.ts";
import type { RunGateway } from "../ports.ts";
import { callerOf } from "./auth.ts";
import { checkDeclared, checkFeatures, type FeatureFields } from "./capabilities.ts";
import { meterOf } from "./http_metrics.ts";
import type { JsonFields } from "./json_fields.ts";
import { resolveModel, submissionFor } from "./model_resolver.ts";
import { type EmbeddingAnswer, embedRun } from "./run_bridge.ts";

/** OpenAI's limit on the inputs of one request, applied to every embedding route. */
export const MAX_EMBEDDING_INPUTS = 2048;

/** The run input of an embedding request (the surface sets no adapter or target). */
export type EmbeddingRunInput = Omit<RunInput, "adapter" | "target"> & {
  embed: NonNullable<RunInput["embed"]>;
};

/** A parsed embedding request of any surface. */
export interface EmbeddingRequest {
  /** The model as the client named it. */
  model: string;
  input: EmbeddingRunInput;
}

/** Options of {@linkcode embeddingInputs}. */
export interface EmbeddingInputOptions {
  /**
   * Whether an absent, empty-string or empty-list `input` is taken as nothing to embed
   * (Ollama's way to load a model); otherwise it is refused.
   */
  allowEmpty: boolean;
}

function isTokenIds(list: readonly unknown[]): boolean {
  return list.every((item) => typeof item === "number") || list.every(Array.isArray);
}

/**
 * `input`: a string or a list of at most {@linkcode MAX_EMBEDDING_INPUTS} strings, none empty.
 * Token arrays (a list of integers, or of such lists) are refused: the run carries text, never
 * a model's token ids.
 */
export function embeddingInputs(body: JsonFields, options: EmbeddingInputOptions): string[] {
  const v = body.value.input;
  if (v === undefined || v === null || v === "" || (Array.isArray(v) && v.length === 0)) {
    if (options.allowEmpty) return [];
    if (v === "") body.fail("input", "must not be empty");
    if (Array.isArray(v)) body.fail("input", "must hold at least one string");
    body.fail("input", "is required");
  }
  if (typeof v === "string") return [v];
  if (!Array.isArray(v)) body.fail("input", "must be a string or an array of strings");
  if (isTokenIds(v)) {
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

/** The run input embedding `embed`, with the request's `sampling` options (Ollama's). */
export function embeddingRunInput(
  embed: EmbeddingRunInput["embed"],
  sampling: RunInput["sampling"] = {},
): EmbeddingRunInput {
  return {
    messages: [],
    prompt: "",
    sampling,
    tools: [],
    sessionId: "",
    metadata: {},
    timeoutMs: 0,
    wholeAnswer: true,
    embed,
  };
}

/**
 * Runs the embedding request `req` for the caller of `c` and answers its vectors: the model
 * must be one the caller may use and declared (and served) for embeddings, also when there is
 * nothing to embed (then no run is made and the answer holds no vectors).
 */
export async function answerEmbedding(
  c: Context,
  service: RunGateway,
  req: EmbeddingRequest,
  fields: FeatureFields,
): Promise<EmbeddingAnswer> {
  const caller = callerOf(c);
  const model = resolveModel(service.config, req.model, caller);
  checkDeclared(model, req.input, fields);
  checkFeatures(service.config, model, req.input, fields);
  const meter = meterOf(c);
  meter.model?.(model.name);
  if (req.input.embed.inputs.length === 0) return { vectors: [], inputTokens: 0 };
  const submission = { ...submissionFor(model, req.input), embed: req.input.embed };
  const answer = await embedRun(service, submission, c.req.raw.signal, caller, model.name);
  meter.usage(answer.inputTokens, 0);
  return answer;
}
