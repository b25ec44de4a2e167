/**
 * Which public models this Edge can serve now, read from its status snapshot: a model is
 * servable when a connected, non-draining node has a usable resource for it — enabled, not
 * refused by the node, and not reported unhealthy. A pool model needs such a provider of its
 * model group; a direct model such a resource of its adapter (for a CLI adapter, its profile).
 * The model listings leave the others out and `/readyz` wants at least one.
 * @module
 */
import type { ModelRecord } from "./config.ts";
import type { ResourceStatus, StatusSnapshot } from "./ports.ts";

/** The names of `models` (in their order) that some connected healthy node can run now. */
export function servableModels(
  models: readonly ModelRecord[],
  status: StatusSnapshot,
): string[] {
  const usable: ResourceStatus[] = status.nodes
    .filter((n) => n.connected && !n.draining)
    .flatMap((n) => n.resources)
    .filter((r) => r.enabled && r.refused === "" && r.healthy !== false);
  return models.filter((m) => usable.some((r) => serves(r, m))).map((m) => m.name);
}

function serves(r: ResourceStatus, model: ModelRecord): boolean {
  if (model.route === "pool") return r.kind === "provider" && r.modelGroup === model.name;
  if (r.adapter !== model.adapter) return false;
  return r.kind === "profile" ? r.target === model.target : true;
}
