/**
 * Ollama's embedding routes: `POST /api/embed` `{model, input, truncate?, dimensions?,
 * keep_alive?, options?}` → `{model, embeddings, total_duration, load_duration,
 * prompt_eval_count}`, and the older `POST /api/embeddings` `{model, prompt}` → `{embedding}`.
 * Each becomes an embedding run (`RunInput.embed`) through the same path as a chat: tenant
 * admission, the pool's queue, metrics, cancelled when the client goes away. `keep_alive` is
 * accepted and not carried, as on the chat routes: the backend's operator decides how long a
 * model stays loaded. `options` are read as the chat routes read them (sampling options travel,
 * runner options are dropped and logged, anything else is refused).
 *
 * A request with nothing to embed (`input` absent, `""` or `[]`; `prompt` absent or `""`) is
 * how Ollama clients load a model: as Ollama, it is answered 200 with no vectors once the model
 * is known to be the caller's and an embedding model, and no run is made.
 * @module
 */
import type { Context, Hono } from "hono";
import type { Logger } from "../../../../shared/log.ts";
import { UINT32_MAX } from "../../../../shared/run_codec.ts";
import type { RunGateway } from "../../ports.ts";
import type { FeatureFields } from "../capabilities.ts";
import {
  answerEmbedding,
  embeddingInputs,
  type EmbeddingRequest,
  type EmbeddingRunInput,
  embeddingRunInput,
} from "../embedding_run.ts";
import { type HttpMetrics, meterRoute } from "../http_metrics.ts";
import { requireJsonBody } from "../json_content_type.ts";
import { checkFields, type FieldPolicy } from "../field_policy.ts";
import { type JsonFields, readJsonBody } from "../json_fields.ts";
import type { EmbeddingAnswer } from "../run_bridge.ts";
import { OLLAMA_COMMON_FIELDS, samplingOf } from "./convert.ts";

/** A parsed `/api/embed` or `/api/embeddings` request. */
export interface OllamaEmbedRequest extends EmbeddingRequest {
  /** Runner options the client sent that the Edge drops (see `samplingOf`). */
  droppedOptions: string[];
}

/** The field of each route that holds what it embeds. */
const INPUT_FIELD = { embed: "input", embeddings: "prompt" } as const;

function fieldsOf(input: string): FeatureFields {
  return {
    output_format: input,
    tool_choice: input,
    parallel_tool_calls: input,
    tool_result: () => input,
    image: () => input,
    embed: input,
    tools: input,
    truncate: "truncate",
    sampling: "options",
  };
}

function request(body: JsonFields, embed: EmbeddingRunInput["embed"]): OllamaEmbedRequest {
  const model = body.requiredString("model");
  const { sampling, dropped } = samplingOf(body);
  return { model, droppedOptions: dropped, input: embeddingRunInput(embed, sampling) };
}

/** Every field of an `/api/embed` body, and how it is treated. */
const EMBED_FIELDS: FieldPolicy = {
  ...OLLAMA_COMMON_FIELDS,
  input: "carried",
  truncate: "carried",
  dimensions: "carried",
};

/** Every field of an `/api/embeddings` body, and how it is treated. */
const EMBEDDINGS_FIELDS: FieldPolicy = { ...OLLAMA_COMMON_FIELDS, prompt: "carried" };

/** Validates an `/api/embed` body; errors name the bad field. */
export function parseOllamaEmbed(body: JsonFields): OllamaEmbedRequest {
  checkFields(body, EMBED_FIELDS, "/api/embed");
  const inputs = embeddingInputs(body, { allowEmpty: true });
  const truncate = body.boolean("truncate");
  const dimensions = body.number("dimensions", { min: 1, max: UINT32_MAX, integer: true });
  return request(body, {
    inputs,
    ...(truncate !== undefined ? { truncate } : {}),
    ...(dimensions !== undefined ? { dimensions } : {}),
  });
}

/** Validates an `/api/embeddings` body (one `prompt`); errors name the bad field. */
export function parseOllamaEmbeddings(body: JsonFields): OllamaEmbedRequest {
  checkFields(body, EMBEDDINGS_FIELDS, "/api/embeddings");
  const prompt = body.string("prompt") ?? "";
  return request(body, { inputs: prompt === "" ? [] : [prompt] });
}

/**
 * The `/api/embed` answer; `total_duration` in nanoseconds from `startedNs` to `nowNs` (both
 * on the `performance.now()` clock, in ns), as Ollama reports it.
 */
export function ollamaEmbedAnswer(
  model: string,
  answer: EmbeddingAnswer,
  startedNs: number,
  nowNs = performance.now() * 1e6,
): Record<string, unknown> {
  return {
    model,
    embeddings: answer.vectors,
    total_duration: Math.max(0, Math.round(nowNs - startedNs)),
    load_duration: 0,
    prompt_eval_count: answer.inputTokens,
  };
}

/** What {@linkcode mountOllamaEmbed} needs. */
export interface OllamaEmbedDeps {
  service: RunGateway;
  metrics?: HttpMetrics | undefined;
  /** Where dropped `options` are warned about; absent: not logged. */
  logger?: Logger | undefined;
}

/** Registers `POST /embed` and `POST /embeddings` on the `/api` app. */
export function mountOllamaEmbed(app: Hono, deps: OllamaEmbedDeps): void {
  const { service, metrics } = deps;
  const route = (kind: "embed" | "embeddings") => async (c: Context) => {
    const startedNs = performance.now() * 1e6;
    const body = await readJsonBody(c.req.raw);
    const req = kind === "embed" ? parseOllamaEmbed(body) : parseOllamaEmbeddings(body);
    if (req.droppedOptions.length > 0) {
      deps.logger?.warn("ollama options dropped", {
        route: `/api/${kind}`,
        options: req.droppedOptions.join(","),
      });
    }
    const answer = await answerEmbedding(c, service, req, fieldsOf(INPUT_FIELD[kind]));
    if (kind === "embeddings") return c.json({ embedding: answer.vectors[0] ?? [] });
    return c.json(ollamaEmbedAnswer(req.model, answer, startedNs));
  };
  const json = requireJsonBody();
  app.post("/embed", meterRoute(metrics, "/api/embed"), json, route("embed"));
  app.post("/embeddings", meterRoute(metrics, "/api/embeddings"), json, route("embeddings"));
}
