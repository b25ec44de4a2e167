/**
 * A run larger than the node wire carries (`wire.max_frame_bytes`) is refused at the Edge with a
 * 400 that says so, before any byte of it is sent: a Node drops its whole link for an oversize
 * frame, which would fail every other run on it (and a 503 would make clients resend it). A
 * `previous_response_id` chain whose history alone is over that limit is refused naming the
 * field. A node whose own limit is larger keeps its frames within the Edge's. Real Edge and Node
 * over TCP, the unmodified `openai` client.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { mockNode, startStack } from "./stack.ts";

const FRAME_BYTES = 64 * 1024;
const PNG_URL = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4" +
  "nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg==";

async function startSmallWire(tokens = 4000) {
  return await startStack({
    http: true,
    tls: "off",
    config: {
      http: { max_body_bytes: 48 * 1024 },
      wire: { max_frame_bytes: FRAME_BYTES },
      // Each answer echoes the prompt's words, over and over up to `tokens` of them: a
      // conversation grows fast.
      nodes: [mockNode("n1", { mock: { tokens, token_delay_ms: 0 } })],
      models: [{
        name: "eyes",
        route: "direct",
        adapter: "mock",
        target: "demo",
        capabilities: ["chat", "vision"],
      }],
    },
  });
}

async function apiError(promise: Promise<unknown>): Promise<InstanceType<typeof OpenAI.APIError>> {
  const err = await promise.then(() => undefined, (e) => e);
  assert.ok(err instanceof OpenAI.APIError, `expected an API error, got ${err}`);
  return err;
}

Deno.test("a run over the wire's frame limit is a 400 saying so, and the node's link keeps serving", async () => {
  await using edge = await startSmallWire();
  const oa = new OpenAI({ baseURL: `${edge.url}/v1`, apiKey: "none", maxRetries: 0 });
  const connectedAt = edge.service.status().nodes[0]!.connectedAtMs;
  // A 40 KB text beside an image travels twice (as the parts and as their joined text): the
  // body is under http.max_body_bytes, the run request over the frame limit.
  const err = await apiError(oa.chat.completions.create({
    model: "eyes",
    messages: [{
      role: "user",
      content: [
        { type: "text", text: "x".repeat(40_000) },
        { type: "image_url", image_url: { url: PNG_URL } },
      ],
    }],
  }));
  assert.equal(err.status, 400);
  assert.match(
    err.message,
    new RegExp(
      `Cannot send the run as its request is \\d+ bytes, over the node wire's limit of ` +
        `${FRAME_BYTES} bytes`,
    ),
  );
  // The same node still serves, over the link it had: it never saw the oversize frame.
  const ok = await oa.chat.completions.create({
    model: "eyes",
    messages: [{ role: "user", content: "still there?" }],
  });
  assert.match(ok.choices[0]!.message.content ?? "", /still there\?/);
  const node = edge.service.status().nodes[0]!;
  assert.equal(node.connected, true);
  assert.equal(node.connectedAtMs, connectedAt);
});

Deno.test("a node keeps its frames within its Edge's smaller limit: an answer emitted at once arrives whole", async () => {
  await using edge = await startSmallWire();
  const oa = new OpenAI({ baseURL: `${edge.url}/v1`, apiKey: "none", maxRetries: 0 });
  const connectedAt = edge.service.status().nodes[0]!.connectedAtMs;
  // 3000 tokens the mock emits in one turn: about 100 KB of events, over the Edge's 64 KiB
  // frame limit (the node's own is 4 MiB), so they must leave in several frames.
  const words = "abcd ".repeat(3000);
  const answer = await oa.chat.completions.create({
    model: "eyes",
    messages: [{ role: "user", content: words }],
  });
  assert.equal(answer.choices[0]!.message.content?.match(/abcd/g)?.length, 3000);
  assert.equal(edge.service.status().nodes[0]!.connectedAtMs, connectedAt, "the link stayed up");
});

Deno.test("a stored output over the Edge's frame limit is refused naming the limit, at once, and the link stays up", async () => {
  // 20,000 tokens of answer: about 120 KB stored whole, twice the frame limit.
  await using edge = await startSmallWire(20_000);
  const oa = new OpenAI({ baseURL: `${edge.url}/v1`, apiKey: "none", maxRetries: 0 });
  const connectedAt = edge.service.status().nodes[0]!.connectedAtMs;
  await oa.chat.completions.create({
    model: "eyes",
    messages: [{ role: "user", content: "abcde fghij" }],
  });
  const history = await edge.service.nodeCommand("n1", { type: "history", limit: 1 });
  assert.equal(history.type, "history");
  const runId = history.type === "history" ? history.runs[0]!.runId : "";
  const err = await edge.service.nodeCommand("n1", { type: "run_output", runId }).then(
    () => undefined,
    (e) => e,
  );
  // The node's answer, not the Edge's 10 s timeout: the message names the frame limit.
  assert.ok(err instanceof Error, "the output cannot fit one frame");
  assert.match(
    err.message,
    /over the link's frame limit of \d+ bytes \(the smaller of the edge's wire\.max_frame_bytes/,
  );
  assert.equal(edge.service.status().nodes[0]!.connectedAtMs, connectedAt, "the link stayed up");
});

Deno.test("previous_response_id whose history is over the frame limit is a 400 naming it", async () => {
  await using edge = await startSmallWire();
  const oa = new OpenAI({ baseURL: `${edge.url}/v1`, apiKey: "none", maxRetries: 0 });
  const words = "abcd ".repeat(3000);
  const first = await oa.responses.create({ model: "eyes", input: words });
  const second = await oa.responses.create({
    model: "eyes",
    input: words,
    previous_response_id: first.id,
  });
  const err = await apiError(oa.responses.create({
    model: "eyes",
    input: "and then?",
    previous_response_id: second.id,
  }));
  assert.equal(err.status, 400);
  assert.equal(err.param, "previous_response_id");
  assert.match(err.message, new RegExp(`history is over ${FRAME_BYTES} bytes`));
  assert.match(err.message, /wire\.max_frame_bytes/);
  // A conversation within the limit still continues.
  const fresh = await oa.responses.create({
    model: "eyes",
    input: "short",
    previous_response_id: first.id,
  });
  assert.equal(fresh.previous_response_id, first.id);
});
