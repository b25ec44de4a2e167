/**
 * The model-server adapter kinds `ollama`, `vllm` and `openai_compat`, which share settings:
 * `base_url` (required; no user name, password or query in it), `api_key_env` (the name of a variable
 * on the Node holding the key, which the Node's policy must allow), `connect_timeout_ms`
 * (10,000), `first_token_timeout_ms` (120,000), `idle_timeout_ms` (60,000; each 0 = off) and
 * `models` (advertised when the backend cannot be listed).
 *
 * A literal `api_key` travels from the Edge to the Node in the pushed configuration, so it is a
 * config error unless the adapter also sets `send_api_key: true`, an explicit opt-in; the key is
 * never logged or shown.
 * @module
 */
import type { ConfigReader } from "../config.ts";
import type { AdapterKind, KindFeatures } from "./kind.ts";

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
    baseUrl: baseUrlOf(r),
    apiKey: apiKeyOf(r),
    apiKeyEnv: r.string("api_key_env", ""),
    connectTimeoutMs: r.number("connect_timeout_ms", 10_000, { min: 0 }),
    firstTokenTimeoutMs: r.number("first_token_timeout_ms", 120_000, { min: 0 }),
    idleTimeoutMs: r.number("idle_timeout_ms", 60_000, { min: 0 }),
    models: r.strings("models"),
  }),
  toConfig: (s) => ({
    base_url: s.baseUrl,
    api_key: s.apiKey,
    // `parse` admits a literal key only with the opt-in, so the Node's reading needs it too.
    ...(s.apiKey !== "" ? { send_api_key: true } : {}),
    api_key_env: s.apiKeyEnv,
    connect_timeout_ms: s.connectTimeoutMs,
    first_token_timeout_ms: s.firstTokenTimeoutMs,
    idle_timeout_ms: s.idleTimeoutMs,
    models: s.models,
  }),
};

/** OpenAI's own sampling extras, under their own names. */
const OPENAI_EXTRAS = {
  presence_penalty: "presence_penalty",
  frequency_penalty: "frequency_penalty",
};

/**
 * What each model-server kind honours. Ollama: `format` ("json" or a schema); it has no
 * `tool_choice`, so only `auto` (its behaviour) and `none` (tools are then not sent) hold, and
 * it cannot be held to one call. OpenAI-compatible servers and vLLM take `response_format`,
 * `tool_choice` and `parallel_tool_calls` as OpenAI defines them and need tool results by id;
 * vLLM also reads `top_k`, `min_p` and `repetition_penalty` (Ollama's `repeat_penalty`).
 * All three embed; only Ollama takes sampling options (`num_ctx` ...) for an embedding run.
 * Ollama takes images as bytes only, the others as `data:` or http(s) URLs.
 */
export const httpModelFeatures: Record<"ollama" | "vllm" | "openai_compat", KindFeatures> = {
  ollama: {
    outputFormats: ["json_object", "json_schema"],
    toolChoices: ["auto", "none"],
    singleToolCall: false,
    toolResultsById: false,
    samplingExtras: {
      ...OPENAI_EXTRAS,
      top_k: "top_k",
      min_p: "min_p",
      repeat_penalty: "repeat_penalty",
      num_ctx: "num_ctx",
    },
    tools: true,
    embeddings: true,
    embedTruncate: true,
    embedOptions: true,
    images: "data",
  },
  vllm: {
    outputFormats: ["json_object", "json_schema"],
    toolChoices: ["auto", "none", "required", "function"],
    singleToolCall: true,
    toolResultsById: true,
    samplingExtras: {
      ...OPENAI_EXTRAS,
      top_k: "top_k",
      min_p: "min_p",
      repeat_penalty: "repetition_penalty",
      repetition_penalty: "repetition_penalty",
    },
    tools: true,
    embeddings: true,
    embedTruncate: true,
    embedOptions: false,
    images: "any",
  },
  openai_compat: {
    outputFormats: ["json_object", "json_schema"],
    toolChoices: ["auto", "none", "required", "function"],
    singleToolCall: true,
    toolResultsById: true,
    samplingExtras: OPENAI_EXTRAS,
    tools: true,
    embeddings: true,
    // OpenAI's embeddings API has no truncation switch: an overlong input is an error.
    embedTruncate: false,
    embedOptions: false,
    images: "any",
  },
};

/** `base_url`, refused when it carries a user name or password (which would then be shown). */
function baseUrlOf(r: ConfigReader): string {
  const value = r.nonEmpty("base_url");
  let url: URL | undefined;
  try {
    url = new URL(value);
  } catch {
    url = undefined;
  }
  if (url && (url.username !== "" || url.password !== "")) {
    throw r.error(
      "base_url",
      `must not contain a user name or password: current value is '${redactUrl(url)}' ` +
        "(give the backend's key with api_key_env instead)",
    );
  }
  if (url && (url.search !== "" || url.hash !== "")) {
    // A query may carry a key (`?key=…`), and API paths are appended to base_url anyway.
    throw r.error(
      "base_url",
      `must not have a query or fragment: current value is '${redactUrl(url)}' ` +
        "(give the backend's key with api_key_env instead)",
    );
  }
  return value;
}

/** `api_key`, admitted only with `send_api_key: true`; never quoted in an error. */
function apiKeyOf(r: ConfigReader): string {
  const key = r.string("api_key", "");
  const send = r.boolean("send_api_key", false);
  if (key === "") return "";
  if (r.string("api_key_env", "") !== "") {
    throw r.error("api_key", "must not be set together with api_key_env: set one of them");
  }
  if (!send) {
    throw r.error(
      "api_key",
      "a literal key would be sent to the node with its configuration: set api_key_env to the " +
        "name of a variable on the node that holds the key instead (or send_api_key: true to " +
        "send this key anyway)",
    );
  }
  return key;
}

/** The URL with its user name, password, query and fragment replaced by `***`. */
function redactUrl(url: URL): string {
  const copy = new URL(url.href);
  if (copy.username !== "") copy.username = "***";
  if (copy.password !== "") copy.password = "***";
  if (copy.search !== "") copy.search = "***";
  if (copy.hash !== "") copy.hash = "***";
  return copy.href;
}
