import assert from "node:assert/strict";
import { IopError } from "../../../shared/errors.ts";
import {
  backendMessage,
  ndjsonLines,
  RequestGuard,
  sseEvents,
  statusError,
} from "./http_stream.ts";

async function* bytes(text: string, size: number): AsyncGenerator<Uint8Array> {
  const all = new TextEncoder().encode(text);
  for (let i = 0; i < all.length; i += size) yield all.slice(i, i + size);
}

async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}

Deno.test("ndjsonLines rebuilds lines split anywhere, multi-byte characters included", async () => {
  const text = '{"a":"héllo"}\n\n{"b":"🙂"}\r\n{"c":3}';
  for (const size of [1, 2, 3, 7, 1000]) {
    assert.deepEqual(await collect(ndjsonLines(bytes(text, size))), [
      '{"a":"héllo"}',
      '{"b":"🙂"}',
      '{"c":3}',
    ]);
  }
});

Deno.test("sseEvents rebuilds events split anywhere and keeps [DONE]", async () => {
  const text = 'data: {"x":"é"}\n\n: keep-alive\n\ndata: {"y":2}\r\n\r\ndata: [DONE]\n\n';
  for (const size of [1, 4, 1000]) {
    const events = await collect(sseEvents(bytes(text, size)));
    assert.deepEqual(events.map((e) => e.data), ['{"x":"é"}', '{"y":2}', "[DONE]"]);
  }
});

Deno.test("backendMessage reads Ollama, OpenAI and plain-text error bodies", async () => {
  assert.equal(await backendMessage(new Response('{"error":"model x"}')), "model x");
  assert.equal(
    await backendMessage(
      new Response('{"error":{"message":"bad","type":"t","param":null,"code":null}}'),
    ),
    "bad",
  );
  assert.equal(
    await backendMessage(new Response("upstream down", { status: 502 })),
    "upstream down",
  );
});

Deno.test("statusError marks overload and server errors retryable, client errors not", () => {
  const cases: [number, string, boolean][] = [
    [400, "INVALID_ARGUMENT", false],
    [401, "UNAUTHENTICATED", false],
    [404, "NOT_FOUND", false],
    [422, "INVALID_ARGUMENT", false],
    [429, "OVERLOADED", true],
    [500, "BACKEND_ERROR", true],
    [503, "OVERLOADED", true],
  ];
  for (const [status, code, retryable] of cases) {
    const err = statusError(status, "m");
    assert.deepEqual([err.code, err.retryable, err.message], [code, retryable, "m"], `${status}`);
  }
});

Deno.test("RequestGuard reports the caller's abort reason, not a failure", () => {
  const controller = new AbortController();
  const guard = new RequestGuard(controller.signal, {
    connectTimeoutMs: 0,
    firstTokenTimeoutMs: 0,
    idleTimeoutMs: 0,
    totalTimeoutMs: 0,
  });
  const reason = new DOMException("stop", "AbortError");
  controller.abort(reason);
  assert.equal(guard.signal.aborted, true);
  assert.equal(guard.failure(new TypeError("x"), "stream", "u"), reason);
  guard.dispose();
});

Deno.test("RequestGuard turns a passed limit into TIMEOUT naming the limit", async () => {
  const guard = new RequestGuard(new AbortController().signal, {
    connectTimeoutMs: 0,
    firstTokenTimeoutMs: 20,
    idleTimeoutMs: 0,
    totalTimeoutMs: 0,
  });
  await new Promise((resolve) => guard.signal.addEventListener("abort", resolve));
  const err = guard.failure(new Error("aborted"), "stream", "u");
  assert.ok(err instanceof IopError);
  assert.equal(err.code, "TIMEOUT");
  assert.equal(
    err.message,
    "Model server did not send the first token within firstTokenTimeoutMs=20",
  );
  guard.dispose();
});
