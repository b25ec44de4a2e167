/**
 * Stateful Responses API end to end: the unmodified `openai` client creates, retrieves, lists,
 * deletes and continues (`previous_response_id`) responses on a real Edge HTTP server whose
 * response store is a real SQLite file, and whose Node drives a fake OpenAI-compatible server
 * (recording every request it receives) through the real adapter over the real node wire.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { createLogger } from "../shared/log.ts";
import { type FakeOpenAI, startFakeOpenAI } from "../shared/testing/fake_openai.ts";
import { startEdge, startNode, type TestEdge } from "./stack.ts";

const KEYS = { alpha: "alpha-key", beta: "beta-key" };

/** A 1×1 PNG as a data: URL. */
const PIXEL = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4" +
  "nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg==";

interface Stack {
  edge: TestEdge;
  fake: FakeOpenAI;
  /** The client of tenant `alpha` (default) or `beta`. */
  client(tenant?: keyof typeof KEYS): OpenAI;
  /** The messages of the chat completions the fake received, in order. */
  backendMessages(): Record<string, unknown>[][];
  [Symbol.asyncDispose](): Promise<void>;
}

/** The Edge's raw config: tenants alpha and beta, `cloud` (chat) and `eyes` (chat, vision). */
function config(fakeUrl: string, responses: Record<string, unknown>): Record<string, unknown> {
  return {
    tenants: [
      { name: "alpha", keys: [KEYS.alpha] },
      { name: "beta", keys: [KEYS.beta] },
    ],
    nodes: [{
      id: "n1",
      token: "n1-token",
      adapters: [{
        name: "openai",
        kind: "openai_compat",
        base_url: `${fakeUrl}/v1`,
        connect_timeout_ms: 2_000,
      }],
    }],
    models: [
      { name: "cloud", route: "direct", adapter: "openai", target: "gpt-test" },
      {
        name: "eyes",
        route: "direct",
        adapter: "openai",
        target: "gpt-test",
        capabilities: ["chat", "vision"],
      },
    ],
    responses,
  };
}

/**
 * An Edge with its Node in front of `fake` (a new fake unless given, closed with the stack
 * only then); `responses` is the config's `responses` section.
 */
async function startResponses(
  options: { responses?: Record<string, unknown>; fake?: FakeOpenAI } = {},
): Promise<Stack> {
  const logger = createLogger("test", { level: "error", writer: () => {} });
  const fake = options.fake ?? startFakeOpenAI({ models: ["gpt-test"] });
  let edge: TestEdge | undefined;
  try {
    edge = await startEdge({
      logger,
      config: config(fake.url, options.responses ?? {}),
      http: true,
    });
    await startNode(edge, { readyMs: 5_000 });
  } catch (err) {
    await edge?.close();
    if (!options.fake) await fake.close();
    throw err;
  }
  const url = edge.url;
  const started = edge;
  return {
    edge,
    fake,
    client: (tenant = "alpha") =>
      new OpenAI({ baseURL: `${url}/v1`, apiKey: KEYS[tenant], maxRetries: 0 }),
    backendMessages: () =>
      fake.requests
        .filter((r) => r.method === "POST" && r.path === "/v1/chat/completions")
        .map((r) => (r.body as { messages: Record<string, unknown>[] }).messages),
    async [Symbol.asyncDispose]() {
      await started.close();
      if (!options.fake) {
        fake.log.stopAll();
        await fake.close();
      }
    },
  };
}

/** The messages as role and content only. */
function turns(messages: Record<string, unknown>[] | undefined): unknown[] {
  return (messages ?? []).map((m) => ({ role: m.role, content: m.content }));
}

/** The response's `store` (the SDK's type does not declare it). */
function storeOf(response: OpenAI.Responses.Response): unknown {
  return (response as unknown as { store?: unknown }).store;
}

/** What `promise` rejected with, as an OpenAI API error. */
async function apiError(promise: Promise<unknown>): Promise<InstanceType<typeof OpenAI.APIError>> {
  const err = await promise.then(() => undefined, (e) => e);
  assert.ok(err instanceof OpenAI.APIError, `expected an API error, got ${err}`);
  return err;
}

Deno.test("a created response is retrieved equal, lists its input items in pages, and is gone once deleted", async () => {
  await using s = await startResponses();
  s.fake.setBehavior("gpt-test", { reply: "Paris" });
  const oa = s.client();
  const created = await oa.responses.create({
    model: "cloud",
    instructions: "Answer in one word",
    input: [
      { role: "user", content: "The capital of France?" },
      { role: "user", content: [{ type: "input_text", text: "Just the name." }] },
      { role: "developer", content: "Be exact" },
    ],
  });
  assert.equal(storeOf(created), true);
  assert.equal(created.output_text, "Paris");
  const retrieved = await oa.responses.retrieve(created.id);
  assert.deepEqual(retrieved, created);

  // Default order is newest first, as OpenAI's; instructions are not an input item.
  const page = await oa.responses.inputItems.list(created.id);
  const texts = (items: typeof page.data) =>
    items.map((item) => {
      assert.equal(item.type, "message");
      const content = (item as { content: { type: string; text: string }[] }).content;
      assert.equal(content[0]?.type, "input_text");
      return content[0]?.text;
    });
  assert.deepEqual(texts(page.data), ["Be exact", "Just the name.", "The capital of France?"]);
  assert.equal(page.has_more, false);
  assert.ok(page.data.every((item) => typeof item.id === "string" && item.id !== ""));

  const first = await oa.responses.inputItems.list(created.id, { order: "asc", limit: 2 });
  assert.deepEqual(texts(first.data), ["The capital of France?", "Just the name."]);
  assert.equal(first.has_more, true);
  const all: string[] = [];
  for await (const item of oa.responses.inputItems.list(created.id, { order: "asc", limit: 1 })) {
    all.push(texts([item])[0]!);
  }
  assert.deepEqual(all, ["The capital of France?", "Just the name.", "Be exact"]);

  const badLimit = await apiError(oa.responses.inputItems.list(created.id, { limit: 500 }));
  assert.equal(badLimit.status, 400);
  assert.equal(badLimit.param, "limit");

  await oa.responses.delete(created.id);
  const gone = await apiError(oa.responses.retrieve(created.id));
  assert.ok(gone instanceof OpenAI.NotFoundError);
  assert.equal(gone.type, "invalid_request_error");
  assert.equal((await apiError(oa.responses.delete(created.id))).status, 404);
  assert.equal((await apiError(oa.responses.inputItems.list(created.id))).status, 404);
});

Deno.test("previous_response_id gives the backend the earlier input and output before the new input, without the earlier instructions", async () => {
  await using s = await startResponses();
  const oa = s.client();
  s.fake.setBehavior("gpt-test", { reply: "Paris" });
  const first = await oa.responses.create({
    model: "cloud",
    instructions: "Answer in one word",
    input: "The capital of France?",
  });
  s.fake.setBehavior("gpt-test", { reply: "About two million" });
  const second = await oa.responses.create({
    model: "cloud",
    instructions: "Answer with a number",
    previous_response_id: first.id,
    input: "How many people live there?",
  });
  assert.equal(second.previous_response_id, first.id);
  assert.deepEqual(turns(s.backendMessages()[1]), [
    { role: "system", content: "Answer with a number" },
    { role: "user", content: "The capital of France?" },
    { role: "assistant", content: "Paris" },
    { role: "user", content: "How many people live there?" },
  ]);
  // The follow-up's own input items are only its own.
  const items = await oa.responses.inputItems.list(second.id);
  assert.equal(items.data.length, 1);

  s.fake.setBehavior("gpt-test", { reply: "Lyon" });
  const third = await oa.responses.create({
    model: "cloud",
    previous_response_id: second.id,
    input: [{ role: "user", content: "And the second city?" }],
  });
  assert.equal(third.output_text, "Lyon");
  assert.deepEqual(turns(s.backendMessages()[2]), [
    { role: "user", content: "The capital of France?" },
    { role: "assistant", content: "Paris" },
    { role: "user", content: "How many people live there?" },
    { role: "assistant", content: "About two million" },
    { role: "user", content: "And the second city?" },
  ]);

  // A conversation whose earlier response was deleted cannot be continued: nothing is dropped
  // silently from it.
  await oa.responses.delete(first.id);
  const broken = await apiError(
    oa.responses.create({ model: "cloud", previous_response_id: third.id, input: "More?" }),
  );
  assert.equal(broken.status, 404);
  assert.equal(broken.param, "previous_response_id");
  assert.match(broken.message, new RegExp(`'${first.id}' not found`));
  assert.equal(s.backendMessages().length, 3);
});

Deno.test("a function call continued with previous_response_id reaches the backend as one assistant turn with its calls, then the result", async () => {
  await using s = await startResponses();
  const oa = s.client();
  const tools = [{
    type: "function" as const,
    name: "get_weather",
    description: "Weather of a city",
    parameters: { type: "object", properties: { city: { type: "string" } } },
    strict: false,
  }];
  s.fake.setBehavior("gpt-test", {
    reply: "Checking",
    toolCalls: [
      { name: "get_weather", arguments: { city: "Oslo" } },
      { name: "get_weather", arguments: { city: "Bergen" } },
    ],
  });
  // Streamed: the adapter's whole-answer path gives every parallel call index 0 (reported).
  const events = await oa.responses.create({
    model: "cloud",
    input: "Weather in Norway?",
    tools,
    stream: true,
  });
  let asked: OpenAI.Responses.Response | undefined;
  for await (const event of events) if (event.type === "response.completed") asked = event.response;
  assert.ok(asked);
  const calls = asked.output.filter((item) => item.type === "function_call");
  assert.equal(calls.length, 2);
  s.fake.setBehavior("gpt-test", { reply: "Mild in both" });
  const answered = await oa.responses.create({
    model: "cloud",
    previous_response_id: asked.id,
    tools,
    input: calls.map((call) => ({
      type: "function_call_output" as const,
      call_id: call.call_id,
      output: `{"temp_c":${call.arguments.includes("Oslo") ? 12 : 14}}`,
    })),
  });
  assert.equal(answered.output_text, "Mild in both");
  const sent = s.backendMessages()[1]!;
  assert.deepEqual(sent.map((m) => m.role), ["user", "assistant", "tool", "tool"]);
  assert.equal(sent[1]!.content, "Checking");
  assert.deepEqual(
    (sent[1]!.tool_calls as { id: string; function: { arguments: string } }[]).map((c) => [
      c.id,
      c.function.arguments,
    ]),
    calls.map((call) => [call.call_id, call.arguments]),
  );
  assert.deepEqual(sent.slice(2).map((m) => m.tool_call_id), calls.map((call) => call.call_id));
});

Deno.test("another tenant's response is not found: not retrieved, listed, deleted nor continued", async () => {
  await using s = await startResponses();
  const alpha = s.client("alpha");
  const beta = s.client("beta");
  const mine = await alpha.responses.create({ model: "cloud", input: "secret plans" });

  const retrieved = await apiError(beta.responses.retrieve(mine.id));
  assert.ok(retrieved instanceof OpenAI.NotFoundError);
  const unknown = await apiError(beta.responses.retrieve("resp_0000"));
  // An id of another tenant reads exactly as one that never existed.
  assert.equal(
    retrieved.message.replace(mine.id, "ID"),
    unknown.message.replace("resp_0000", "ID"),
  );
  assert.equal((await apiError(beta.responses.inputItems.list(mine.id))).status, 404);
  assert.equal((await apiError(beta.responses.delete(mine.id))).status, 404);
  const continued = await apiError(
    beta.responses.create({ model: "cloud", previous_response_id: mine.id, input: "tell me" }),
  );
  assert.equal(continued.status, 404);
  assert.equal(continued.param, "previous_response_id");
  assert.equal(continued.code, "previous_response_not_found");
  assert.equal(s.backendMessages().length, 1, "the refused follow-up never ran");

  // Untouched for its owner.
  assert.deepEqual(await alpha.responses.retrieve(mine.id), mine);
});

Deno.test("store: false answers as usual but is neither retrievable nor continued", async () => {
  await using s = await startResponses();
  const oa = s.client();
  const unstored = await oa.responses.create({ model: "cloud", input: "forget me", store: false });
  assert.equal(unstored.status, "completed");
  assert.equal(storeOf(unstored), false);
  assert.equal((await apiError(oa.responses.retrieve(unstored.id))).status, 404);
  const continued = await apiError(
    oa.responses.create({ model: "cloud", previous_response_id: unstored.id, input: "again" }),
  );
  assert.equal(continued.status, 404);
  assert.equal(continued.param, "previous_response_id");

  // A store:false follow-up of a stored response runs on the conversation, and is not stored.
  s.fake.setBehavior("gpt-test", { reply: "kept" });
  const stored = await oa.responses.create({ model: "cloud", input: "remember me" });
  const followUp = await oa.responses.create({
    model: "cloud",
    input: "and now?",
    previous_response_id: stored.id,
    store: false,
  });
  assert.equal(storeOf(followUp), false);
  assert.deepEqual(turns(s.backendMessages().at(-1)), [
    { role: "user", content: "remember me" },
    { role: "assistant", content: "kept" },
    { role: "user", content: "and now?" },
  ]);
  assert.equal((await apiError(oa.responses.retrieve(followUp.id))).status, 404);
});

Deno.test("a streamed response is stored once complete, and one that failed mid-stream is stored as failed", async () => {
  await using s = await startResponses();
  const oa = s.client();
  s.fake.setBehavior("gpt-test", { reply: "streamed words here" });
  const stream = await oa.responses.create({ model: "cloud", input: "stream it", stream: true });
  let final: OpenAI.Responses.Response | undefined;
  for await (const event of stream) if (event.type === "response.completed") final = event.response;
  assert.ok(final, "the stream ends with response.completed");
  assert.equal(storeOf(final), true);
  const retrieved = await oa.responses.retrieve(final.id);
  assert.equal(retrieved.output_text, "streamed words here");
  assert.deepEqual(retrieved, { ...final, output_text: "streamed words here" });

  s.fake.setBehavior("gpt-test", { reply: "half of it", failAfterChunks: 1 });
  const events = await oa.responses.create({ model: "cloud", input: "fail it", stream: true });
  let failed: OpenAI.Responses.Response | undefined;
  for await (const event of events) if (event.type === "response.failed") failed = event.response;
  assert.ok(failed, "the stream ends with response.failed");
  const stored = await oa.responses.retrieve(failed.id);
  assert.equal(stored.status, "failed");
  // The SDK adds `output_text` to a retrieved response; the rest is what the stream ended with.
  assert.deepEqual(stored, { ...failed, output_text: "half" });
  assert.ok(stored.error?.message);
  // What was said before the failure is kept, marked incomplete.
  const [said] = stored.output as { status: string; content: { text: string }[] }[];
  assert.equal(said?.status, "incomplete");
  assert.equal(said?.content[0]?.text, "half");
});

Deno.test("input_image parts reach a vision model's backend; a model without vision refuses them by param", async () => {
  await using s = await startResponses();
  const oa = s.client();
  const image = {
    role: "user" as const,
    content: [
      { type: "input_text" as const, text: "What is this?" },
      { type: "input_image" as const, image_url: PIXEL, detail: "low" as const },
    ],
  };
  const seen = await oa.responses.create({ model: "eyes", input: [image] });
  assert.equal(seen.status, "completed");
  assert.deepEqual(s.backendMessages()[0]?.[0], {
    role: "user",
    content: [
      { type: "text", text: "What is this?" },
      { type: "image_url", image_url: { url: PIXEL, detail: "low" } },
    ],
  });
  const items = await oa.responses.inputItems.list(seen.id);
  const content = (items.data[0] as unknown as { content: Record<string, unknown>[] }).content;
  assert.deepEqual(content[1], {
    type: "input_image",
    image_url: PIXEL,
    detail: "low",
    file_id: null,
  });

  const refused = await apiError(oa.responses.create({ model: "cloud", input: [image] }));
  assert.equal(refused.status, 400);
  assert.equal(refused.param, "input");
  assert.match(refused.message, /vision/);
  // Continuing the image conversation on a model without vision is refused the same way.
  const continued = await apiError(
    oa.responses.create({ model: "cloud", previous_response_id: seen.id, input: "And now?" }),
  );
  assert.equal(continued.status, 400);
  assert.equal(continued.param, "previous_response_id");
  const badUrl = await apiError(oa.responses.create({
    model: "eyes",
    input: [{
      role: "user",
      content: [{ type: "input_image", image_url: "file:///etc/passwd", detail: "auto" }],
    }],
  }));
  assert.equal(badUrl.status, 400);
  assert.equal(badUrl.param, "input[0].content[0].image_url");
  assert.equal(s.backendMessages().length, 1);
});

Deno.test("responses.max_stored bounds the store: the oldest response goes first", async () => {
  await using s = await startResponses({ responses: { max_stored: 2 } });
  const oa = s.client();
  const ids: string[] = [];
  for (const input of ["one", "two", "three"]) {
    ids.push((await oa.responses.create({ model: "cloud", input })).id);
  }
  assert.equal((await apiError(oa.responses.retrieve(ids[0]!))).status, 404);
  assert.equal((await oa.responses.retrieve(ids[1]!)).id, ids[1]);
  assert.equal((await oa.responses.retrieve(ids[2]!)).id, ids[2]);
  assert.equal(s.edge.responses?.count(), 2);
});

Deno.test("a response larger than responses.max_response_bytes is answered with store: false and not kept", async () => {
  await using s = await startResponses({ responses: { max_response_bytes: 2048 } });
  const oa = s.client();
  const big = await oa.responses.create({ model: "cloud", input: "word ".repeat(1000) });
  assert.equal(big.status, "completed");
  assert.equal(storeOf(big), false);
  assert.equal((await apiError(oa.responses.retrieve(big.id))).status, 404);
  const small = await oa.responses.create({ model: "cloud", input: "short" });
  assert.equal(storeOf(small), true);
});

Deno.test("stored responses survive an Edge restart: retrieved equal and continued", async () => {
  const dir = await Deno.makeTempDir({ prefix: "iop_responses_" });
  const fake = startFakeOpenAI({ models: ["gpt-test"] });
  try {
    const responses = { store_path: `${dir}/responses.db` };
    let first: OpenAI.Responses.Response;
    {
      await using s = await startResponses({ responses, fake });
      fake.setBehavior("gpt-test", { reply: "Paris" });
      first = await s.client().responses.create({ model: "cloud", input: "Capital of France?" });
    }
    await using again = await startResponses({ responses, fake });
    const oa = again.client();
    assert.deepEqual(await oa.responses.retrieve(first.id), first);
    fake.setBehavior("gpt-test", { reply: "Lyon" });
    await oa.responses.create({ model: "cloud", previous_response_id: first.id, input: "Next?" });
    assert.deepEqual(turns(again.backendMessages().at(-1)), [
      { role: "user", content: "Capital of France?" },
      { role: "assistant", content: "Paris" },
      { role: "user", content: "Next?" },
    ]);
  } finally {
    fake.log.stopAll();
    await fake.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a query parameter the stored-response routes do not read is refused by name", async () => {
  await using s = await startResponses();
  const oa = s.client();
  const created = await oa.responses.create({ model: "cloud", input: "hello" });
  const res = await fetch(`${s.edge.url}/v1/responses/${created.id}?starting_after=3`, {
    headers: { authorization: `Bearer ${KEYS.alpha}` },
  });
  assert.equal(res.status, 400);
  const body = await res.json();
  assert.equal(body.error.param, "starting_after");
  const replay = await fetch(`${s.edge.url}/v1/responses/${created.id}?stream=true`, {
    headers: { authorization: `Bearer ${KEYS.alpha}` },
  });
  assert.equal(replay.status, 400);
  assert.equal((await replay.json()).error.param, "stream");
  const put = await fetch(`${s.edge.url}/v1/responses/${created.id}`, {
    method: "PUT",
    headers: { authorization: `Bearer ${KEYS.alpha}` },
  });
  assert.equal(put.status, 405);
  await put.body?.cancel();
});

Deno.test("a create sent with a chunked body (no content-length) is served as its caller's", async () => {
  await using s = await startResponses();
  const body = new TextEncoder().encode(JSON.stringify({ model: "cloud", input: "chunked" }));
  const res = await fetch(`${s.edge.url}/v1/responses`, {
    method: "POST",
    headers: { authorization: `Bearer ${KEYS.alpha}`, "content-type": "application/json" },
    body: ReadableStream.from([body.subarray(0, 10), body.subarray(10)]),
  });
  assert.equal(res.status, 200);
  const created = await res.json();
  assert.equal(created.status, "completed");
  // Stored for the tenant whose key it carried.
  assert.equal((await s.client("alpha").responses.retrieve(created.id)).id, created.id);
  assert.equal((await apiError(s.client("beta").responses.retrieve(created.id))).status, 404);
});
