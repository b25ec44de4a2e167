/**
 * The boundary where a public `model` name becomes an internal route: a model group served by a
 * provider pool, or one `adapter + target`. Aliases resolve to their model. Nothing deeper than
 * this file knows public model names.
 * @module
 */
import { IopError } from "../../../shared/errors.ts";
import type { RunInput } from "../../../shared/run.ts";
import type { EdgeConfig, ModelCapability, ModelRecord } from "../config.ts";
import type { RunSubmission } from "../ports.ts";
import { ANONYMOUS_TENANT, mayUseModel, type TenantRecord } from "../tenants/tenant.ts";

/** A public model resolved to its route. */
export type ResolvedModel =
  & { name: string; capabilities: readonly ModelCapability[] }
  & ({ route: "pool"; group: string } | { route: "direct"; adapter: string; target: string });

function find(config: EdgeConfig, model: string): ModelRecord | undefined {
  return config.models.find((m) => m.name === model || m.aliases.includes(model));
}

/**
 * Resolves `model` (a name or an alias; Ollama-style `name:latest` also matches `name`).
 * Throws NOT_FOUND for an unknown model, and for one `caller` may not use (told apart from
 * unknown by nothing, so a tenant cannot probe another tenant's models).
 */
export function resolveModel(
  config: EdgeConfig,
  model: string,
  caller?: TenantRecord,
): ResolvedModel {
  const record = find(config, model) ??
    (model.endsWith(":latest") ? find(config, model.slice(0, -":latest".length)) : undefined);
  if (!record || (caller && !mayUseModel(caller, record))) {
    const access = caller && caller.name !== ANONYMOUS_TENANT
      ? " or you do not have access to it"
      : "";
    throw new IopError("NOT_FOUND", `The model '${model}' does not exist${access}`);
  }
  const { name, capabilities } = record;
  if (record.route === "pool") return { name, capabilities, route: "pool", group: name };
  return { name, capabilities, route: "direct", adapter: record.adapter, target: record.target };
}

/** The run submission for a resolved model and a surface-built input (adapter/target unset). */
export function submissionFor(
  model: ResolvedModel,
  input: Omit<RunInput, "adapter" | "target">,
): RunSubmission {
  if (model.route === "pool") return { ...input, adapter: "", target: "", modelGroup: model.group };
  return { ...input, adapter: model.adapter, target: model.target };
}

/** The models of `config` that `caller` may use, for the model listings. */
export function modelsFor(config: EdgeConfig, caller: TenantRecord): ModelRecord[] {
  return config.models.filter((m) => mayUseModel(caller, m));
}
