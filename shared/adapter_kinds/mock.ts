/**
 * The `mock` adapter kind: a deterministic model for tests and demos. Keys, all optional:
 * `tokens` (8), `token_delay_ms` (20), `start_delay_ms` (0), `fail_with` (an error code; "" =
 * never fail), `fail_retryable` (false). Run metadata `mock.*` may override each per run.
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
}

/** The mock kind. */
export const mockKind: AdapterKind<"mock", MockSettings> = {
  kinds: ["mock"],
  parse: (r) => ({
    tokens: r.number("tokens", 8, { min: 0 }),
    tokenDelayMs: r.number("token_delay_ms", 20, { min: 0 }),
    startDelayMs: r.number("start_delay_ms", 0, { min: 0 }),
    failWith: r.string("fail_with", ""),
    failRetryable: r.boolean("fail_retryable", false),
  }),
  toConfig: (s) => ({
    tokens: s.tokens,
    token_delay_ms: s.tokenDelayMs,
    start_delay_ms: s.startDelayMs,
    fail_with: s.failWith,
    fail_retryable: s.failRetryable,
  }),
};

/**
 * The mock echoes words and never calls tools: it honours `tool_choice` `auto` and `none` and
 * one call per turn trivially, and refuses JSON output formats rather than fake them.
 */
export const mockFeatures: KindFeatures = {
  outputFormats: [],
  toolChoices: ["auto", "none"],
  singleToolCall: true,
  toolResultsById: false,
  samplingExtras: {},
  embeddings: true,
  images: "any",
};
