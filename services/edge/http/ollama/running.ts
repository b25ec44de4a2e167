/**
 * Ollama's `GET /api/ps` on the Edge: the public models with runs in flight now, read from the
 * status snapshot's per-resource counters. The Edge loads and unloads nothing, so an entry
 * lasts while its model runs; `expires_at` is now plus Ollama's default keep-alive (5 minutes),
 * and `size`/`size_vram` are 0 as the Edge does not know what a backend holds in memory.
 *
 * A pool model runs while a provider of its model group has runs in flight. A direct model runs
 * while its resource does: the CLI profile or provider of its adapter and target, or the
 * adapter's own row, which counts the adapter's runs on every target (so every direct model on
 * one such adapter shows while any of them runs). A direct run on an adapter that also has
 * providers, to a target none of them serves, is in no row of the snapshot and does not show.
 * @module
 */
import type { ModelRecord } from "../../config.ts";
import type { ResourceStatus, StatusSnapshot } from "../../ports.ts";
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

/** The names of `models` (in their order) with runs in flight according to `status`. */
export function modelsInFlight(
  models: readonly ModelRecord[],
  status: StatusSnapshot,
): string[] {
  const busy = status.nodes.flatMap((n) => n.resources).filter((r) => r.inFlight > 0);
  return models.filter((m) => busy.some((r) => runs(r, m))).map((m) => m.name);
}

function runs(r: ResourceStatus, model: ModelRecord): boolean {
  if (model.route === "pool") return r.kind === "provider" && r.modelGroup === model.name;
  if (r.adapter !== model.adapter) return false;
  return r.kind === "adapter" || r.target === model.target;
}

/** The `/api/ps` entries of the models of `models` running now (`nowMs`). */
export function runningModels(
  models: readonly ModelRecord[],
  status: StatusSnapshot,
  nowMs: number,
): Promise<RunningModel[]> {
  const expiresAt = new Date(nowMs + KEEP_ALIVE_MS).toISOString();
  return Promise.all(
    modelsInFlight(models, status).map(async (name) => ({
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
