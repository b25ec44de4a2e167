/**
 * The `mock` adapter kind: a deterministic model for tests and demos. Keys, all optional:
 * `tokens` (8), `token_delay_ms` (20), `start_delay_ms` (0), `fail_with` (an error code; "" =
 * never fail), `fail_retryable` (false), `embedding_dimensions` (8: the length of the vectors an
 * embedding run answers when it asks for none; 1 to {@linkcode MAX_MOCK_EMBEDDING_DIMENSIONS}).
 * Run metadata `mock.*` may override each but the last per run.
 * @module
 */
import type { AdapterKind, KindFeatures } from "./kind.ts";

/** Knobs of the deterministic mock adapter. */
export interface MockSettings {
  tokens: number;
  tokenDelayMs: number;
  startDelayMs: number;
  /** When set, every run fails with this error code. */
  failWith: string;
  failRetryable: boolean;
  /** Length of an embedding run's vectors when the run asks for no `dimensions`. */
  embeddingDimensions: number;
}

/** Vector length of an embedding run that asks for none, unless configured. */
export const DEFAULT_MOCK_EMBEDDING_DIMENSIONS = 8;

/** The longest vector the mock makes, whether configured or asked for by a run. */
export const MAX_MOCK_EMBEDDING_DIMENSIONS = 65_536;

/** The mock kind. */
export const mockKind: AdapterKind<"mock", MockSettings> = {
  kinds: ["mock"],
  parse: (r) => ({
    tokens: r.number("tokens", 8, { min: 0 }),
    tokenDelayMs: r.number("token_delay_ms", 20, { min: 0 }),
    startDelayMs: r.number("start_delay_ms", 0, { min: 0 }),
    failWith: r.string("fail_with", ""),
    failRetryable: r.boolean("fail_retryable", false),
    embeddingDimensions: r.number("embedding_dimensions", DEFAULT_MOCK_EMBEDDING_DIMENSIONS, {
      min: 1,
      max: MAX_MOCK_EMBEDDING_DIMENSIONS,
    }),
  }),
  toConfig: (s) => ({
    tokens: s.tokens,
    token_delay_ms: s.tokenDelayMs,
    start_delay_ms: s.startDelayMs,
    fail_with: s.failWith,
    fail_retryable: s.failRetryable,
    // Only when set: the pushed settings of a mock that does not embed stay as they were.
    ...(s.embeddingDimensions !== DEFAULT_MOCK_EMBEDDING_DIMENSIONS
      ? { embedding_dimensions: s.embeddingDimensions }
      : {}),
  }),
};

/**
 * The mock echoes words and never calls tools: it honours `tool_choice` `auto` and `none` and
 * one call per turn trivially, and refuses JSON output formats rather than fake them. It embeds
 * (deterministic vectors, which no sampling option changes, as none changes its echo) and takes
 * images of any kind, which it counts without reading them.
 */
export const mockFeatures: KindFeatures = {
  outputFormats: [],
  toolChoices: ["auto", "none"],
  singleToolCall: true,
  toolResultsById: false,
  samplingExtras: {},
  tools: false,
  embeddings: true,
  embedTruncate: true,
  embedOptions: true,
  images: "any",
};
