/**
 * The Ollama-compatible surface, driven by the unmodified `ollama` client against a real Edge
 * HTTP server, real node wire and real NodeCores.
 */
import assert from "node:assert/strict";
import { Ollama } from "ollama";
import { mockAnswer } from "../services/node/adapters/mock.ts";
import { mockNode, startStack, type TestEdge } from "./stack.ts";

const KEY = "ollama-edge-key";

function config(): Record<string, unknown> {
  return {
    http: { api_keys: [KEY] },
    nodes: [mockNode("node-a", { providers: [{ id: "a-demo", group: "demo", max: 2 }] })],
    models: [{ name: "demo", route: "pool" }, {
      name: "direct",
      route: "direct",
      adapter: "mock",
      target: "echo",
    }],
  };
}

function client(stack: TestEdge, key = KEY): Ollama {
  return new Ollama({ host: stack.url, headers: { authorization: `Bearer ${key}` } });
}

Deno.test("the ollama client lists the models and reads the version", async () => {
  await using stack = await startStack({ http: true, config: config() });
  const tags = await client(stack).list();
  assert.deepEqual(tags.models.map((m) => m.name), ["demo", "direct"]);
  assert.match(tags.models[0]!.digest, /^[0-9a-f]{64}$/);
  const version = await client(stack).version();
  assert.match(version.version, /^\d+\.\d+\.\d+$/);
});

Deno.test("ollama chat without streaming returns one done object with counts", async () => {
  await using stack = await startStack({ http: true, config: config() });
  const answer = await client(stack).chat({
    model: "demo:latest",
    messages: [{ role: "user", content: "red green blue" }],
    stream: false,
  });
  assert.equal(answer.message.role, "assistant");
  assert.equal(answer.message.content, mockAnswer("red green blue", 4));
  assert.equal(answer.done, true);
  assert.equal(answer.done_reason, "stop");
  assert.equal(answer.prompt_eval_count, 3);
  assert.equal(answer.eval_count, 4);
  assert.ok(answer.total_duration > 0);
});

Deno.test("ollama chat streams NDJSON pieces and a final done object", async () => {
  await using stack = await startStack({ http: true, config: config() });
  const stream = await client(stack).chat({
    model: "demo",
    messages: [{ role: "user", content: "a b" }],
    stream: true,
  });
  const parts = [];
  for await (const part of stream) parts.push(part);
  assert.equal(parts.length, 5);
  assert.ok(parts.slice(0, 4).every((p) => p.done === false));
  assert.equal(parts.map((p) => p.message.content).join(""), mockAnswer("a b", 4));
  assert.equal(parts.at(-1)!.done, true);
  assert.equal(parts.at(-1)!.eval_count, 4);

  const raw = await fetch(`${stack.url}/api/chat`, {
    method: "POST",
    headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "demo", messages: [{ role: "user", content: "x" }] }),
  });
  assert.equal(raw.headers.get("content-type"), "application/x-ndjson");
  assert.equal((await raw.text()).trim().split("\n").length, 5, "streams by default");
});

Deno.test("ollama generate answers from a prompt, streaming and not", async () => {
  await using stack = await startStack({ http: true, config: config() });
  const one = await client(stack).generate({ model: "direct", prompt: "sun moon", stream: false });
  assert.equal(one.response, mockAnswer("sun moon", 4));
  assert.equal(one.done, true);
  let text = "";
  for await (
    const part of await client(stack).generate({
      model: "direct",
      prompt: "sun moon",
      stream: true,
    })
  ) {
    text += part.response;
  }
  assert.equal(text, mockAnswer("sun moon", 4));
});

Deno.test("ollama errors use Ollama's shape: unknown model 404, wrong key 401, bad field 400", async () => {
  await using stack = await startStack({ http: true, config: config() });
  await assert.rejects(
    client(stack).chat({ model: "nope", messages: [{ role: "user", content: "x" }] }),
    (err: Error & { status_code?: number }) => {
      assert.equal(err.status_code, 404);
      assert.equal(err.message, "model 'nope' not found");
      return true;
    },
  );
  await assert.rejects(client(stack, "wrong").list(), (err: Error & { status_code?: number }) => {
    assert.equal(err.status_code, 401);
    assert.equal(err.message, "unauthorized");
    return true;
  });
  const res = await fetch(`${stack.url}/api/chat`, {
    method: "POST",
    headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "demo", messages: [{ role: "wizard", content: "x" }] }),
  });
  assert.equal(res.status, 400);
  assert.match((await res.json()).error, /'messages\[0\]\.role' must be one of/);
});

Deno.test("the Edge status endpoint stays reachable beside the /api surface", async () => {
  await using stack = await startStack({ http: true, config: config() });
  const res = await fetch(`${stack.url}/api/iop/status`, {
    headers: { authorization: `Bearer ${KEY}` },
  });
  assert.equal(res.status, 200);
  const status = await res.json();
  assert.equal(status.nodes[0].resources[0].kind, "provider");
  assert.equal(status.nodes[0].resources[0].id, "a-demo");
  assert.equal(status.nodes[0].resources.length, 1);
});

Deno.test("unknown /api paths and wrong methods answer Ollama's {error} JSON, not text", async () => {
  await using stack = await startStack({ http: true, config: config() });
  const headers = { authorization: `Bearer ${KEY}` };
  const unknown = await fetch(`${stack.url}/api/nope`, { headers });
  assert.equal(unknown.status, 404);
  assert.match((await unknown.json()).error, /unknown path GET \/api\/nope/);
  const wrong = await fetch(`${stack.url}/api/chat`, { headers });
  assert.equal(wrong.status, 405);
  assert.equal(wrong.headers.get("allow"), "POST");
  assert.match((await wrong.json()).error, /method GET not allowed; use POST/);
  const status = await fetch(`${stack.url}/api/iop/status`, { headers });
  assert.equal(status.status, 200, "the Edge's own /api route keeps precedence");
  await status.body?.cancel();
});
