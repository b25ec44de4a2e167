/**
 * The model-server adapter kinds `ollama`, `vllm` and `openai_compat`, which share settings:
 * `base_url` (required), `api_key` (literal, never logged) or `api_key_env` (a variable on the
 * Node), `connect_timeout_ms` (10,000), `first_token_timeout_ms` (120,000), `idle_timeout_ms`
 * (60,000; each 0 = off) and `models` (advertised when the backend cannot be listed).
 * @module
 */
import type { AdapterKind } from "./kind.ts";

/** Settings of adapters that talk to a model server over HTTP. */
export interface HttpModelSettings {
  baseUrl: string;
  /** Never logged. */
  apiKey: string;
  apiKeyEnv: string;
  connectTimeoutMs: number;
  firstTokenTimeoutMs: number;
  idleTimeoutMs: number;
  /** Advertised when the backend cannot be listed. */
  models: string[];
}

/** The model-server kinds. */
export const httpModelKind: AdapterKind<"ollama" | "vllm" | "openai_compat", HttpModelSettings> = {
  kinds: ["ollama", "vllm", "openai_compat"],
  parse: (r) => ({
    baseUrl: r.nonEmpty("base_url"),
    apiKey: r.string("api_key", ""),
    apiKeyEnv: r.string("api_key_env", ""),
    connectTimeoutMs: r.number("connect_timeout_ms", 10_000, { min: 0 }),
    firstTokenTimeoutMs: r.number("first_token_timeout_ms", 120_000, { min: 0 }),
    idleTimeoutMs: r.number("idle_timeout_ms", 60_000, { min: 0 }),
    models: r.strings("models"),
  }),
  toConfig: (s) => ({
    base_url: s.baseUrl,
    api_key: s.apiKey,
    api_key_env: s.apiKeyEnv,
    connect_timeout_ms: s.connectTimeoutMs,
    first_token_timeout_ms: s.firstTokenTimeoutMs,
    idle_timeout_ms: s.idleTimeoutMs,
    models: s.models,
  }),
};
