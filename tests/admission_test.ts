/**
 * Provider pools and admission through the public surfaces: bounded FIFO queues, 429/503 when
 * full, least-loaded dispatch, CLI routes that never queue, and one retry when a node is lost
 * before its first output. Real Edge HTTP, node wire and NodeCores in this process.
 */
import assert from "node:assert/strict";
import { Ollama } from "ollama";
import OpenAI from "openai";
import { mockNode, startStack, type TestEdge } from "./stack.ts";
import { until } from "./util.ts";

function openai(stack: TestEdge): OpenAI {
  return new OpenAI({ apiKey: "none", baseURL: `${stack.url}/v1`, maxRetries: 0 });
}

const SLOW = { tokens: 3, token_delay_ms: 5, start_delay_ms: 400 };

Deno.test("a pool of capacity N with N+M+K requests runs N, queues M and answers K with 429", async () => {
  const N = 2, M = 3, K = 2;
  await using stack = await startStack({
    http: true,
    config: {
      nodes: [
        mockNode("node-a", { providers: [{ id: "a-demo", group: "demo", max: N }], mock: SLOW }),
      ],
      models: [{ name: "demo", route: "pool", queue: { max_length: M, max_wait_ms: 20_000 } }],
    },
  });
  const client = openai(stack);
  const results = Array.from(
    { length: N + M + K },
    (_, i) =>
      client.chat.completions.create({
        model: "demo",
        messages: [{ role: "user", content: `q${i}` }],
      })
        .then((r) => ({ ok: true as const, text: r.choices[0]!.message.content }))
        .catch((err: unknown) => ({ ok: false as const, err })),
  );
  await until("N running and M queued", () => {
    const s = stack.service.pools.stats("a-demo");
    return s.inFlight === N && s.queued === M;
  });
  assert.equal(stack.service.pools.queueDepth("demo"), M);
  const status = stack.service.status();
  const resource = status.nodes[0]!.resources[0]!;
  assert.deepEqual([resource.kind, resource.inFlight, resource.queued], ["provider", N, M]);

  const settled = await Promise.all(results);
  const rejected = settled.filter((r) => !r.ok);
  assert.equal(settled.filter((r) => r.ok).length, N + M);
  assert.equal(rejected.length, K);
  for (const r of rejected) {
    const err = (r as { err: unknown }).err;
    assert.ok(err instanceof OpenAI.RateLimitError, String(err));
    assert.equal(err.status, 429);
    assert.ok(Number(err.headers?.get("retry-after")) >= 1);
  }
  assert.deepEqual(stack.service.pools.stats("a-demo"), { inFlight: 0, queued: 0 });
});

Deno.test("a CLI route under the same load is never queued", async () => {
  await using stack = await startStack({
    http: true,
    config: {
      nodes: [{
        ...mockNode("node-a", { providers: [{ id: "a-demo", group: "demo", max: 1 }] }),
        adapters: [
          { name: "mock", kind: "mock" },
          {
            name: "cli",
            kind: "cli",
            profiles: [{
              name: "slow",
              command: "sh",
              args: ["-c", "sleep 0.3; echo done"],
              max_concurrency: 6,
            }],
          },
        ],
      }],
      models: [
        { name: "demo", route: "pool", queue: { max_length: 0, max_wait_ms: 1000 } },
        { name: "slow-cli", route: "direct", adapter: "cli", target: "slow" },
      ],
    },
  });
  const client = openai(stack);
  let peak = 0;
  const off = stack.service.subscribe(() => {
    peak = Math.max(peak, stack.service.status().runsInFlight);
  });
  const answers = await Promise.all(
    Array.from({ length: 6 }, () =>
      client.chat.completions.create({
        model: "slow-cli",
        messages: [{ role: "user", content: "go" }],
      })),
  );
  off();
  assert.equal(answers.length, 6);
  assert.ok(answers.every((a) => a.choices[0]!.message.content?.trim() === "done"));
  assert.equal(peak, 6, "all six CLI runs were in flight together");
  assert.deepEqual(stack.service.pools.stats("a-demo"), { inFlight: 0, queued: 0 });
});

Deno.test("pool runs go to the least-loaded provider across nodes", async () => {
  await using stack = await startStack({
    http: true,
    config: {
      nodes: [
        mockNode("node-a", { providers: [{ id: "a-demo", group: "demo", max: 2 }], mock: SLOW }),
        mockNode("node-b", { providers: [{ id: "b-demo", group: "demo", max: 2 }], mock: SLOW }),
      ],
      models: [{ name: "demo", route: "pool" }],
    },
  });
  const client = openai(stack);
  const all = Promise.all(
    Array.from({ length: 4 }, () =>
      client.chat.completions.create({
        model: "demo",
        messages: [{ role: "user", content: "x" }],
      })),
  );
  await until("both providers full", () =>
    stack.service.pools.stats("a-demo").inFlight === 2 &&
    stack.service.pools.stats("b-demo").inFlight === 2);
  await all;
});

Deno.test("a run whose node is lost before its first output is retried once on another provider", async () => {
  await using stack = await startStack({
    http: true,
    config: {
      nodes: [
        mockNode("node-a", { providers: [{ id: "a-demo", group: "demo", max: 1 }], mock: SLOW }),
        mockNode("node-b", { providers: [{ id: "b-demo", group: "demo", max: 1 }], mock: SLOW }),
      ],
      models: [{ name: "demo", route: "pool" }],
    },
  });
  const started = new Promise<string>((resolve) => {
    const off = stack.service.subscribe((e) => {
      if (e.type === "run_started") {
        off();
        resolve(e.nodeId);
      }
    });
  });
  const answer = openai(stack).chat.completions.create({
    model: "demo",
    messages: [{ role: "user", content: "survive" }],
  });
  const first = await started;
  await stack.nodes.get(first)!.stop();
  const completion = await answer;
  assert.equal(completion.choices[0]!.message.content, "survive tok1 tok2");
  const other = first === "node-a" ? "node-b" : "node-a";
  const history = await stack.service.nodeCommand(other, { type: "history", limit: 5 });
  assert.equal(history.type === "history" ? history.runs[0]?.status : "", "completed");
});

Deno.test("a full pool answers Ollama clients 503 with Ollama's busy message", async () => {
  await using stack = await startStack({
    http: true,
    config: {
      nodes: [
        mockNode("node-a", { providers: [{ id: "a-demo", group: "demo", max: 1 }], mock: SLOW }),
      ],
      models: [{ name: "demo", route: "pool", queue: { max_length: 0, max_wait_ms: 1000 } }],
    },
  });
  const ollama = new Ollama({ host: stack.url });
  const first = ollama.chat({ model: "demo", messages: [{ role: "user", content: "a" }] });
  await until("one running", () => stack.service.pools.stats("a-demo").inFlight === 1);
  await assert.rejects(
    ollama.chat({ model: "demo", messages: [{ role: "user", content: "b" }] }),
    (err: Error & { status_code?: number }) => {
      assert.equal(err.status_code, 503);
      assert.equal(
        err.message,
        "server busy, please try again.  maximum pending requests exceeded",
      );
      return true;
    },
  );
  await first;
});
