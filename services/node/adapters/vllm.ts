/**
 * The `vllm` adapter: the OpenAI-compatible adapter pointed at a vLLM server, healthy only while
 * `GET /health` answers 200 (503 means the engine died). vLLM's extra sampling fields
 * (`top_k`, `min_p`, `repetition_penalty`) travel in `sampling.extra` into the request body;
 * an embedding run with `truncate: true` asks for `truncate_prompt_tokens: -1` (cut to the
 * model's limit, keeping the last tokens), and every embedding run asks for base64 vectors.
 * @module
 */
import type { Adapter, HttpModelSettings } from "../ports.ts";
import type { ModelAdapterOptions } from "./model_run.ts";
import { createOpenAICompatAdapter } from "./openai_compat.ts";

/** Creates an adapter for the vLLM server at `settings.baseUrl`. */
export function createVllmAdapter(
  name: string,
  settings: HttpModelSettings,
  options: ModelAdapterOptions = {},
): Adapter {
  return createOpenAICompatAdapter(name, settings, {
    ...options,
    kind: "vllm",
    healthPath: "/health",
  });
}
