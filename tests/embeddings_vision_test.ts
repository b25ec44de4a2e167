/**
 * Embeddings and images end to end: the unmodified `openai` and `ollama` clients talk to a real
 * Edge whose Node embeds and chats through the real mock, ollama and openai_compat adapters over
 * the real node wire, against fake Ollama and OpenAI servers that record what reached them. The
 * vectors are the fakes' (and the mock's) deterministic ones, so order and values are checked
 * exactly; refusals are 400s naming the field, and a tenant's foreign model is not found.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { Ollama } from "ollama";
import { createLogger } from "../shared/log.ts";
import { fakeEmbedding, type RecordedRequest } from "../shared/testing/fake_model_server.ts";
import { type FakeOllama, startFakeOllama } from "../shared/testing/fake_ollama.ts";
import { type FakeOpenAI, startFakeOpenAI } from "../shared/testing/fake_openai.ts";
import { mockEmbedding } from "../services/node/adapters/mock.ts";
import { startEdge, startNode, type TestEdge } from "./stack.ts";
import { until } from "./util.ts";

const KEYS = { all: "key-of-tenant-all", chatOnly: "key-of-tenant-chat-only" };

/** The fakes' vector length. */
const DIMS = 8;

/** A 1x1 PNG and the first bytes of a JPEG, as base64. */
const PNG =
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
const JPEG = btoa(String.fromCharCode(0xff, 0xd8, 0xff, 0xe0, 0, 16, 74, 70, 73, 70));
const PNG_URL = `data:image/png;base64,${PNG}`;
const bytesOf = (base64: string) => Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));

/** What the ollama client throws for an error answer. */
type ResponseError = Error & { status_code?: number; error?: string };

interface Stack {
  edge: TestEdge;
  ollama: FakeOllama;
  openai: FakeOpenAI;
  /** Clients of the tenant that may use every model. */
  oa: OpenAI;
  ol: Ollama;
  [Symbol.asyncDispose](): Promise<void>;
}

const pool = (id: string, adapter: string, target: string) => ({
  id: `p-${id}`,
  adapter,
  target,
  model_group: id,
  max_concurrency: 4,
});

/**
 * Pools: `mock-embed`, `local-embed` (ollama), `cloud-embed` (openai_compat) embed;
 * `mock-vision`, `local-vision`, `cloud-vision` chat with images; `local-chat` only chats; the
 * direct `shell-vision` declares vision on a CLI, which cannot carry images; `slow-embed`
 * never answers.
 */
async function startStack(): Promise<Stack> {
  const logger = createLogger("test", { level: "error", writer: () => {} });
  const ollama = startFakeOllama({ models: ["nomic-embed-text", "llava", "llama3.2"] });
  const openai = startFakeOpenAI({
    models: ["text-embed", "gpt-vision", "slow-embed"],
    // Answers only when the client goes away: a request in flight for as long as a test needs.
    perModel: { "slow-embed": { headersDelayMs: 600_000 } },
  });
  let edge: TestEdge | undefined;
  try {
    edge = await startEdge({
      logger,
      http: true,
      config: {
        // The link cases below need links on (off by default: a backend would fetch them).
        http: { allow_image_links: true },
        tenants: [
          { name: "all", keys: [KEYS.all] },
          { name: "chat-only", keys: [KEYS.chatOnly], models: ["local-chat"] },
        ],
        nodes: [{
          id: "n1",
          token: "n1-token",
          adapters: [
            { name: "mock", kind: "mock", tokens: 8, token_delay_ms: 0 },
            { name: "ollama", kind: "ollama", base_url: ollama.url, connect_timeout_ms: 2_000 },
            {
              name: "openai",
              kind: "openai_compat",
              base_url: `${openai.url}/v1`,
              connect_timeout_ms: 2_000,
            },
            { name: "sh", kind: "cli", profiles: [{ name: "echo", command: "echo" }] },
          ],
          providers: [
            pool("mock-embed", "mock", "echo"),
            pool("local-embed", "ollama", "nomic-embed-text"),
            pool("cloud-embed", "openai", "text-embed"),
            pool("mock-vision", "mock", "echo"),
            pool("local-vision", "ollama", "llava"),
            pool("cloud-vision", "openai", "gpt-vision"),
            pool("local-chat", "ollama", "llama3.2"),
            pool("slow-embed", "openai", "slow-embed"),
          ],
        }],
        models: [
          { name: "mock-embed", route: "pool", capabilities: ["embeddings"] },
          { name: "local-embed", route: "pool", capabilities: ["embeddings"] },
          { name: "cloud-embed", route: "pool", capabilities: ["embeddings"] },
          { name: "mock-vision", route: "pool", capabilities: ["chat", "vision"] },
          { name: "local-vision", route: "pool", capabilities: ["chat", "vision"] },
          { name: "cloud-vision", route: "pool", capabilities: ["chat", "vision"] },
          { name: "local-chat", route: "pool" },
          { name: "slow-embed", route: "pool", capabilities: ["embeddings"] },
          {
            name: "shell-vision",
            route: "direct",
            adapter: "sh",
            target: "echo",
            capabilities: ["chat", "vision"],
          },
        ],
      },
    });
    await startNode(edge, { readyMs: 5_000 });
  } catch (err) {
    await edge?.close();
    await ollama.close();
    await openai.close();
    throw err;
  }
  const url = edge.url;
  return {
    edge,
    ollama,
    openai,
    oa: openaiClient(url, KEYS.all),
    ol: ollamaClient(url, KEYS.all),
    async [Symbol.asyncDispose]() {
      await edge.close();
      ollama.log.stopAll();
      openai.log.stopAll();
      await ollama.close();
      await openai.close();
    },
  };
}

function openaiClient(url: string, key: string): OpenAI {
  return new OpenAI({ baseURL: `${url}/v1`, apiKey: key, maxRetries: 0 });
}

function ollamaClient(url: string, key: string): Ollama {
  return new Ollama({ host: url, headers: { authorization: `Bearer ${key}` } });
}

/** The bodies of the completed POSTs the fake received on `path`, in order. */
function posted(fake: { requests: RecordedRequest[] }, path: string): Record<string, unknown>[] {
  return fake.requests
    .filter((r) => r.method === "POST" && r.path === path)
    .map((r) => r.body as Record<string, unknown>);
}

/** The vector each backend answers for `text`, `dims` long. */
const expected = {
  "mock-embed": (text: string, dims = DIMS) => mockEmbedding(text, dims).map(Math.fround),
  "local-embed": (text: string) => fakeEmbedding(text, DIMS),
  "cloud-embed": (text: string) => fakeEmbedding(text, DIMS),
};

/** Asserts that `run` rejects with an OpenAI 400 naming `param`. */
async function refused400(run: Promise<unknown>, param: string, message?: RegExp) {
  await assert.rejects(run, (err: unknown) => {
    assert.ok(err instanceof OpenAI.BadRequestError, String(err));
    assert.equal(err.status, 400);
    assert.equal((err.error as { param?: string }).param, param);
    if (message) assert.match(err.message, message);
    return true;
  });
}

/** Asserts that `run` rejects with an Ollama error of `status` whose message matches. */
async function ollamaRefused(run: Promise<unknown>, status: number, message: RegExp) {
  await assert.rejects(run, (err: ResponseError) => {
    assert.equal(err.status_code, status, String(err));
    assert.match(err.error ?? err.message, message);
    return true;
  });
}

Deno.test("openai embeddings.create answers one vector per input in order, from mock, ollama and openai_compat pools", async () => {
  await using s = await startStack();
  const inputs = ["the quick fox", "jumps", "over the lazy dog"];
  for (const model of ["mock-embed", "local-embed", "cloud-embed"] as const) {
    const answer = await s.oa.embeddings.create({ model, input: inputs, encoding_format: "float" });
    assert.equal(answer.object, "list");
    assert.equal(answer.model, model);
    assert.deepEqual(answer.data.map((d) => d.index), [0, 1, 2]);
    assert.deepEqual(answer.data.map((d) => d.embedding), inputs.map((t) => expected[model](t)));
    assert.ok(answer.usage.prompt_tokens > 0, model);
    assert.equal(answer.usage.total_tokens, answer.usage.prompt_tokens);
  }
  // The mock counts words as its tokens.
  const one = await s.oa.embeddings.create({ model: "mock-embed", input: "one two three" });
  assert.equal(one.usage.prompt_tokens, 3);
  // Each backend got the inputs in its own shape: Ollama's /api/embed, OpenAI's /v1/embeddings.
  assert.deepEqual(posted(s.ollama, "/api/embed").map((b) => [b.model, b.input]), [
    ["nomic-embed-text", inputs],
  ]);
  assert.deepEqual(posted(s.openai, "/v1/embeddings").map((b) => [b.model, b.input]), [
    ["text-embed", inputs],
  ]);
});

Deno.test("the openai client's default base64 vectors and an explicit base64 encoding decode to the float vectors", async () => {
  await using s = await startStack();
  const input = ["alpha beta", "gamma"];
  for (const model of ["mock-embed", "cloud-embed"] as const) {
    // No encoding_format: the client asks for base64 and decodes it into numbers.
    const decoded = await s.oa.embeddings.create({ model, input });
    assert.deepEqual(decoded.data.map((d) => d.embedding), input.map((t) => expected[model](t)));
  }
  const raw = await s.oa.embeddings.create({
    model: "local-embed",
    input,
    encoding_format: "base64",
  });
  const vectors = raw.data.map((d) => {
    assert.equal(typeof d.embedding, "string");
    const bytes = Uint8Array.from(atob(d.embedding as unknown as string), (c) => c.charCodeAt(0));
    return [...new Float32Array(bytes.buffer)];
  });
  assert.deepEqual(vectors, input.map((t) => expected["local-embed"](t)));
});

Deno.test("dimensions reaches each backend and shortens the vectors", async () => {
  await using s = await startStack();
  for (const model of ["mock-embed", "local-embed", "cloud-embed"]) {
    const answer = await s.oa.embeddings.create({ model, input: ["a", "b"], dimensions: 4 });
    assert.deepEqual(answer.data.map((d) => d.embedding.length), [4, 4], model);
  }
  assert.equal(posted(s.ollama, "/api/embed")[0]!.dimensions, 4);
  assert.equal(posted(s.openai, "/v1/embeddings")[0]!.dimensions, 4);
});

Deno.test("ollama embed and the older embeddings answer Ollama's shapes, and truncate reaches the backend", async () => {
  await using s = await startStack();
  const answer = await s.ol.embed({ model: "local-embed", input: ["x y", "z"], truncate: false });
  assert.equal(answer.model, "local-embed");
  assert.deepEqual(answer.embeddings, ["x y", "z"].map((t) => expected["local-embed"](t)));
  assert.equal(answer.prompt_eval_count, 3);
  assert.ok(answer.total_duration > 0);
  assert.equal(posted(s.ollama, "/api/embed")[0]!.truncate, false);
  const single = await s.ol.embed({ model: "cloud-embed", input: "one" });
  assert.deepEqual(single.embeddings, [expected["cloud-embed"]("one")]);
  const old = await s.ol.embeddings({ model: "mock-embed", prompt: "legacy route" });
  assert.deepEqual(old.embedding, expected["mock-embed"]("legacy route"));
});

Deno.test("an embedding run counts as a run with input tokens only: no output tokens in the metrics", async () => {
  await using s = await startStack();
  await s.oa.embeddings.create({ model: "mock-embed", input: ["one two", "three"] });
  await s.ol.embed({ model: "mock-embed", input: "four five six" });
  const metrics = await (await fetch(`${s.edge.url}/metrics`)).text();
  const sample = (route: string, direction: string) =>
    new RegExp(`iop_edge_http_tokens_total\\{route="${route}",direction="${direction}"\\} (\\d+)`)
      .exec(metrics)?.[1];
  assert.equal(sample("/v1/embeddings", "in"), "3");
  assert.equal(sample("/v1/embeddings", "out"), "0");
  assert.equal(sample("/api/embed", "in"), "3");
  assert.equal(sample("/api/embed", "out"), "0");
  assert.doesNotMatch(
    metrics,
    /iop_edge_http_output_tokens_per_second_count\{model="mock-embed"\}/,
  );
  // The node's history holds both runs, completed, with their input tokens.
  const history = s.edge.nodes.get("n1")!.store.history(10);
  assert.deepEqual(
    history.map((r) => [r.status, r.usage?.inputTokens, r.usage?.outputTokens]),
    [["completed", 3, 0], ["completed", 3, 0]],
  );
});

Deno.test("images reach each backend in its own shape from the openai and ollama clients", async () => {
  await using s = await startStack();
  // OpenAI image_url parts to an Ollama model: its bytes in the message's images.
  const local = await s.oa.chat.completions.create({
    model: "local-vision",
    messages: [{
      role: "user",
      content: [{ type: "text", text: "What is this?" }, {
        type: "image_url",
        image_url: { url: PNG_URL },
      }],
    }],
  });
  assert.equal(local.choices[0]!.message.role, "assistant");
  const [toOllama] = posted(s.ollama, "/api/chat");
  assert.deepEqual((toOllama!.messages as unknown[])[0], {
    role: "user",
    content: "What is this?",
    images: [PNG],
  });
  // An http link and detail to an OpenAI-compatible model: content parts as they were sent.
  await s.oa.chat.completions.create({
    model: "cloud-vision",
    messages: [{
      role: "user",
      content: [{ type: "text", text: "Compare" }, {
        type: "image_url",
        image_url: { url: "https://img.example/cat.png", detail: "low" },
      }],
    }],
  });
  // The ollama client's images (bytes it encodes) to an OpenAI-compatible model: data: URLs.
  await s.ol.chat({
    model: "cloud-vision",
    messages: [{
      role: "user",
      content: "Both?",
      images: [bytesOf(PNG), bytesOf(JPEG)],
    }],
    stream: false,
  });
  const [link, fromOllama] = posted(s.openai, "/v1/chat/completions");
  assert.deepEqual((link!.messages as unknown[])[0], {
    role: "user",
    content: [
      { type: "text", text: "Compare" },
      { type: "image_url", image_url: { url: "https://img.example/cat.png", detail: "low" } },
    ],
  });
  assert.deepEqual((fromOllama!.messages as unknown[])[0], {
    role: "user",
    content: [
      { type: "text", text: "Both?" },
      { type: "image_url", image_url: { url: PNG_URL } },
      { type: "image_url", image_url: { url: `data:image/jpeg;base64,${JPEG}` } },
    ],
  });
  // generate's images: the Edge runs it as a one-message chat, the images on that message.
  await s.ol.generate({ model: "local-vision", prompt: "Describe", images: [PNG], stream: false });
  assert.deepEqual((posted(s.ollama, "/api/chat")[1]!.messages as unknown[]).at(-1), {
    role: "user",
    content: "Describe",
    images: [PNG],
  });
  // The mock counts what it was shown.
  const mock = await s.ol.chat({
    model: "mock-vision",
    messages: [{ role: "user", content: "look", images: [PNG, JPEG] }],
    stream: false,
  });
  assert.match(mock.message.content, /^I see 2 images\./);
});

Deno.test("what a model does not declare, or its backend cannot carry, is refused 400 naming the field", async () => {
  await using s = await startStack();
  const image = { type: "image_url" as const, image_url: { url: PNG_URL } };
  const withImage = (url = PNG_URL) => [{
    role: "user" as const,
    content: [{ type: "text" as const, text: "see" }, { ...image, image_url: { url } }],
  }];
  // A chat-only model does not embed; an embeddings model does not chat.
  await refused400(
    s.oa.embeddings.create({ model: "local-chat", input: "x" }),
    "model",
    /does not declare embeddings/,
  );
  await refused400(
    s.oa.chat.completions.create({
      model: "local-embed",
      messages: [{ role: "user", content: "hi" }],
    }),
    "model",
    /does not declare chat/,
  );
  // An image to a model without vision, a link to Ollama, any image to a CLI.
  await refused400(
    s.oa.chat.completions.create({ model: "local-chat", messages: withImage() }),
    "messages[0].content[1]",
    /does not declare vision/,
  );
  await refused400(
    s.oa.chat.completions.create({
      model: "local-vision",
      messages: withImage("https://img.example/cat.png"),
    }),
    "messages[0].content[1]",
    /data: URLs \(base64\) only/,
  );
  await refused400(
    s.oa.chat.completions.create({ model: "shell-vision", messages: withImage() }),
    "messages[0].content[1]",
    /cli adapter, which cannot take images/,
  );
  await refused400(
    s.oa.chat.completions.create({ model: "cloud-vision", messages: withImage("file:///etc/x") }),
    "messages[0].content[1].image_url.url",
    /scheme 'file'/,
  );
  // Token arrays and empty input.
  await refused400(s.oa.embeddings.create({ model: "cloud-embed", input: [1, 2, 3] }), "input");
  await refused400(s.oa.embeddings.create({ model: "cloud-embed", input: [[1, 2], [3]] }), "input");
  await refused400(s.oa.embeddings.create({ model: "cloud-embed", input: [] }), "input");
  await refused400(s.oa.embeddings.create({ model: "cloud-embed", input: ["a", ""] }), "input[1]");
  // The Ollama surface: Ollama's error shape, the field in the message.
  await ollamaRefused(
    s.ol.chat({ model: "local-embed", messages: [{ role: "user", content: "hi" }], stream: false }),
    400,
    /^model: cannot chat with model 'local-embed'/,
  );
  await ollamaRefused(
    s.ol.embed({ model: "local-chat", input: "x" }),
    400,
    /^model: cannot embed with model 'local-chat'/,
  );
  await ollamaRefused(
    s.ol.chat({
      model: "local-chat",
      messages: [{ role: "user", content: "see", images: [PNG] }],
      stream: false,
    }),
    400,
    /^messages\[0\]\.images: cannot send an image/,
  );
  await ollamaRefused(
    s.ol.generate({ model: "shell-vision", prompt: "see", images: [PNG], stream: false }),
    400,
    /^images: model 'shell-vision' is served by a cli adapter/,
  );
  await ollamaRefused(
    s.ol.chat({
      model: "local-vision",
      messages: [{ role: "user", content: "see", images: [btoa("not an image")] }],
      stream: false,
    }),
    400,
    /messages\[0\]\.images\[0\]' is not a PNG, JPEG, GIF or WebP image/,
  );
  // An empty input only loads the model, as in Ollama: no vectors, and no backend call.
  assert.deepEqual((await s.ol.embed({ model: "local-embed", input: [] })).embeddings, []);
  // Nothing refused reached a backend.
  assert.deepEqual(posted(s.ollama, "/api/embed"), []);
  assert.deepEqual(posted(s.ollama, "/api/chat"), []);
  assert.deepEqual(posted(s.openai, "/v1/embeddings"), []);
  assert.deepEqual(posted(s.openai, "/v1/chat/completions"), []);
});

Deno.test("a tenant's embedding request for a model it may not use is not found", async () => {
  await using s = await startStack();
  const oa = openaiClient(s.edge.url, KEYS.chatOnly);
  await assert.rejects(oa.embeddings.create({ model: "cloud-embed", input: "x" }), (err) => {
    assert.ok(err instanceof OpenAI.NotFoundError, String(err));
    assert.equal((err.error as { param?: string }).param, "model");
    return true;
  });
  await ollamaRefused(
    ollamaClient(s.edge.url, KEYS.chatOnly).embed({ model: "cloud-embed", input: "x" }),
    404,
    /^model 'cloud-embed' not found$/,
  );
  // Its own model is refused for what it does, not hidden.
  await refused400(oa.embeddings.create({ model: "local-chat", input: "x" }), "model");
  assert.deepEqual(posted(s.openai, "/v1/embeddings"), []);
});

Deno.test("a client that goes away cancels its embedding run, up to the backend request", async () => {
  await using s = await startStack();
  const abort = new AbortController();
  // A plain fetch: the connection closes the moment it is aborted.
  const answer = fetch(`${s.edge.url}/v1/embeddings`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${KEYS.all}` },
    body: JSON.stringify({ model: "slow-embed", input: ["a", "b"] }),
    signal: abort.signal,
  });
  const backend = await s.openai.log.waitForRequest();
  assert.deepEqual((backend.body as { input: unknown }).input, ["a", "b"]);
  abort.abort();
  await assert.rejects(answer);
  assert.equal(await backend.ended, "client_closed");
  const store = s.edge.nodes.get("n1")!.store;
  const run = await until("the run recorded as cancelled", () => {
    const [last] = store.history(1);
    return last?.status === "cancelled" ? last : undefined;
  });
  assert.equal(run.target, "slow-embed");
});
