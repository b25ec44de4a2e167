/**
 * What an adapter kind is, in one place: its settings, their defaults and validation, and their
 * plain form. The Edge validates its YAML with `parse`; it pushes `toConfig` of the result to the
 * Node as JSON, and the Node reads that with the same `parse`, so both ends apply one rule.
 * @module
 */
import type { ConfigReader } from "../config.ts";

/** One adapter kind (or a family of kinds that share their settings). */
export interface AdapterKind<Kind extends string, Settings> {
  /** The `kind` values this module serves. */
  readonly kinds: readonly Kind[];
  /** Reads and validates the settings of one adapter entry, with the kind's defaults. */
  parse(r: ConfigReader): Settings;
  /** The settings in the form `parse` reads (the config file's keys). */
  toConfig(settings: Settings): Record<string, unknown>;
}

/**
 * What runs of a kind can ask of its backend beyond messages and plain sampling, so that the
 * Edge refuses a request the backend cannot honour instead of letting it be dropped. Flat and
 * documented like a Node adapter's capabilities (`shared/adapter_kinds/features.ts` checks a
 * run against it).
 */
export interface KindFeatures {
  /** Output formats the backend enforces (empty: it cannot constrain its answer to JSON). */
  readonly outputFormats: readonly ("json_object" | "json_schema")[];
  /** `tool_choice` values it honours; `function` = a named function. */
  readonly toolChoices: readonly ("auto" | "none" | "required" | "function")[];
  /** Whether `parallel_tool_calls: false` (at most one call per turn) is honoured. */
  readonly singleToolCall: boolean;
  /** Whether a tool result must carry the id of the call it answers (OpenAI's tool_call_id). */
  readonly toolResultsById: boolean;
  /**
   * The `sampling.extra` keys it takes (the Ollama option names the surfaces use), each mapped
   * to the name its backend reads; any other extra is dropped with a warning, never sent raw.
   */
  readonly samplingExtras: Readonly<Record<string, string>>;
  /** Whether its backend receives a run's `tools` and can answer with tool calls. */
  readonly tools: boolean;
  /** Whether it runs embedding runs (`RunInput.embed`). */
  readonly embeddings: boolean;
  /** Whether an embedding run's `truncate: true` (cut an overlong input) is honoured. */
  readonly embedTruncate: boolean;
  /**
   * Whether an embedding run's sampling options (Ollama's `options` on `/api/embed`, such as
   * `num_ctx`) reach its backend; OpenAI's embeddings API has no field for them.
   */
  readonly embedOptions: boolean;
  /**
   * Which images it carries to its backend: none, `data:` URLs only (Ollama takes the bytes,
   * never a URL; the Node does not fetch one for it), or `data:` and http(s) URLs.
   */
  readonly images: "none" | "data" | "any";
}
