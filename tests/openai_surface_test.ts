/**
 * The OpenAI-compatible surface, driven by the unmodified `openai` SDK (and raw fetch where the
 * exact bytes matter) against a real Edge HTTP server, real node wire and real NodeCores.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { stringify } from "yaml";
import { mockAnswer } from "../services/node/adapters/mock.ts";
import { startFakeOpenAI } from "../shared/testing/fake_openai.ts";
import { mockNode, startStack, type TestEdge } from "./stack.ts";
import { until } from "./util.ts";

const KEY = "sk-test-edge-key";

function baseConfig(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    http: { api_keys: [KEY], max_body_bytes: 4096 },
    nodes: [mockNode("node-a", { providers: [{ id: "a-demo", group: "demo", max: 4 }] })],
    models: [
      { name: "demo", route: "pool", aliases: ["demo-alias"] },
      { name: "mock-direct", route: "direct", adapter: "mock", target: "echo" },
    ],
    ...extra,
  };
}

function client(stack: TestEdge, apiKey = KEY): OpenAI {
  return new OpenAI({ apiKey, baseURL: `${stack.url}/v1`, maxRetries: 0 });
}

/** Parses an SSE body into its `data:` payloads. */
async function sseData(res: Response): Promise<string[]> {
  const text = await res.text();
  return text.split("\n\n").filter((f) => f.startsWith("data: ")).map((f) => f.slice(6));
}

Deno.test("GET /v1/models lists the configured public models through the SDK", async () => {
  await using stack = await startStack({ http: true, config: baseConfig() });
  const ids = [];
  for await (const model of client(stack).models.list()) ids.push(model.id);
  assert.deepEqual(ids, ["demo", "mock-direct"]);
});

Deno.test("chat completion without streaming answers through a pool run on a node", async () => {
  await using stack = await startStack({ http: true, config: baseConfig() });
  const completion = await client(stack).chat.completions.create({
    model: "demo-alias",
    messages: [{ role: "user", content: "hello there edge" }],
  });
  assert.equal(completion.object, "chat.completion");
  assert.match(completion.id, /^chatcmpl-/);
  assert.equal(completion.model, "demo-alias");
  assert.equal(completion.choices[0]!.message.content, mockAnswer("hello there edge", 4));
  assert.equal(completion.choices[0]!.finish_reason, "stop");
  assert.deepEqual(completion.usage, { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 });
});

Deno.test("streamed chat sends role delta, content, finish, usage chunk and [DONE] in order", async () => {
  await using stack = await startStack({ http: true, config: baseConfig() });
  const res = await fetch(`${stack.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
    body: JSON.stringify({
      model: "demo",
      messages: [{ role: "user", content: "one two" }],
      stream: true,
      stream_options: { include_usage: true },
    }),
  });
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type")!, /^text\/event-stream/);
  const frames = await sseData(res);
  assert.equal(frames.at(-1), "[DONE]");
  const chunks = frames.slice(0, -1).map((f) => JSON.parse(f));
  const ids = new Set(chunks.map((c) => c.id));
  const created = new Set(chunks.map((c) => c.created));
  assert.equal(ids.size, 1);
  assert.equal(created.size, 1);
  assert.ok(chunks.every((c) => c.object === "chat.completion.chunk"));
  const deltas = chunks.map((c) => c.choices[0]?.delta ?? null);
  const finishes = chunks.map((c) => c.choices[0]?.finish_reason ?? null);
  assert.deepEqual(deltas, [
    { role: "assistant", content: "" },
    ...[...mockAnswer("one two", 4).matchAll(/ ?\S+/g)].map((m) => ({ content: m[0] })),
    {},
    null,
  ]);
  assert.deepEqual(finishes, [null, null, null, null, null, "stop", null]);
  assert.deepEqual(chunks.at(-1).choices, []);
  assert.deepEqual(chunks.at(-1).usage, {
    prompt_tokens: 2,
    completion_tokens: 4,
    total_tokens: 6,
  });

  // The SDK accepts the same stream.
  const stream = await client(stack).chat.completions.create({
    model: "demo",
    messages: [{ role: "user", content: "one two" }],
    stream: true,
  });
  let text = "";
  for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
  assert.equal(text, mockAnswer("one two", 4));
});

Deno.test("responses.create answers with a completed response object", async () => {
  await using stack = await startStack({ http: true, config: baseConfig() });
  const response = await client(stack).responses.create({
    model: "demo",
    input: "alpha beta",
    instructions: "be brief",
  });
  assert.equal(response.object, "response");
  assert.equal(response.status, "completed");
  assert.equal(response.output_text, mockAnswer("alpha beta", 4));
  assert.equal(response.usage?.output_tokens, 4);
});

Deno.test("responses.stream() helper accepts the event order and yields the final response", async () => {
  await using stack = await startStack({ http: true, config: baseConfig() });
  const stream = client(stack).responses.stream({ model: "demo", input: "gamma delta" });
  const types: string[] = [];
  let text = "";
  for await (const event of stream) {
    types.push(event.type);
    if (event.type === "response.output_text.delta") text += event.delta;
  }
  const final = await stream.finalResponse();
  assert.equal(text, mockAnswer("gamma delta", 4));
  assert.equal(final.output_text, text);
  assert.equal(final.status, "completed");
  assert.deepEqual(types.filter((t) => t !== "response.output_text.delta"), [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
  ]);
});

Deno.test("tool calls from an OpenAI-compatible backend pass through the Edge unchanged", async () => {
  await using fake = startFakeOpenAI({
    models: ["tool-model"],
    defaults: { reply: "", toolCalls: [{ name: "get_weather", arguments: { city: "Seoul" } }] },
  });
  const config = baseConfig({
    nodes: [{
      id: "node-t",
      token: "node-t-token",
      adapters: [{ name: "upstream", kind: "openai_compat", base_url: `${fake.url}/v1` }],
    }],
    models: [{ name: "tools", route: "direct", adapter: "upstream", target: "tool-model" }],
  });
  await using stack = await startStack({ http: true, config });
  const tools = [{
    type: "function" as const,
    function: {
      name: "get_weather",
      description: "Weather of a city",
      parameters: { type: "object", properties: { city: { type: "string" } } },
    },
  }];
  const messages = [{ role: "user" as const, content: "weather in Seoul?" }];
  const completion = await client(stack).chat.completions.create({
    model: "tools",
    messages,
    tools,
  });
  const call = completion.choices[0]!.message.tool_calls?.[0];
  assert.equal(completion.choices[0]!.finish_reason, "tool_calls");
  assert.equal(call?.type, "function");
  assert.equal(call?.type === "function" ? call.function.name : "", "get_weather");
  assert.deepEqual(JSON.parse(call?.type === "function" ? call.function.arguments : ""), {
    city: "Seoul",
  });
  // The backend saw the tools the client offered.
  const sent = fake.requests.at(-1)!.body as { tools: unknown[] };
  assert.equal(sent.tools.length, 1);

  const stream = await client(stack).chat.completions.create({
    model: "tools",
    messages,
    tools,
    stream: true,
  });
  let name = "";
  let args = "";
  let finish = "";
  for await (const chunk of stream) {
    for (const tc of chunk.choices[0]?.delta.tool_calls ?? []) {
      name += tc.function?.name ?? "";
      args += tc.function?.arguments ?? "";
    }
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(name, "get_weather");
  assert.deepEqual(JSON.parse(args), { city: "Seoul" });
  assert.equal(finish, "tool_calls");
});

Deno.test("a wrong API key is answered 401 in OpenAI's error shape", async () => {
  await using stack = await startStack({ http: true, config: baseConfig() });
  await assert.rejects(
    client(stack, "sk-wrong").chat.completions.create({
      model: "demo",
      messages: [{ role: "user", content: "hi" }],
    }),
    (err: unknown) => {
      assert.ok(err instanceof OpenAI.AuthenticationError);
      assert.equal(err.status, 401);
      assert.equal(err.code, "invalid_api_key");
      return true;
    },
  );
});

Deno.test("an unknown model is answered 404 with code model_not_found", async () => {
  await using stack = await startStack({ http: true, config: baseConfig() });
  await assert.rejects(
    client(stack).chat.completions.create({
      model: "no-such-model",
      messages: [{ role: "user", content: "hi" }],
    }),
    (err: unknown) => {
      assert.ok(err instanceof OpenAI.NotFoundError);
      assert.equal(err.code, "model_not_found");
      assert.match(err.message, /no-such-model/);
      return true;
    },
  );
});

Deno.test("a body above http.max_body_bytes is answered 413", async () => {
  await using stack = await startStack({ http: true, config: baseConfig() });
  const res = await fetch(`${stack.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
    body: JSON.stringify({
      model: "demo",
      messages: [{ role: "user", content: "x".repeat(10_000) }],
    }),
  });
  assert.equal(res.status, 413);
  const body = await res.json();
  assert.equal(body.error.code, "request_too_large");
});

Deno.test("a reload's new body limit applies to the next request and is the one named", async () => {
  const dir = await Deno.makeTempDir({ prefix: "iop_body_limit_" });
  const file = `${dir}/edge.yaml`;
  const config = (limit: number) =>
    baseConfig({ http: { api_keys: [KEY], max_body_bytes: limit } });
  try {
    await using stack = await startStack({ http: true, config: config(1500), configFile: file });
    const post = () =>
      fetch(`${stack.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
        body: JSON.stringify({
          model: "demo",
          messages: [{ role: "user", content: "x".repeat(2000) }],
        }),
      });
    const before = await post();
    assert.equal(before.status, 413);
    assert.match((await before.json()).error.message, /limit of 1500 bytes/);

    await Deno.writeTextFile(file, stringify(config(8192)));
    const reloaded = await stack.service.reload();
    assert.equal(reloaded.ok, true, reloaded.detail);
    const raised = await post();
    assert.equal(raised.status, 200, "the old, lower limit no longer applies");
    await raised.body?.cancel();

    await Deno.writeTextFile(file, stringify(config(1024)));
    assert.equal((await stack.service.reload()).ok, true);
    const lowered = await post();
    assert.equal(lowered.status, 413);
    assert.match((await lowered.json()).error.message, /limit of 1024 bytes/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("invalid requests are answered 400 naming the bad field", async () => {
  await using stack = await startStack({ http: true, config: baseConfig() });
  const post = async (body: string) => {
    const res = await fetch(`${stack.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body,
    });
    return { status: res.status, body: await res.json() };
  };
  const badRole = await post(JSON.stringify({
    model: "demo",
    messages: [{ role: "user", content: "ok" }, { role: "robot", content: "x" }],
  }));
  assert.equal(badRole.status, 400);
  assert.equal(badRole.body.error.param, "messages[1].role");
  assert.match(badRole.body.error.message, /'messages\[1\]\.role' must be one of/);
  assert.equal(badRole.body.error.type, "invalid_request_error");

  const badTemp = await post(JSON.stringify({
    model: "demo",
    messages: [{ role: "user", content: "ok" }],
    temperature: "hot",
  }));
  assert.equal(badTemp.body.error.param, "temperature");

  const notJson = await post("{ nope");
  assert.equal(notJson.status, 400);
  assert.match(notJson.body.error.message, /not valid JSON/);
});

Deno.test("closing a streaming client mid-answer cancels the run on the node", async () => {
  await using stack = await startStack({
    http: true,
    config: baseConfig({
      nodes: [mockNode("node-a", {
        providers: [{ id: "a-demo", group: "demo", max: 4 }],
        mock: { tokens: 200, token_delay_ms: 20 },
      })],
    }),
  });
  const finished = new Promise<{ status: string; runId: string }>((resolve) => {
    const off = stack.service.subscribe((e) => {
      if (e.type === "run_finished") {
        off();
        resolve({ status: e.status, runId: e.runId });
      }
    });
  });
  const controller = new AbortController();
  const stream = await client(stack).chat.completions.create(
    { model: "demo", messages: [{ role: "user", content: "long answer" }], stream: true },
    { signal: controller.signal },
  );
  let chunks = 0;
  // The SDK ends the iteration quietly when its request is aborted.
  for await (const _chunk of stream) {
    if (++chunks === 3) controller.abort();
  }
  assert.ok(chunks < 200, `the stream went on after the abort: ${chunks} chunks`);
  const { status, runId } = await finished;
  assert.equal(status, "cancelled");
  const history = await stack.service.nodeCommand("node-a", { type: "history", limit: 10 });
  assert.equal(history.type, "history");
  const row = history.type === "history" ? history.runs.find((r) => r.runId === runId) : undefined;
  assert.equal(row?.status, "cancelled");
});

Deno.test("a client that closes its connection during a non-streaming request cancels the run on the node", async () => {
  await using stack = await startStack({
    http: true,
    config: baseConfig({
      nodes: [mockNode("node-a", {
        providers: [{ id: "a-demo", group: "demo", max: 4 }],
        mock: { tokens: 200, token_delay_ms: 20 },
      })],
    }),
  });
  const events: string[] = [];
  const finished = new Promise<{ status: string; runId: string }>((resolve) => {
    const off = stack.service.subscribe((e) => {
      events.push(e.type);
      if (e.type === "run_finished") {
        off();
        resolve({ status: e.status, runId: e.runId });
      }
    });
  });
  const controller = new AbortController();
  const answer = fetch(`${stack.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ model: "demo", messages: [{ role: "user", content: "long answer" }] }),
    signal: controller.signal,
  });
  // Give up once the run is under way on the node (a 200-token answer takes 4 s).
  await until("the run to start", () => events.includes("run_started"));
  controller.abort();
  await assert.rejects(answer);
  const { status, runId } = await finished;
  assert.equal(status, "cancelled");
  const history = await stack.service.nodeCommand("node-a", { type: "history", limit: 10 });
  const row = history.type === "history" ? history.runs.find((r) => r.runId === runId) : undefined;
  assert.equal(row?.status, "cancelled");
  assert.ok(
    (row?.finishedAtMs ?? 0) - (row?.startedAtMs ?? 0) < 3_000,
    "cancelled well before the end",
  );
});

Deno.test("unknown /v1 paths and wrong methods answer OpenAI error objects, not text", async () => {
  await using stack = await startStack({ http: true, config: baseConfig() });
  const headers = { authorization: `Bearer ${KEY}` };
  const unknown = await fetch(`${stack.url}/v1/embeddingz`, { method: "POST", headers });
  assert.equal(unknown.status, 404);
  assert.match(unknown.headers.get("content-type") ?? "", /application\/json/);
  assert.deepEqual((await unknown.json()).error.code, "unknown_url");
  const wrong = await fetch(`${stack.url}/v1/chat/completions`, { headers });
  assert.equal(wrong.status, 405);
  assert.equal(wrong.headers.get("allow"), "POST");
  const body = await wrong.json();
  assert.equal(body.error.code, "method_not_allowed");
  assert.equal(body.error.type, "invalid_request_error");
  await assert.rejects(
    client(stack).get("/no/such/route"),
    (err: unknown) => err instanceof OpenAI.NotFoundError,
  );
});
