/**
 * A stopping Edge drains: on SIGTERM it takes no new request, lets a stream in flight finish to
 * its last token (the node wire stays up meanwhile), then exits 0. Real `main.ts` subprocesses.
 */
import assert from "node:assert/strict";
import { MODEL, startTracedStack } from "./tracing_helpers.ts";
import { until } from "./util.ts";

Deno.test("SIGTERM on an Edge lets a stream in flight finish, refuses new requests, exits 0", async () => {
  // Ten words, 150 ms apart: the stream outlives the signal by over a second.
  await using stack = await startTracedStack({}, {}, {
    defaults: { reply: "one two three four five six seven eight nine ten", chunkDelayMs: 150 },
  });
  const res = await fetch(`${stack.edgeUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      model: MODEL,
      stream: true,
      messages: [{ role: "user", content: "count" }],
    }),
  });
  assert.equal(res.status, 200);
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  while (!text.includes('"content"')) {
    const { done, value } = await reader.read();
    assert.ok(!done, `the stream ended before its first token: ${text}`);
    text += value;
  }

  stack.edgeProcess.kill("SIGTERM");
  await until("the edge to log its stop", () => stack.edgeLog.text.includes("edge stopping"));
  // New requests are no longer taken while the stream goes on.
  await assert.rejects(fetch(`${stack.edgeUrl}/v1/models`).then((r) => r.body?.cancel()));

  for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) {
    text += chunk.value;
  }
  const words = text.split("\n").filter((l) => l.startsWith("data: {")).map((l) =>
    JSON.parse(l.slice(6)).choices?.[0]?.delta?.content ?? ""
  ).join("");
  assert.equal(words.trim(), "one two three four five six seven eight nine ten");
  assert.match(text, /data: \[DONE\]/);
  const status = await stack.edgeProcess.status;
  assert.equal(status.code, 0, stack.edgeLog.text);
  assert.doesNotMatch(stack.edgeLog.text, /stopped before its requests finished/);
});
