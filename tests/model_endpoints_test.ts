/**
 * The model endpoints and each API's error shapes, through the unmodified clients against a real
 * Edge HTTP server, node wire and NodeCore: Ollama's `/api/show` and `/api/ps` (`ollama`),
 * OpenAI's `GET /v1/models/{id}` (`openai`), raw fetch for the 404/405 bodies, and the
 * `@a2a-js/sdk` client refused without a key.
 */
import assert from "node:assert/strict";
import { ClientFactory } from "@a2a-js/sdk/client";
import { Role } from "@a2a-js/sdk";
import { Ollama } from "ollama";
import OpenAI from "openai";
import { memoryTaskStore } from "../services/edge/a2a/task_store.ts";
import { startFakeOpenAI } from "../shared/testing/fake_openai.ts";
import { startStack, type TestEdge } from "./stack.ts";
import { until } from "./util.ts";

/** `alpha` may use every model; `beta` only the `org/*` ones and `direct`, and no agent. */
const KEYS = { alpha: "alpha-key", beta: "beta-key" };

function config(upstream: string): Record<string, unknown> {
  const mock = (name: string, extra: Record<string, unknown> = {}) => ({
    name,
    kind: "mock",
    tokens: 4,
    token_delay_ms: 1,
    ...extra,
  });
  // Slow enough that a run is still going while a test looks at /api/ps; the test cancels it.
  // Long enough to be seen running (about 10 s), short enough to end on its own.
  const slow = { tokens: 500, token_delay_ms: 20 };
  return {
    tenants: [
      { name: "alpha", keys: [KEYS.alpha] },
      { name: "beta", keys: [KEYS.beta], models: ["org/*", "direct"], agents: [] },
    ],
    nodes: [{
      id: "node-a",
      token: "node-a-token",
      adapters: [
        mock("mock"),
        mock("spare"),
        mock("slow", slow),
        mock("slow-alone", slow),
        mock("slow-shared", slow),
        { name: "upstream", kind: "openai_compat", base_url: `${upstream}/v1` },
        {
          name: "cli",
          kind: "cli",
          profiles: [{ name: "hi", command: "sh", args: ["-c", "echo hi"] }],
        },
      ],
      providers: [
        { id: "a-demo", adapter: "mock", target: "demo", model_group: "demo", max_concurrency: 2 },
        {
          id: "a-org",
          adapter: "mock",
          target: "demo",
          model_group: "org/model:tag",
          max_concurrency: 2,
        },
        { id: "a-slow", adapter: "slow", target: "demo", model_group: "slow", max_concurrency: 2 },
        {
          id: "a-shared",
          adapter: "slow-shared",
          target: "demo",
          model_group: "org/slow",
          max_concurrency: 4,
        },
      ],
    }],
    models: [
      { name: "demo", route: "pool", aliases: ["demo-alias"], capabilities: ["chat", "vision"] },
      { name: "org/model:tag", route: "pool" },
      { name: "slow", route: "pool" },
      // Both tenants may use it (beta by `org/*`).
      { name: "org/slow", route: "pool" },
      { name: "direct", route: "direct", adapter: "spare", target: "echo" },
      { name: "slow-direct", route: "direct", adapter: "slow-alone", target: "echo" },
      {
        name: "embedder",
        route: "direct",
        adapter: "spare",
        target: "embed",
        capabilities: ["embeddings"],
      },
      { name: "tools", route: "direct", adapter: "upstream", target: "tool-model" },
      { name: "cli-hi", route: "direct", adapter: "cli", target: "hi" },
    ],
    agents: [{ id: "helper", name: "Helper", kind: "a2a", adapter: "mock", target: "demo" }],
  };
}

/** The fake OpenAI-compatible backend of the `tools` model (it must outlive the stack). */
function startUpstream() {
  return startFakeOpenAI({ models: ["tool-model"] });
}

function startModelStack(upstream: { url: string }): Promise<TestEdge> {
  return startStack({ http: true, a2a: memoryTaskStore(), config: config(upstream.url) });
}

function ollama(stack: TestEdge, key = KEYS.alpha): Ollama {
  return new Ollama({ host: stack.url, headers: { authorization: `Bearer ${key}` } });
}

function openai(stack: TestEdge, key = KEYS.alpha): OpenAI {
  return new OpenAI({ apiKey: key, baseURL: `${stack.url}/v1`, maxRetries: 0 });
}

type StatusError = Error & { status_code?: number };

function ollamaStatus(status: number, message: string | RegExp) {
  return (err: StatusError) => {
    assert.equal(err.status_code, status);
    if (typeof message === "string") assert.equal(err.message, message);
    else assert.match(err.message, message);
    return true;
  };
}

async function post(stack: TestEdge, path: string, body: unknown, key = KEYS.alpha) {
  const res = await fetch(`${stack.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, json: await res.json() };
}

Deno.test("ollama.show describes a model from the config: its capabilities, empty details, no invented facts", async () => {
  await using upstream = startUpstream();
  await using stack = await startModelStack(upstream);
  const show = await ollama(stack).show({ model: "demo" });
  assert.deepEqual(show.capabilities, ["completion", "vision"]);
  assert.deepEqual(show.details, {
    parent_model: "",
    format: "",
    family: "",
    families: null,
    parameter_size: "",
    quantization_level: "",
  });
  assert.deepEqual(show.model_info, {});
  assert.equal(show.modelfile, "");
  assert.equal(show.template, "");
  assert.equal(
    show.modified_at as unknown as string,
    new Date(stack.service.status().startedAtMs).toISOString(),
  );

  const capabilities = async (model: string) => (await ollama(stack).show({ model })).capabilities;
  assert.deepEqual(
    await capabilities("tools"),
    ["completion", "tools"],
    "openai_compat takes tools",
  );
  assert.deepEqual(await capabilities("cli-hi"), ["completion"], "a CLI profile calls no tools");
  assert.deepEqual(await capabilities("direct"), ["completion"], "the mock calls no tools");
  assert.deepEqual(await capabilities("embedder"), ["embedding"]);
  assert.deepEqual(await capabilities("org/model:tag"), ["completion"]);
  assert.deepEqual(await capabilities("demo:latest"), ["completion", "vision"]);
  assert.deepEqual(await capabilities("demo-alias"), ["completion", "vision"]);

  // Ollama's older `name` field, and its `system` override shown back.
  const byName = await post(stack, "/api/show", { name: "direct", system: "Be brief." });
  assert.equal(byName.status, 200);
  assert.equal(byName.json.system, "Be brief.");
  assert.deepEqual(byName.json.capabilities, ["completion"]);
  const verbose = await post(stack, "/api/show", { model: "direct", verbose: true });
  assert.equal(verbose.status, 200);
});

Deno.test("ollama.show answers an unknown or forbidden model 404 like Ollama, and refuses bad fields 400", async () => {
  await using upstream = startUpstream();
  await using stack = await startModelStack(upstream);
  await assert.rejects(
    ollama(stack).show({ model: "nope" }),
    ollamaStatus(404, "model 'nope' not found"),
  );
  await assert.rejects(
    ollama(stack, KEYS.beta).show({ model: "demo" }),
    ollamaStatus(404, "model 'demo' not found"),
    "a model the tenant may not use is not found, like an unknown one",
  );
  assert.deepEqual(
    (await ollama(stack, KEYS.beta).show({ model: "org/model:tag" })).capabilities,
    ["completion"],
  );
  await assert.rejects(
    ollama(stack, "wrong").show({ model: "demo" }),
    ollamaStatus(401, "unauthorized"),
  );

  const cases: [unknown, RegExp][] = [
    [{}, /^'model' is required$/],
    [{ model: "demo", options: { temperature: 1 } }, /^'options' cannot be applied by \/api\/show/],
    [{ model: "demo", keep_alive: "5m" }, /^'keep_alive' is not a field of \/api\/show/],
    [{ model: "demo", verbose: "yes" }, /^'verbose' must be a boolean/],
    [{ model: "demo", name: "direct" }, /^'name' must name the same model as 'model'/],
  ];
  for (const [body, message] of cases) {
    const res = await post(stack, "/api/show", body);
    assert.equal(res.status, 400, JSON.stringify(body));
    assert.match(res.json.error, message);
  }
});

Deno.test("ollama.ps lists the caller's models with runs in flight, and forgets them when the runs end", async () => {
  await using upstream = startUpstream();
  await using stack = await startModelStack(upstream);
  assert.deepEqual((await ollama(stack).ps()).models, [], "nothing runs yet");

  const pooled = await ollama(stack).chat({
    model: "slow",
    messages: [{ role: "user", content: "take your time" }],
    stream: true,
  });
  const direct = await ollama(stack, KEYS.beta).generate({
    model: "slow-direct",
    prompt: "take yours too",
    stream: true,
  }).catch((err) => err as StatusError);
  assert.equal((direct as StatusError).status_code, 404, "beta may not use slow-direct");
  const alone = await ollama(stack).generate({ model: "slow-direct", prompt: "x", stream: true });
  try {
    assert.equal((await pooled[Symbol.asyncIterator]().next()).done, false);
    assert.equal((await alone[Symbol.asyncIterator]().next()).done, false);

    const before = Date.now();
    const running = (await ollama(stack).ps()).models;
    assert.deepEqual(running.map((m) => m.name), ["slow", "slow-direct"]);
    const tags = (await ollama(stack).list()).models;
    for (const entry of running) {
      assert.equal(entry.model, entry.name);
      assert.equal(entry.size, 0);
      assert.equal(entry.size_vram, 0);
      assert.equal(entry.digest, tags.find((t) => t.name === entry.name)!.digest);
      assert.equal(entry.details.family, "");
      const expires = Date.parse(entry.expires_at as unknown as string);
      assert.ok(expires >= before + 4 * 60_000, `expires_at ${entry.expires_at} is ~5 min ahead`);
    }
    assert.deepEqual(
      (await ollama(stack, KEYS.beta).ps()).models,
      [],
      "beta sees no model it may not use",
    );
  } finally {
    pooled.abort();
    alone.abort();
  }
  await until(
    "the cancelled runs to end",
    async () => (await ollama(stack).ps()).models.length === 0,
    30_000,
  );
});

Deno.test("ollama.ps shows a tenant only its own runs, also on a model another tenant runs too", async () => {
  await using upstream = startUpstream();
  await using stack = await startModelStack(upstream);
  const ps = async (key: string) => (await ollama(stack, key).ps()).models.map((m) => m.name);
  const start = async (key: string) => {
    const stream = await ollama(stack, key).chat({
      model: "org/slow",
      messages: [{ role: "user", content: "take your time" }],
      stream: true,
    });
    assert.equal((await stream[Symbol.asyncIterator]().next()).done, false);
    return stream;
  };
  const alphas = await start(KEYS.alpha);
  let betas: Awaited<ReturnType<typeof start>> | undefined;
  try {
    assert.deepEqual(await ps(KEYS.alpha), ["org/slow"]);
    assert.deepEqual(await ps(KEYS.beta), [], "alpha's run on a shared model is not beta's");
    betas = await start(KEYS.beta);
    assert.deepEqual(await ps(KEYS.beta), ["org/slow"]);
    alphas.abort();
    await until("alpha's run to end", async () => (await ps(KEYS.alpha)).length === 0, 30_000);
    assert.deepEqual(await ps(KEYS.beta), ["org/slow"], "beta's run goes on");
  } finally {
    alphas.abort();
    betas?.abort();
  }
  await until("beta's run to end", async () => (await ps(KEYS.beta)).length === 0, 30_000);
});

Deno.test("client.models.retrieve returns the listed model object, ids with / and : included", async () => {
  await using upstream = startUpstream();
  await using stack = await startModelStack(upstream);
  const listed = [];
  for await (const model of openai(stack).models.list()) listed.push(model);
  const demo = await openai(stack).models.retrieve("demo");
  assert.deepEqual(demo, listed.find((m) => m.id === "demo"));
  assert.deepEqual(
    (demo as unknown as { capabilities: { capabilities: string[] } }).capabilities
      .capabilities,
    ["chat", "vision"],
  );

  const org = await openai(stack).models.retrieve("org/model:tag");
  assert.deepEqual(org, listed.find((m) => m.id === "org/model:tag"));
  // A raw client may leave the slash unencoded.
  const raw = await fetch(`${stack.url}/v1/models/org/model:tag`, {
    headers: { authorization: `Bearer ${KEYS.beta}` },
  });
  assert.equal(raw.status, 200);
  assert.equal((await raw.json()).id, "org/model:tag");
  assert.equal((await openai(stack).models.retrieve("demo-alias")).id, "demo");
});

Deno.test("client.models.retrieve of an unknown or forbidden model throws NotFoundError with model_not_found", async () => {
  await using upstream = startUpstream();
  await using stack = await startModelStack(upstream);
  const notFound = (message: RegExp) => (err: unknown) => {
    assert.ok(err instanceof OpenAI.NotFoundError, String(err));
    assert.equal(err.status, 404);
    assert.equal(err.code, "model_not_found");
    assert.equal(err.type, "invalid_request_error");
    assert.equal(err.param, "model");
    assert.match(err.message, message);
    return true;
  };
  await assert.rejects(
    openai(stack).models.retrieve("nope"),
    notFound(/The model 'nope' does not exist/),
  );
  await assert.rejects(
    openai(stack, KEYS.beta).models.retrieve("demo"),
    notFound(/The model 'demo' does not exist or you do not have access to it/),
  );
  await assert.rejects(
    openai(stack, KEYS.beta).models.retrieve("org/other:tag"),
    notFound(/The model 'org\/other:tag' does not exist/),
  );
});

Deno.test("a known path asked with the wrong method gets 405 with Allow in each API's shape; unknown paths 404 JSON", async () => {
  await using upstream = startUpstream();
  await using stack = await startModelStack(upstream);
  const call = async (method: string, path: string, key: string | undefined = KEYS.alpha) => {
    const res = await fetch(`${stack.url}${path}`, {
      method,
      headers: key ? { authorization: `Bearer ${key}` } : {},
    });
    const text = await res.text();
    return {
      status: res.status,
      allow: res.headers.get("allow"),
      json: text ? JSON.parse(text) : undefined,
    };
  };
  const openaiShape = (json: { error: Record<string, unknown> }, code: string) => {
    assert.deepEqual(Object.keys(json.error).sort(), ["code", "message", "param", "type"]);
    assert.equal(json.error.code, code);
    assert.equal(json.error.type, "invalid_request_error");
  };
  for (
    const [method, path, allow] of [
      ["DELETE", "/v1/models", "GET"],
      ["POST", "/v1/models/demo", "GET"],
      ["POST", "/v1/models/org/model:tag", "GET"],
      ["GET", "/v1/chat/completions", "POST"],
      ["GET", "/v1/responses", "POST"],
    ]
  ) {
    const res = await call(method!, path!);
    assert.equal(res.status, 405, `${method} ${path}`);
    assert.equal(res.allow, allow, `${method} ${path}`);
    openaiShape(res.json, "method_not_allowed");
    assert.match(res.json.error.message, new RegExp(`Method ${method} is not allowed`));
  }
  for (
    const [method, path, allow] of [
      ["GET", "/api/show", "POST"],
      ["POST", "/api/ps", "GET"],
      ["DELETE", "/api/tags", "GET"],
      ["GET", "/api/chat", "POST"],
    ]
  ) {
    const res = await call(method!, path!);
    assert.equal(res.status, 405, `${method} ${path}`);
    assert.equal(res.allow, allow, `${method} ${path}`);
    assert.deepEqual(Object.keys(res.json), ["error"]);
    assert.equal(res.json.error, `method ${method} not allowed; use ${allow}`);
  }
  assert.equal((await call("HEAD", "/api/tags")).status, 200, "HEAD is served by the GET route");

  const rpc = await call("GET", "/a2a/helper");
  assert.deepEqual([rpc.status, rpc.allow], [405, "POST"]);
  assert.equal(rpc.json.jsonrpc, "2.0");
  assert.equal(rpc.json.error.code, -32600);
  const card = await call("POST", "/a2a/helper/.well-known/agent-card.json");
  assert.deepEqual([card.status, card.allow], [405, "GET"]);
  assert.match(card.json.error, /method POST not allowed/);

  const v1 = await call("GET", "/v1/nope");
  assert.equal(v1.status, 404);
  openaiShape(v1.json, "unknown_url");
  const api = await call("GET", "/api/nope");
  assert.deepEqual([api.status, api.json], [404, { error: "unknown path GET /api/nope" }]);
  const other = await call("GET", "/nope", undefined);
  assert.deepEqual([other.status, other.json], [404, { error: "unknown path GET /nope" }]);
});

Deno.test("A2A without or with a wrong key: HTTP 401 whose JSON-RPC error says Unauthorized, also through the SDK", async () => {
  await using upstream = startUpstream();
  await using stack = await startModelStack(upstream);
  const send = (key?: string) =>
    fetch(`${stack.url}/a2a/helper`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "A2A-Version": "1.0",
        ...(key ? { authorization: `Bearer ${key}` } : {}),
      },
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: 7,
        method: "SendMessage",
        params: { message: { messageId: "m", role: "ROLE_USER", parts: [{ text: "hi" }] } },
      }),
    });
  for (const key of [undefined, "wrong"]) {
    const res = await send(key);
    assert.equal(res.status, 401);
    assert.match(res.headers.get("www-authenticate") ?? "", /^Bearer/);
    const body = await res.json();
    assert.equal(body.jsonrpc, "2.0");
    assert.equal(body.error.code, -32600);
    assert.match(body.error.message, /^Unauthorized: /);
  }
  const ok = await send(KEYS.alpha);
  assert.equal(ok.status, 200);
  assert.equal((await ok.json()).result.task.status.state, "TASK_STATE_COMPLETED");

  // Cards are public, so the SDK finds the agent, then its first call is refused readably.
  const client = await new ClientFactory().createFromUrl(
    stack.url,
    "/a2a/helper/.well-known/agent-card.json",
  );
  await assert.rejects(
    client.sendMessage({
      tenant: "",
      message: {
        messageId: crypto.randomUUID(),
        contextId: "",
        taskId: "",
        role: Role.ROLE_USER,
        parts: [{
          content: { $case: "text", value: "hi" },
          metadata: undefined,
          filename: "",
          mediaType: "",
        }],
        metadata: undefined,
        extensions: [],
        referenceTaskIds: [],
      },
      configuration: undefined,
      metadata: undefined,
    }),
    (err: Error) => {
      assert.match(err.message, /^Unauthorized: You didn't provide an API key/);
      return true;
    },
  );
});

Deno.test("A2A JSON-RPC errors: malformed JSON -32700, unknown method -32601, wrong params -32602; a tenant without the agent gets 404", async () => {
  await using upstream = startUpstream();
  await using stack = await startModelStack(upstream);
  const rpc = async (body: string, key = KEYS.alpha) => {
    const res = await fetch(`${stack.url}/a2a/helper`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "A2A-Version": "1.0",
        authorization: `Bearer ${key}`,
      },
      body,
    });
    return { status: res.status, json: await res.json() };
  };
  const malformed = await rpc("{not json");
  assert.equal(malformed.json.error.code, -32700);
  const unknown = await rpc(
    JSON.stringify({ jsonrpc: "2.0", id: 1, method: "Explode", params: {} }),
  );
  assert.equal(unknown.json.error.code, -32601);
  assert.equal(unknown.json.id, 1);
  const params = await rpc(
    JSON.stringify({ jsonrpc: "2.0", id: 2, method: "GetTask", params: {} }),
  );
  assert.equal(params.json.error.code, -32602);
  assert.equal(params.json.id, 2);
  const forbidden = await rpc(
    JSON.stringify({ jsonrpc: "2.0", id: 3, method: "GetTask", params: { id: "x" } }),
    KEYS.beta,
  );
  assert.equal(forbidden.status, 404);
  assert.equal(forbidden.json.error.code, -32600);
});
