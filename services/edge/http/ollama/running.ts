/**
 * Ollama's `GET /api/ps` on the Edge: the models the caller has runs in flight on now, counted
 * per tenant and model by the tenant limiter as each run is admitted and ends. Another tenant's
 * runs never show, not even on a model both may use: which models a tenant works with is its
 * own business. The Edge loads and unloads nothing, so an entry lasts while the caller's runs
 * on its model do; `expires_at` is now plus Ollama's default keep-alive (5 minutes), and
 * `size`/`size_vram` are 0 as the Edge does not know what a backend holds in memory.
 * @module
 */
import type { ModelRecord } from "../../config.ts";
import { digestOf, modelDetails, type OllamaModelDetails } from "./model_info.ts";

/** Ollama's default `keep_alive`: how long it keeps an idle model loaded. */
export const KEEP_ALIVE_MS = 5 * 60_000;

/** One `/api/ps` entry. */
export interface RunningModel {
  name: string;
  model: string;
  size: number;
  digest: string;
  details: OllamaModelDetails;
  expires_at: string;
  size_vram: number;
}

/**
 * The `/api/ps` entries of `models` (the caller's, in their order) that `inFlight` (the
 * caller's runs in flight per model name) counts now (`nowMs`).
 */
export function runningModels(
  models: readonly ModelRecord[],
  inFlight: ReadonlyMap<string, number>,
  nowMs: number,
): Promise<RunningModel[]> {
  const expiresAt = new Date(nowMs + KEEP_ALIVE_MS).toISOString();
  return Promise.all(
    models.filter((m) => (inFlight.get(m.name) ?? 0) > 0).map(async ({ name }) => ({
      name,
      model: name,
      size: 0,
      digest: await digestOf(name),
      details: modelDetails(),
      expires_at: expiresAt,
      size_vram: 0,
    })),
  );
}
