/**
 * Ollama's embedding routes at their edges, through the unmodified `ollama` client against a
 * real Edge and Node: nothing to embed is how Ollama clients load a model (200, no vectors, no
 * run, once the model is the caller's and embeds), and `/api/embed` takes at most 2048 inputs,
 * as `/v1/embeddings` does, so one request cannot keep a backend (and its Node) busy for long.
 */
import assert from "node:assert/strict";
import { Ollama } from "ollama";
import { mockNode, startStack, type TestEdge } from "./stack.ts";

const KEYS = { all: "key-all", chat: "key-chat-only" };

function startEmbedStack(): Promise<TestEdge> {
  return startStack({
    http: true,
    tls: "off",
    config: {
      tenants: [
        { name: "all", keys: [KEYS.all] },
        { name: "chat-only", keys: [KEYS.chat], models: ["chat"] },
      ],
      nodes: [mockNode("n1")],
      models: [
        {
          name: "embed",
          route: "direct",
          adapter: "mock",
          target: "e",
          capabilities: ["embeddings"],
        },
        { name: "chat", route: "direct", adapter: "mock", target: "c" },
      ],
    },
  });
}

type ResponseError = Error & { status_code?: number };

async function refusal(promise: Promise<unknown>): Promise<ResponseError> {
  const err = await promise.then(() => undefined, (e) => e as ResponseError);
  assert.ok(err instanceof Error, "expected a refusal");
  return err;
}

Deno.test("an embed with nothing to embed loads the model as Ollama answers it: 200, no vectors, no run", async () => {
  await using edge = await startEmbedStack();
  const ol = new Ollama({ host: edge.url, headers: { authorization: `Bearer ${KEYS.all}` } });
  for (const input of ["", []]) {
    const answer = await ol.embed({ model: "embed", input });
    assert.equal(answer.model, "embed");
    assert.deepEqual(answer.embeddings, []);
  }
  assert.deepEqual((await ol.embeddings({ model: "embed", prompt: "" })).embedding, []);
  assert.deepEqual(edge.nodes.get("n1")!.store.history(10), [], "no run reached the node");
  // Still the caller's model and an embedding model: what a real embed would be refused for.
  const chat = await refusal(ol.embed({ model: "chat", input: [] }));
  assert.equal(chat.status_code, 400);
  assert.match(chat.message, /does not declare embeddings/);
  const other = new Ollama({ host: edge.url, headers: { authorization: `Bearer ${KEYS.chat}` } });
  const foreign = await refusal(other.embed({ model: "embed", input: "" }));
  assert.equal(foreign.status_code, 404);
  assert.equal((await refusal(ol.embed({ model: "nope", input: [] }))).status_code, 404);
  // And a real input embeds as before.
  assert.equal((await ol.embed({ model: "embed", input: ["a", "b"] })).embeddings.length, 2);
});

Deno.test("/api/embed refuses more than 2048 inputs naming input, and runs nothing for them", async () => {
  await using edge = await startEmbedStack();
  const ol = new Ollama({ host: edge.url, headers: { authorization: `Bearer ${KEYS.all}` } });
  const err = await refusal(ol.embed({ model: "embed", input: Array(2049).fill("x") }));
  assert.equal(err.status_code, 400);
  assert.match(err.message, /input.*must hold at most 2048 strings: got 2049/);
  assert.deepEqual(edge.nodes.get("n1")!.store.history(10), []);
  const most = await ol.embed({ model: "embed", input: Array(2048).fill("x") });
  assert.equal(most.embeddings.length, 2048);
});
