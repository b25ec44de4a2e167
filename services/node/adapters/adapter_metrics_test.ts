import assert from "node:assert/strict";
import { Registry } from "prom-client";
import { startFakeOllama } from "../../../shared/testing/fake_ollama.ts";
import { startFakeOpenAI } from "../../../shared/testing/fake_openai.ts";
import { createAdapterMetrics } from "./adapter_metrics.ts";
import { recordingSink, specFor } from "./contract_case.ts";
import { never, settingsFor } from "./http_adapter_cases.ts";
import { createOllamaAdapter } from "./ollama.ts";
import { createVllmAdapter } from "./vllm.ts";

const messages = [{ role: "user" as const, content: "count my words please" }];

Deno.test("adapter metrics record first-token time, tokens by direction and errors by code", async () => {
  const registry = new Registry();
  const metrics = createAdapterMetrics(registry);
  await using fake = startFakeOllama({ defaults: { tokens: 6 } });
  const adapter = createOllamaAdapter("ollama", settingsFor(fake.url), { metrics });
  await adapter.execute(specFor({ target: "llama3.2", messages }), recordingSink(), {
    signal: never(),
  });
  await adapter.execute(specFor({ target: "missing", messages }), recordingSink(), {
    signal: never(),
  }).catch(() => {});
  const text = await registry.metrics();
  assert.match(
    text,
    /iop_node_adapter_time_to_first_token_seconds_count\{adapter_kind="ollama"\} 1/,
  );
  assert.match(text, /iop_node_adapter_tokens_total\{adapter_kind="ollama",direction="input"\} 4/);
  assert.match(text, /iop_node_adapter_tokens_total\{adapter_kind="ollama",direction="output"\} 6/);
  assert.match(text, /iop_node_adapter_errors_total\{adapter_kind="ollama",code="NOT_FOUND"\} 1/);
});

Deno.test("adapter metrics are shared by adapters on one registry and skip cancellations", async () => {
  const registry = new Registry();
  await using fake = startFakeOpenAI({ flavor: "vllm", defaults: { tokens: 2 } });
  const a = createVllmAdapter("a", settingsFor(fake.url), {
    metrics: createAdapterMetrics(registry),
  });
  const b = createVllmAdapter("b", settingsFor(fake.url), {
    metrics: createAdapterMetrics(registry),
  });
  const spec = specFor({ target: "test-model", messages });
  await a.execute(spec, recordingSink(), { signal: never() });
  await b.execute(spec, recordingSink(), { signal: never() });
  const controller = new AbortController();
  controller.abort(new DOMException("stop", "AbortError"));
  await a.execute(spec, recordingSink(), { signal: controller.signal }).catch(() => {});
  const text = await registry.metrics();
  assert.match(text, /iop_node_adapter_tokens_total\{adapter_kind="vllm",direction="output"\} 4/);
  assert.match(text, /iop_node_adapter_time_to_first_token_seconds_count\{adapter_kind="vllm"\} 2/);
  assert.doesNotMatch(text, /iop_node_adapter_errors_total\{/);
});
