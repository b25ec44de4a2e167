import assert from "node:assert/strict";
import { startFakeOllama } from "../../../shared/testing/fake_ollama.ts";
import { startFakeOpenAI } from "../../../shared/testing/fake_openai.ts";
import { createCliAdapter } from "./cli.ts";
import { createMockAdapter } from "./mock.ts";
import { createOllamaAdapter } from "./ollama.ts";
import { createOpenAICompatAdapter } from "./openai_compat.ts";
import { createVllmAdapter } from "./vllm.ts";
import type { HttpModelSettings } from "../ports.ts";
import { probeGet } from "./health.ts";

const signal = () => AbortSignal.timeout(2_000);

function http(baseUrl: string, extra: Partial<HttpModelSettings> = {}): HttpModelSettings {
  return {
    baseUrl,
    apiKey: "",
    apiKeyEnv: "",
    models: [],
    connectTimeoutMs: 1_000,
    firstTokenTimeoutMs: 0,
    idleTimeoutMs: 0,
    ...extra,
  };
}

Deno.test("ollama probe is healthy with the server's version and unhealthy once it is gone", async () => {
  const fake = startFakeOllama({ version: "0.12.6" });
  const adapter = createOllamaAdapter("llm", http(fake.url));
  try {
    const up = await adapter.probe!({ signal: signal() });
    assert.deepEqual(up, { healthy: true, detail: `ollama 0.12.6 at ${fake.url}` });
    assert.ok(fake.requests.some((r) => r.path === "/api/version"));
    await fake.close();
    const down = await adapter.probe!({ signal: signal() });
    assert.equal(down.healthy, false);
    assert.match(down.detail, new RegExp(`^GET ${fake.url}/api/version failed: `));
  } finally {
    await fake.close();
    await adapter.close?.();
  }
});

Deno.test("vllm probe follows GET /health: 503 when the engine died, 200 again after", async () => {
  await using fake = startFakeOpenAI({ flavor: "vllm" });
  const adapter = createVllmAdapter("vllm", http(`${fake.url}/v1`));
  assert.deepEqual(await adapter.probe!({ signal: signal() }), {
    healthy: true,
    detail: `vllm at ${fake.url}`,
  });
  fake.setEngineDead(true);
  const dead = await adapter.probe!({ signal: signal() });
  assert.equal(dead.healthy, false);
  assert.match(dead.detail, new RegExp(`^GET ${fake.url}/health answered 503`));
  fake.setEngineDead(false);
  assert.equal((await adapter.probe!({ signal: signal() })).healthy, true);
  await adapter.close?.();
});

Deno.test("openai_compat probe lists /v1/models with the API key and reports a 401", async () => {
  await using fake = startFakeOpenAI({ models: ["a", "b"], apiKey: "sk-right" });
  const good = createOpenAICompatAdapter("oa", http(`${fake.url}/v1`, { apiKey: "sk-right" }));
  assert.deepEqual(await good.probe!({ signal: signal() }), {
    healthy: true,
    detail: `openai_compat at ${fake.url}: 2 models`,
  });
  const bad = createOpenAICompatAdapter("oa", http(fake.url, { apiKey: "sk-wrong" }));
  const refused = await bad.probe!({ signal: signal() });
  assert.equal(refused.healthy, false);
  assert.match(refused.detail, new RegExp(`^GET ${fake.url}/v1/models answered 401`));
  await good.close?.();
  await bad.close?.();
});

Deno.test("a probe of a server that never answers is unhealthy once its signal times out", async () => {
  const hung = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const accepted: Deno.Conn[] = [];
  const accepting = (async () => {
    for await (const conn of hung) accepted.push(conn);
  })();
  try {
    const result = await probeGet(`http://127.0.0.1:${hung.addr.port}/health`, {
      signal: AbortSignal.timeout(100),
    });
    assert.equal(result.healthy, false);
    assert.match(result.detail, /failed: no answer in time$/);
  } finally {
    hung.close();
    for (const c of accepted) c.close();
    await accepting.catch(() => {});
  }
});

Deno.test("a probe rejects with the reason of a cancelled signal instead of reporting", async () => {
  await using fake = startFakeOllama();
  const controller = new AbortController();
  const reason = new Error("node stopping");
  controller.abort(reason);
  const adapter = createOllamaAdapter("llm", http(fake.url));
  await assert.rejects(adapter.probe!({ signal: controller.signal }), (err) => err === reason);
  await adapter.close?.();
});

Deno.test("cli probe reports each profile: a missing executable is unhealthy with the reason", async () => {
  const profile = (name: string, command: string) => ({
    name,
    command,
    args: [],
    resumeArgs: [],
    env: {},
    cwd: "",
    timeoutMs: 0,
    description: "",
  });
  const adapter = createCliAdapter("cli", {
    profiles: [profile("shell", "sh"), profile("ghost", "/nonexistent/iop-no-such-tool")],
  });
  const result = await adapter.probe!({ signal: signal() });
  assert.equal(result.healthy, true);
  assert.equal(result.detail, "1 of 2 profiles runnable; not runnable: ghost");
  assert.equal(result.targets?.shell?.healthy, true);
  assert.deepEqual(result.targets?.ghost, {
    healthy: false,
    detail: "command '/nonexistent/iop-no-such-tool' not found (not an executable file on PATH)",
  });
  const none = createCliAdapter("cli2", {
    profiles: [profile("ghost", "iop-no-such-tool-on-path")],
  });
  const dead = await none.probe!({ signal: signal() });
  assert.equal(dead.healthy, false);
  assert.equal(dead.detail, "0 of 1 profiles runnable; not runnable: ghost");
});

Deno.test("mock probe is always healthy", async () => {
  const adapter = createMockAdapter("mock", {} as Parameters<typeof createMockAdapter>[1]);
  assert.deepEqual(await adapter.probe!({ signal: signal() }), {
    healthy: true,
    detail: "mock adapter",
  });
});
