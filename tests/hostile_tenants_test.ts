/**
 * Tenants at the Edge, end to end: named API keys with model allow-lists, concurrency and rate
 * limits answered 429 with Retry-After in each API's shape (driven by the unmodified `openai`
 * and `ollama` clients), per-tenant metrics, and a flooding tenant beside a quiet one on a
 * saturated pool — real Edge HTTP server, real node wire, real NodeCores with the mock adapter.
 */
import assert from "node:assert/strict";
import { Ollama } from "ollama";
import OpenAI from "openai";
import { hashSecret } from "../shared/secrets.ts";
import { mockNode, startStack, type TestEdge } from "./stack.ts";
import { until } from "./util.ts";

const KEYS = {
  alpha: "alpha-key",
  beta: "beta-key",
  gamma: "gamma-key",
  flood: "f",
  quiet: "q",
  ops: "ops-key",
};

function tenantConfig(mock: Record<string, unknown> = {}, max = 4): Record<string, unknown> {
  return {
    tenants: [
      { name: "alpha", keys: [hashSecret(KEYS.alpha)], concurrent_runs: 1 },
      { name: "beta", keys: [KEYS.beta], requests_per_minute: 2 },
      { name: "gamma", keys: [KEYS.gamma], models: ["mock-direct"] },
      { name: "flood", keys: [KEYS.flood] },
      { name: "quiet", keys: [KEYS.quiet] },
      { name: "ops", keys: [KEYS.ops], models: [], operator: true },
    ],
    nodes: [mockNode("node-a", { providers: [{ id: "a-demo", group: "demo", max }], mock })],
    models: [
      { name: "demo", route: "pool", queue: { max_length: 256, max_wait_ms: 60_000 } },
      { name: "mock-direct", route: "direct", adapter: "mock", target: "echo" },
    ],
  };
}

function openai(stack: TestEdge, apiKey: string): OpenAI {
  return new OpenAI({ apiKey, baseURL: `${stack.url}/v1`, maxRetries: 0 });
}

const chat = (model = "demo", content = "hello") => ({
  model,
  messages: [{ role: "user" as const, content }],
});

async function metricValue(stack: TestEdge, line: RegExp): Promise<number> {
  const text = await (await fetch(`${stack.url}/metrics`)).text();
  const match = text.split("\n").find((l) => line.test(l));
  return match ? Number(match.split(" ").at(-1)) : 0;
}

Deno.test("a tenant at its concurrent_runs limit gets OpenAI's 429 with Retry-After; others are served", async () => {
  await using stack = await startStack({
    http: true,
    config: tenantConfig({ tokens: 20, token_delay_ms: 25 }),
  });
  const alpha = openai(stack, KEYS.alpha);
  const running = await alpha.chat.completions.create({ ...chat(), stream: true });
  const refused = await alpha.chat.completions.create(chat()).catch((e) => e);
  assert.ok(refused instanceof OpenAI.APIError, String(refused));
  assert.equal(refused.status, 429);
  assert.equal(refused.code, "rate_limit_exceeded");
  assert.match(refused.message, /Tenant 'alpha' already has 1 runs in flight/);
  assert.ok(Number(refused.headers?.get("retry-after")) >= 1);
  // Another tenant is not held back by alpha's limit.
  const other = await openai(stack, KEYS.quiet).chat.completions.create(chat());
  assert.equal(other.choices[0]!.finish_reason, "stop");
  let text = "";
  for await (const chunk of running) text += chunk.choices[0]?.delta.content ?? "";
  assert.ok(text.length > 0);
  // The finished stream gave its slot back.
  const again = await alpha.chat.completions.create(chat());
  assert.equal(again.choices[0]!.finish_reason, "stop");
  assert.equal(
    await metricValue(
      stack,
      /^iop_edge_tenant_requests_total\{tenant="alpha",outcome="limited_concurrent_runs"\}/,
    ),
    1,
  );
  assert.equal(
    await metricValue(
      stack,
      /^iop_edge_tenant_requests_total\{tenant="alpha",outcome="admitted"\}/,
    ),
    2,
  );
});

Deno.test("requests_per_minute answers the Ollama client 429 with Retry-After from the rate", async () => {
  await using stack = await startStack({ http: true, config: tenantConfig() });
  const ollama = new Ollama({
    host: stack.url,
    headers: { authorization: `Bearer ${KEYS.beta}` },
  });
  for (let i = 0; i < 2; i++) {
    const answer = await ollama.chat({ model: "demo", messages: [{ role: "user", content: "x" }] });
    assert.equal(answer.done, true);
  }
  const err = await ollama.chat({ model: "demo", messages: [{ role: "user", content: "x" }] })
    .catch((e) => e);
  assert.equal(err.name, "ResponseError");
  assert.equal(err.status_code, 429);
  assert.match(err.error, /Tenant 'beta' is over its limit of 2 requests per minute/);
  const raw = await fetch(`${stack.url}/api/chat`, {
    method: "POST",
    headers: { authorization: `Bearer ${KEYS.beta}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "demo", messages: [{ role: "user", content: "x" }] }),
  });
  assert.equal(raw.status, 429);
  // Two per minute: the next request is due in at most 30 s.
  const retryAfter = Number(raw.headers.get("retry-after"));
  assert.ok(retryAfter >= 1 && retryAfter <= 30, `retry-after ${retryAfter}`);
  assert.ok("error" in await raw.json());
});

Deno.test("a tenant sees and uses only the models it may: others are 'not found' to it", async () => {
  await using stack = await startStack({ http: true, config: tenantConfig() });
  const gamma = openai(stack, KEYS.gamma);
  const ids = [];
  for await (const model of gamma.models.list()) ids.push(model.id);
  assert.deepEqual(ids, ["mock-direct"]);
  const refused = await gamma.chat.completions.create(chat("demo")).catch((e) => e);
  assert.ok(refused instanceof OpenAI.APIError);
  assert.equal(refused.status, 404);
  assert.match(refused.message, /The model 'demo' does not exist or you do not have access to it/);
  const unknown = await gamma.chat.completions.create(chat("no-such")).catch((e) => e);
  assert.equal(unknown.status, 404, "an unknown model and a forbidden one look the same");
  const tags = await new Ollama({
    host: stack.url,
    headers: { authorization: `Bearer ${KEYS.gamma}` },
  }).list();
  assert.deepEqual(tags.models.map((m) => m.name), ["mock-direct"]);
  const ok = await gamma.chat.completions.create(chat("mock-direct"));
  assert.equal(ok.choices[0]!.finish_reason, "stop");
  // Everyone else still sees every model.
  const all = [];
  for await (const model of openai(stack, KEYS.alpha).models.list()) all.push(model.id);
  assert.deepEqual(all, ["demo", "mock-direct"]);
  const wrongKey = await openai(stack, "nobody").models.list().catch((e) => e);
  assert.equal(wrongKey.status, 401);
});

Deno.test("a quiet tenant beside a flooding one on a saturated pool is served at its share", async () => {
  // Two slots, each run about 60 ms: the flood's 40 requests take over a second to drain.
  await using stack = await startStack({
    http: true,
    config: tenantConfig({ tokens: 6, token_delay_ms: 10 }, 2),
  });
  const finished: string[] = [];
  const flood = openai(stack, KEYS.flood);
  const floods = Array.from(
    { length: 40 },
    (_, i) =>
      flood.chat.completions.create(chat("demo", `f${i}`)).then(() => finished.push(`f${i}`)),
  );
  // Let the flood fill the queue before the quiet tenant arrives.
  await until("the flood queued", () => stack.service.pools.queueDepth("demo") >= 30);
  const quiet = openai(stack, KEYS.quiet);
  const latencies: number[] = [];
  for (let i = 0; i < 5; i++) {
    const start = performance.now();
    const answer = await quiet.chat.completions.create(chat("demo", `q${i}`));
    latencies.push(performance.now() - start);
    finished.push(`q${i}`);
    assert.equal(answer.choices[0]!.finish_reason, "stop");
  }
  await Promise.all(floods);
  // In one global FIFO the first quiet request would finish after the ~30 queued flood runs.
  // Fairly, each quiet request waits for at most one flood turn per slot.
  const lastQuiet = finished.indexOf("q4");
  assert.ok(lastQuiet < 25, `quiet's fifth answer came at position ${lastQuiet}: ${finished}`);
  assert.equal(finished.filter((f) => f.startsWith("f")).length, 40, "the flood lost nothing");
  if (Deno.env.get("IOP_TEST_REPORT")) {
    console.log(`quiet latencies during the flood (ms): ${latencies.map(Math.round).join(", ")}`);
  }
});

Deno.test("only an operator tenant reads the Edge's status and node run outputs", async () => {
  await using stack = await startStack({ http: true, config: tenantConfig() });
  const get = (path: string, key?: string) =>
    fetch(`${stack.url}${path}`, key ? { headers: { authorization: `Bearer ${key}` } } : {});
  // A run of alpha's: its output is what another tenant must not read.
  await openai(stack, KEYS.alpha).chat.completions.create(chat());
  const history = await stack.service.nodeCommand("node-a", { type: "history", limit: 1 });
  assert.equal(history.type, "history");
  const output = `/api/iop/nodes/node-a/runs/${history.runs[0]!.runId}/output`;
  for (const path of ["/api/iop/status", output]) {
    const anonymous = await get(path);
    assert.equal(anonymous.status, 401, path);
    await anonymous.body?.cancel();
    const tenant = await get(path, KEYS.quiet);
    assert.equal(tenant.status, 403, path);
    assert.match(await tenant.text(), /tenant 'quiet' may not read operator views/);
  }
  const status = await get("/api/iop/status", KEYS.ops);
  assert.equal(status.status, 200);
  assert.equal((await status.json()).nodes[0].id, "node-a");
  const read = await get(output, KEYS.ops);
  assert.equal(read.status, 200, await read.clone().text());
  assert.ok((await read.text()).length > 0);
});
