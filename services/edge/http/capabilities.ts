/**
 * The one place the Edge refuses, before dispatch, a request field the backend of its model
 * cannot honour (`response_format` to a CLI profile, `tool_choice: "required"` to Ollama, a
 * tool result without a call id to an OpenAI-compatible server), so a client gets a 400 naming
 * the field instead of an answer that silently ignored it. A model may be served by several
 * adapter kinds (a pool across nodes): a field passes only when every one of them honours it,
 * since the route picks any. The kinds of each model are read from the config once per config
 * snapshot.
 * @module
 */
import { kindFeatures } from "../../../shared/adapter_kinds/catalog.ts";
import { type RunFeatures, unhonoured } from "../../../shared/adapter_kinds/features.ts";
import type { KindFeatures } from "../../../shared/adapter_kinds/kind.ts";
import type { RunInput } from "../../../shared/run.ts";
import type { EdgeConfig, ModelCapability } from "../config.ts";
import { FieldError } from "./json_fields.ts";
import type { ResolvedModel } from "./model_resolver.ts";

/** How one surface names the checked fields in its requests. */
export interface FeatureFields {
  output_format: string;
  tool_choice: string;
  parallel_tool_calls: string;
  /** The field of the tool result at this index of the run's messages. */
  tool_result: (index: number) => string;
  /** The image at part `part` of message `index` of the run's messages. */
  image: (index: number, part: number) => string;
  /** What an embedding request embeds (`input`). */
  embed: string;
  /** The request's tool definitions. */
  tools: string;
  /** An embedding request's switch to cut overlong inputs. */
  truncate: string;
  /** An embedding request's sampling options (Ollama's `options`). */
  sampling: string;
}

/** The adapter kinds that may serve each model, per config snapshot. */
const kindsByConfig = new WeakMap<EdgeConfig, Map<string, string[]>>();

/**
 * The distinct adapter kinds of the enabled adapters that may serve `model`, in config order:
 * those of the nodes, then those of each enrollment rule's template (its sample record), so that
 * a model served only by nodes that have yet to enroll is checked as it will be served.
 */
export function kindsOf(config: EdgeConfig, model: ResolvedModel): string[] {
  let byModel = kindsByConfig.get(config);
  if (!byModel) kindsByConfig.set(config, byModel = new Map());
  let kinds = byModel.get(model.name);
  if (kinds) return kinds;
  const found = new Set<string>();
  for (const node of [...config.nodes, ...config.enrollment.map((rule) => rule.sample)]) {
    const names = model.route === "pool"
      ? node.providers.filter((p) => p.modelGroup === model.group).map((p) => p.adapter)
      : [model.adapter];
    for (const a of node.adapters) if (a.enabled && names.includes(a.name)) found.add(a.kind);
  }
  kinds = [...found];
  byModel.set(model.name, kinds);
  return kinds;
}

function article(kind: string): string {
  return /^[aeiou]/.test(kind) ? "an" : "a";
}

/**
 * Throws a {@linkcode FieldError} (INVALID_ARGUMENT, 400) naming the first field of `run` that
 * some adapter kind serving `model` cannot honour; returns when every kind honours them all.
 */
export function checkFeatures(
  config: EdgeConfig,
  model: ResolvedModel,
  run: RunFeatures,
  fields: FeatureFields,
): void {
  for (const kind of kindsOf(config, model)) {
    const features = kindFeatures(kind);
    if (!features) continue;
    const gap = unhonoured(features, run);
    if (!gap) continue;
    const param = gap.field === "tool_result"
      ? fields.tool_result(gap.index ?? 0)
      : gap.field === "image"
      ? fields.image(gap.index ?? 0, gap.part ?? 0)
      : fields[gap.field];
    throw new FieldError(
      param,
      `${param}: model '${model.name}' is served by ${article(kind)} ${kind} adapter, which ` +
        gap.reason,
    );
  }
}

/**
 * Throws a {@linkcode FieldError} (400) when `run` asks `model` for what its operator did not
 * declare in `models[].capabilities`: an embedding run without `embeddings`, a chat run without
 * `chat` (both naming `model`), an image without `vision` (naming the image by `fields`). Runs
 * before {@linkcode checkFeatures}: what the model is for comes before what its backends carry.
 */
export function checkDeclared(
  model: ResolvedModel,
  run: Pick<RunInput, "messages" | "embed">,
  fields: Pick<FeatureFields, "image">,
): void {
  const declared = model.capabilities;
  if (run.embed) {
    if (!declared.includes("embeddings")) throw undeclared(model, "embed with", "embeddings");
    return;
  }
  if (!declared.includes("chat")) throw undeclared(model, "chat with", "chat");
  if (declared.includes("vision")) return;
  for (const [index, m] of run.messages.entries()) {
    const part = m.parts?.findIndex((p) => p.type === "image") ?? -1;
    if (part >= 0) throw undeclared(model, "send an image to", "vision", fields.image(index, part));
  }
}

function undeclared(
  model: ResolvedModel,
  action: string,
  capability: ModelCapability,
  param = "model",
): FieldError {
  return new FieldError(
    param,
    `${param}: cannot ${action} model '${model.name}' as it does not declare ${capability} ` +
      `(its models[].capabilities: ${model.capabilities.join(", ")})`,
  );
}

/** What a model's requests may ask for: what every kind that may serve it honours. */
export interface ModelFeatures {
  response_format: string[];
  tool_choice: string[];
  parallel_tool_calls: boolean;
  /**
   * What the model does: its declared `capabilities`, less `embeddings` or `vision` when some
   * kind serving it cannot embed or take images.
   */
  capabilities: ModelCapability[];
}

/** The features every adapter kind serving `model` honours (for `/v1/models`). */
export function modelFeatures(config: EdgeConfig, model: ResolvedModel): ModelFeatures {
  const all = kindsOf(config, model).map(kindFeatures).filter((f): f is KindFeatures => !!f);
  const every = <T>(pick: (f: KindFeatures) => readonly T[]) =>
    all.length === 0 ? [] : pick(all[0]!).filter((v) => all.every((f) => pick(f).includes(v)));
  return {
    response_format: ["text", ...every((f) => f.outputFormats)],
    tool_choice: every((f) => f.toolChoices),
    parallel_tool_calls: all.every((f) => f.singleToolCall),
    capabilities: model.capabilities.filter((c) =>
      c === "chat" || all.every((f) => c === "embeddings" ? f.embeddings : f.images !== "none")
    ),
  };
}
