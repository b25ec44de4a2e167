import assert from "node:assert/strict";
import { IopError } from "../../../shared/errors.ts";
import {
  backendMessage,
  LineDecoder,
  readBody,
  RequestGuard,
  SseDecoder,
  statusError,
} from "./http_stream.ts";
import { Http1Client } from "./http1_client.ts";

/** `text` as UTF-8 cut into pieces of `size` bytes, so characters split across pieces. */
function pieces(text: string, size: number): Uint8Array[] {
  const all = new TextEncoder().encode(text);
  const out: Uint8Array[] = [];
  for (let i = 0; i < all.length; i += size) out.push(all.slice(i, i + size));
  return out;
}

const NO_LIMITS = {
  connectTimeoutMs: 0,
  firstTokenTimeoutMs: 0,
  idleTimeoutMs: 0,
  totalTimeoutMs: 0,
};

Deno.test("LineDecoder rebuilds lines split anywhere, multi-byte characters included", () => {
  const text = '{"a":"héllo"}\n\n{"b":"🙂"}\r\n{"c":3}';
  for (const size of [1, 2, 3, 7, 1000]) {
    const lines: string[] = [];
    const decoder = new LineDecoder((line) => lines.push(line));
    for (const piece of pieces(text, size)) decoder.feed(piece);
    decoder.end();
    assert.deepEqual(lines, ['{"a":"héllo"}', '{"b":"🙂"}', '{"c":3}'], `pieces of ${size}`);
  }
});

Deno.test("SseDecoder rebuilds events split anywhere and keeps [DONE]", () => {
  const text = 'data: {"x":"é"}\n\n: keep-alive\n\ndata: {"y":2}\r\n\r\ndata: [DONE]\n\n';
  for (const size of [1, 4, 1000]) {
    const data: string[] = [];
    const decoder = new SseDecoder((event) => data.push(event.data));
    for (const piece of pieces(text, size)) decoder.feed(piece);
    decoder.end();
    assert.deepEqual(data, ['{"x":"é"}', '{"y":2}', "[DONE]"], `pieces of ${size}`);
  }
});

Deno.test("readBody stops at the end marker and leaves the connection for the next request", async () => {
  const ports: number[] = [];
  await using server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    (_req, info) => {
      ports.push((info.remoteAddr as Deno.NetAddr).port);
      return new Response(ReadableStream.from(pieces("data: a\n\ndata: b\n\ndata: [DONE]\n\n", 9)));
    },
  );
  const url = `http://127.0.0.1:${server.addr.port}/`;
  const client = new Http1Client();
  for (let round = 0; round < 3; round++) {
    const guard = new RequestGuard(new AbortController().signal, NO_LIMITS);
    const data: string[] = [];
    const decoder = new SseDecoder((event) => data.push(event.data));
    const res = await client.post(url, { headers: {}, body: "{}", signal: guard.signal });
    await readBody(res, guard, (bytes) => {
      decoder.feed(bytes);
      return data.includes("[DONE]");
    });
    guard.dispose();
    assert.deepEqual(data, ["a", "b", "[DONE]"]);
    assert.equal(guard.signal.aborted, false, "a whole body is not abandoned");
  }
  client.close();
  assert.equal(new Set(ports).size, 1, `one connection for every request: ports ${ports}`);
});

Deno.test("RequestGuard's idle limit holds while chunks arrive and ends a silent stream", async () => {
  const guard = new RequestGuard(new AbortController().signal, { ...NO_LIMITS, idleTimeoutMs: 60 });
  for (let i = 0; i < 10; i++) {
    guard.activity();
    await new Promise((resolve) => setTimeout(resolve, 15));
  }
  assert.equal(guard.signal.aborted, false, "150 ms of chunks 15 ms apart stay within 60 ms idle");
  await new Promise((resolve) => guard.signal.addEventListener("abort", resolve));
  const err = guard.failure(new Error("aborted"), "stream", "u");
  assert.ok(err instanceof IopError);
  assert.equal(err.code, "TIMEOUT");
  assert.equal(err.message, "Model server did not send more output within idleTimeoutMs=60");
  guard.dispose();
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

Deno.test("waiting for room in the sink is not idle time, and a cancel ends the wait", async () => {
  const outer = new AbortController();
  const guard = new RequestGuard(outer.signal, { ...NO_LIMITS, idleTimeoutMs: 50 });
  try {
    guard.activity();
    // Five idle limits long: the backend waits for us, it is not quiet.
    await guard.roomFrom(new Promise((resolve) => setTimeout(resolve, 250)));
    assert.equal(guard.signal.aborted, false);
    const never = new Promise<void>(() => {});
    const waiting = guard.roomFrom(never);
    outer.abort(new IopError("CANCELLED", "client went away"));
    await assert.rejects(waiting, { code: "CANCELLED", message: "client went away" });
  } finally {
    guard.dispose();
  }
});
