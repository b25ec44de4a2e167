/**
 * Per-delta overhead of the model adapters: each streams N deltas with zero delay from its fake
 * server, once through the adapter (parse, sink call per delta, limits armed) and once read with
 * raw fetch (bytes only). The ratio and (adapter − raw) / N are the adapter's cost per delta.
 *
 * Run: `deno bench -A bench/adapter_overhead_bench.ts`
 * @module
 */
import { startFakeOllama } from "../shared/testing/fake_ollama.ts";
import { startFakeOpenAI } from "../shared/testing/fake_openai.ts";
import { specFor } from "../services/node/adapters/contract_case.ts";
import { createOllamaAdapter } from "../services/node/adapters/ollama.ts";
import { createOpenAICompatAdapter } from "../services/node/adapters/openai_compat.ts";
import { createVllmAdapter } from "../services/node/adapters/vllm.ts";
import type { Adapter, EventSink, HttpModelSettings } from "../services/node/ports.ts";

const N = 500;
const messages = [{ role: "user" as const, content: "benchmark" }];

const settings = (baseUrl: string): HttpModelSettings => ({
  baseUrl,
  apiKey: "",
  apiKeyEnv: "",
  // Limits on, as in production, so that their per-chunk cost is measured too.
  connectTimeoutMs: 10_000,
  firstTokenTimeoutMs: 10_000,
  idleTimeoutMs: 10_000,
  models: [],
});

let sinkChars = 0;
const sink: EventSink = {
  output: (text) => void (sinkChars += text.length),
  toolCall: () => {},
  embedding: () => {},
  log: () => {},
  ready: () => undefined,
};

async function rawRead(url: string, body: unknown): Promise<void> {
  const res = await fetch(url, { method: "POST", body: JSON.stringify(body) });
  const reader = res.body!.getReader();
  while (!(await reader.read()).done) { /* bytes only */ }
}

async function viaAdapter(adapter: Adapter, target: string): Promise<void> {
  const result = await adapter.execute(specFor({ target, messages }), sink, {
    signal: new AbortController().signal,
  });
  if (result.usage?.outputTokens !== N) throw new Error(`expected ${N} tokens`);
}

const ollama = startFakeOllama({ defaults: { tokens: N } });
const openai = startFakeOpenAI({ defaults: { tokens: N } });
const vllm = startFakeOpenAI({ flavor: "vllm", defaults: { tokens: N } });
for (const fake of [ollama, openai, vllm]) fake.unref();

const cases: [string, Adapter, string, string, unknown][] = [
  [
    "ollama",
    createOllamaAdapter("ollama", settings(ollama.url)),
    "llama3.2",
    ollama.url + "/api/chat",
    { model: "llama3.2", messages, stream: true },
  ],
  [
    "openai_compat",
    createOpenAICompatAdapter("openai", settings(openai.url)),
    "test-model",
    openai.url + "/v1/chat/completions",
    { model: "test-model", messages, stream: true, stream_options: { include_usage: true } },
  ],
  [
    "vllm",
    createVllmAdapter("vllm", settings(vllm.url)),
    "test-model",
    vllm.url + "/v1/chat/completions",
    { model: "test-model", messages, stream: true, stream_options: { include_usage: true } },
  ],
];

for (const [kind, adapter, target, url, body] of cases) {
  Deno.bench({
    name: `${kind}: raw fetch, ${N} deltas`,
    group: kind,
    baseline: true,
    fn: async () => await rawRead(url, body),
  });
  Deno.bench({
    name: `${kind}: adapter, ${N} deltas`,
    group: kind,
    fn: async () => await viaAdapter(adapter, target),
  });
}
