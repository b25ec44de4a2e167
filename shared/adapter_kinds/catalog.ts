/**
 * Every adapter kind, by its `kind` value: the one list the Edge's config, the mapper and the
 * Node's payload reader consult. A new kind is its module plus one entry in each table here.
 * @module
 */
import { cliKind, type CliSettings } from "./cli.ts";
import { httpModelFeatures, httpModelKind, type HttpModelSettings } from "./http_model.ts";
import type { AdapterKind, KindFeatures } from "./kind.ts";
import { mockFeatures, mockKind, type MockSettings } from "./mock.ts";

/** The settings type of each kind. */
export interface AdapterSettingsByKind {
  mock: MockSettings;
  cli: CliSettings;
  ollama: HttpModelSettings;
  vllm: HttpModelSettings;
  openai_compat: HttpModelSettings;
}

/** A known `kind` value. */
export type AdapterKindName = keyof AdapterSettingsByKind;

const KINDS: { [K in AdapterKindName]: AdapterKind<K, AdapterSettingsByKind[K]> } = {
  mock: mockKind,
  cli: cliKind,
  ollama: httpModelKind as AdapterKind<"ollama", HttpModelSettings>,
  vllm: httpModelKind as AdapterKind<"vllm", HttpModelSettings>,
  openai_compat: httpModelKind as AdapterKind<"openai_compat", HttpModelSettings>,
};

/** Every known kind, in documentation order. */
export const ADAPTER_KIND_NAMES = Object.keys(KINDS) as AdapterKindName[];

/** One kind's settings, tagged with the kind. */
export type KindSettings = {
  [K in AdapterKindName]: { kind: K; settings: AdapterSettingsByKind[K] };
}[AdapterKindName];

/** The module of a known kind; undefined for a kind this build does not know. */
export function adapterKind(kind: string): AdapterKind<string, unknown> | undefined {
  return Object.hasOwn(KINDS, kind)
    ? KINDS[kind as AdapterKindName] as AdapterKind<string, unknown>
    : undefined;
}

/**
 * A CLI profile's output is its program's; it calls no tools, so it honours `tool_choice`
 * `auto` and `none` and one call per turn, and cannot constrain its output to JSON. (Kept here,
 * beside the other kinds' entries, so the CLI kind's module stays about profiles.)
 */
const cliFeatures: KindFeatures = {
  outputFormats: [],
  toolChoices: ["auto", "none"],
  singleToolCall: true,
  toolResultsById: false,
  samplingExtras: {},
  tools: false,
  embeddings: false,
  embedTruncate: false,
  embedOptions: false,
  images: "none",
};

const FEATURES: Record<AdapterKindName, KindFeatures> = {
  mock: mockFeatures,
  cli: cliFeatures,
  ...httpModelFeatures,
};

/** What runs of a known kind can ask of its backend; undefined for an unknown kind. */
export function kindFeatures(kind: string): KindFeatures | undefined {
  return Object.hasOwn(FEATURES, kind) ? FEATURES[kind as AdapterKindName] : undefined;
}
