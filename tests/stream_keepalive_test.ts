/**
 * A stream that waits between tokens gets SSE keep-alive comments (`http.sse_keepalive_ms`), and
 * the client libraries people stream with read straight past them: the unmodified `openai`
 * client (Chat Completions and Responses) and the AI SDK. Real Edge HTTP, node wire and a
 * NodeCore whose mock adapter pauses 350 ms between tokens, in this process.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { streamText } from "ai";
import { mockDeltas } from "../services/node/adapters/mock.ts";
import { mockNode, startStack, type TestEdge } from "./stack.ts";

const PROMPT = "one two three";
const ANSWER = mockDeltas(PROMPT, 3).join("");

function slowStack(keepaliveMs: number): Promise<TestEdge> {
  return startStack({
    http: true,
    config: {
      http: { sse_keepalive_ms: keepaliveMs },
      nodes: [
        mockNode("n1", {
          providers: [{ id: "p", group: "slow", max: 4 }],
          mock: { tokens: 3, token_delay_ms: 350 },
        }),
      ],
      models: [{ name: "slow", route: "pool" }],
    },
  });
}

async function rawStream(stack: TestEdge): Promise<string> {
  const res = await fetch(`${stack.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      model: "slow",
      stream: true,
      messages: [{ role: "user", content: PROMPT }],
    }),
  });
  assert.equal(res.status, 200);
  return await res.text();
}

Deno.test("a stream idle for sse_keepalive_ms gets keep-alive comments; openai and the AI SDK read past them", async () => {
  await using stack = await slowStack(100);
  const raw = await rawStream(stack);
  const comments = raw.split("\n\n").filter((e) => e === ": keep-alive").length;
  assert.ok(comments >= 2, `about three per 350 ms pause, got ${comments}:\n${raw}`);
  assert.match(raw, /data: \[DONE\]\n\n$/);

  const openai = new OpenAI({ apiKey: "none", baseURL: `${stack.url}/v1`, maxRetries: 0 });
  let chat = "";
  const chunks = await openai.chat.completions.create({
    model: "slow",
    stream: true,
    messages: [{ role: "user", content: PROMPT }],
  });
  for await (const chunk of chunks) chat += chunk.choices[0]?.delta.content ?? "";
  assert.equal(chat, ANSWER);

  let responded = "";
  const events = await openai.responses.create({ model: "slow", input: PROMPT, stream: true });
  for await (const event of events) {
    if (event.type === "response.output_text.delta") responded += event.delta;
  }
  assert.equal(responded, ANSWER);

  const sdk = createOpenAICompatible({ baseURL: `${stack.url}/v1`, name: "iop", apiKey: "x" });
  const result = streamText({ model: sdk("slow"), prompt: PROMPT, maxRetries: 0 });
  let streamed = "";
  for await (const delta of result.textStream) streamed += delta;
  assert.equal(streamed, ANSWER);
});

Deno.test("http.sse_keepalive_ms: 0 sends no keep-alive", async () => {
  await using stack = await slowStack(0);
  const raw = await rawStream(stack);
  assert.doesNotMatch(raw, /^: /m);
  assert.match(raw, /data: \[DONE\]\n\n$/);
});
