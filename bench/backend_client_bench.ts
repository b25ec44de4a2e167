/**
 * The Node's backend client against Deno's fetch, on the two exchanges a run makes: a
 * non-streaming completion (one JSON body) and a 64-chunk SSE stream, each chunk its own write.
 * The server is a Deno.serve in this process on loopback; both clients read the whole body.
 * Why the Node does not use fetch: its body reader allocates a 64 KiB buffer per chunk.
 *
 * Run: `deno bench -A bench/backend_client_bench.ts`
 * @module
 */
import { Http1Client } from "../services/node/adapters/http1_client.ts";

const CHUNKS = 64;
const encoder = new TextEncoder();
const chunk = encoder.encode(
  'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok "}}]}\n\n',
);
const answer = JSON.stringify({
  id: "c",
  object: "chat.completion",
  choices: [{ index: 0, message: { role: "assistant", content: "tok ".repeat(16) } }],
});
const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
  const body = await req.json() as { stream?: boolean };
  if (!body.stream) {
    return new Response(answer, { headers: { "content-type": "application/json" } });
  }
  let sent = 0;
  return new Response(
    new ReadableStream({
      async pull(controller) {
        // A macrotask between chunks, so each one is its own write, as a model server's are.
        await new Promise((resolve) => setImmediate(resolve));
        if (sent++ < CHUNKS) controller.enqueue(chunk);
        else controller.close();
      },
    }),
    { headers: { "content-type": "text/event-stream" } },
  );
});
const url = `http://127.0.0.1:${server.addr.port}/v1/chat/completions`;
const request = (stream: boolean) => JSON.stringify({ model: "m", messages: [], stream });
const client = new Http1Client();
const never = new AbortController().signal;

async function viaHttp1(stream: boolean): Promise<void> {
  const res = await client.post(url, {
    headers: { "content-type": "application/json" },
    body: request(stream),
    signal: never,
  });
  while (await res.read(() => {})) { /* whole body */ }
}

async function viaFetch(stream: boolean): Promise<void> {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: request(stream),
  });
  const reader = res.body!.getReader();
  while (!(await reader.read()).done) { /* whole body */ }
}

Deno.bench("Http1Client, non-streaming answer", { group: "answer", baseline: true }, async () => {
  await viaHttp1(false);
});
Deno.bench("fetch, non-streaming answer", { group: "answer" }, async () => {
  await viaFetch(false);
});
Deno.bench(`Http1Client, ${CHUNKS}-chunk stream`, { group: "stream", baseline: true }, async () => {
  await viaHttp1(true);
});
Deno.bench(`fetch, ${CHUNKS}-chunk stream`, { group: "stream" }, async () => {
  await viaFetch(true);
});

globalThis.addEventListener("unload", () => {
  client.close();
  void server.shutdown();
});
