/**
 * Backpressure end to end, with real Edge and Node processes: a client that stops reading a
 * 300 MB stream makes the Node stop reading its backend (the per-run window on the node wire),
 * so neither process grows by more than 64 MB while another stream goes on to its end (and the
 * backend streams little more than the window and the sockets' buffers); after
 * `runs.stall_timeout_ms` the Edge cancels the stalled run, the Node closes its backend request,
 * and the history says why. Over SSE (OpenAI) and NDJSON (Ollama) alike.
 * @module
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { mockAnswer } from "../services/node/adapters/mock.ts";
import { edgeReady, historyOf, ServiceProcess } from "./process_stack.ts";
import { freePort, until } from "./util.ts";

const MiB = 1024 * 1024;
/** What the backend would stream if read to the end. */
const TOTAL_BYTES = 300 * MiB;
/** Each SSE event carries this much content. */
const DELTA_BYTES = 64 * 1024;
const STALL_MS = 8_000;
/** The Edge's default `runs.window_bytes`: what the Node sends a run ahead of its client. */
const WINDOW_BYTES = 1 * MiB;
/**
 * What the backend may stream to a stalled client: the window, plus what the sockets on the way
 * buffer (the Edge's to the client and the client's, the backend's to the Node and the Node's;
 * a few MiB each on loopback). Runs measure 8-9.5 MiB; a leak past the window is tens of MiB.
 */
const STALLED_PRODUCED_BOUND = WINDOW_BYTES + 4 * 4 * MiB;

/**
 * An OpenAI-compatible backend that streams `TOTAL_BYTES` of content as fast as its reader takes
 * it, and no faster (one event per pull), counting what it produced.
 */
function startFirehose() {
  let produced = 0;
  let closedEarly = 0;
  const delta = "x".repeat(DELTA_BYTES);
  const encoder = new TextEncoder();
  const chunk = (content: string | undefined, finish: string | null) =>
    encoder.encode(
      `data: ${
        JSON.stringify({
          id: "chatcmpl-firehose",
          object: "chat.completion.chunk",
          created: Math.floor(Date.now() / 1000),
          model: "firehose",
          choices: [{
            index: 0,
            delta: content === undefined ? {} : { role: "assistant", content },
            finish_reason: finish,
          }],
        })
      }\n\n`,
    );
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, (req) => {
    const path = new URL(req.url).pathname;
    if (path === "/v1/models") {
      return Response.json({
        object: "list",
        data: [{ id: "firehose", object: "model", created: 0, owned_by: "test" }],
      });
    }
    let sent = 0;
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (sent >= TOTAL_BYTES) {
          controller.enqueue(chunk(undefined, "stop"));
          controller.enqueue(encoder.encode("data: [DONE]\n\n"));
          controller.close();
          return;
        }
        sent += DELTA_BYTES;
        produced += DELTA_BYTES;
        controller.enqueue(chunk(delta, null));
      },
      cancel() {
        closedEarly++;
      },
    }, { highWaterMark: 0 });
    return new Response(body, { headers: { "content-type": "text/event-stream" } });
  });
  return {
    url: `http://127.0.0.1:${server.addr.port}`,
    /** Content bytes streamed so far, over all requests. */
    get produced() {
      return produced;
    },
    /** Requests whose reader went away before the end. */
    get closedEarly() {
      return closedEarly;
    },
    close: () => server.shutdown(),
  };
}

async function startStack(backendUrl: string) {
  const dir = await Deno.makeTempDir({ prefix: "iop_backpressure_" });
  const httpPort = freePort();
  const wirePort = freePort();
  await Deno.writeTextFile(
    `${dir}/edge.yaml`,
    `edge: { id: edge-bp }
http: { host: 127.0.0.1, port: ${httpPort} }
wire: { host: 127.0.0.1, port: ${wirePort}, insecure_plaintext: true }
control_plane: { address: "" }
runs: { stall_timeout_ms: ${STALL_MS} }
nodes:
  - id: node-bp
    token: node-bp-token
    adapters:
      - { name: openai, kind: openai_compat, base_url: "${backendUrl}/v1" }
      - { name: mock, kind: mock, tokens: 30, token_delay_ms: 50 }
    providers:
      - { id: big, adapter: openai, target: firehose, model_group: big, max_concurrency: 4 }
      - { id: paced, adapter: mock, target: demo, model_group: paced, max_concurrency: 4 }
models:
  - { name: big, route: pool }
  - { name: paced, route: pool }
`,
  );
  await Deno.writeTextFile(
    `${dir}/node.yaml`,
    `node: { id: node-bp, token: node-bp-token }
edge: { address: "127.0.0.1:${wirePort}", insecure_plaintext: true }
http: { host: 127.0.0.1, port: 0 }
history: { path: ${dir}/history.db }
policy: { adapter_kinds: [openai_compat, mock], backend_hosts: ["${new URL(backendUrl).host}"] }
`,
  );
  const edge = new ServiceProcess("edge", `${dir}/edge.yaml`);
  const node = new ServiceProcess("node", `${dir}/node.yaml`);
  const url = `http://127.0.0.1:${httpPort}`;
  const stack = {
    url,
    httpPort,
    edge,
    node,
    history: `${dir}/history.db`,
    async [Symbol.asyncDispose]() {
      await node[Symbol.asyncDispose]();
      await edge[Symbol.asyncDispose]();
      await Deno.remove(dir, { recursive: true });
    },
  };
  try {
    await edgeReady(url, [edge.log, node.log]);
  } catch (err) {
    await stack[Symbol.asyncDispose]();
    throw err;
  }
  return stack;
}

/**
 * A client that sends a streaming request over a raw socket, reads its first `take` bytes and
 * then stops reading: the socket's buffers fill, and the Edge's writes to it stop.
 */
async function pausedClient(port: number, path: string, body: unknown, take = 4096) {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  const json = JSON.stringify(body);
  await conn.write(
    new TextEncoder().encode(
      `POST ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n` +
        `content-length: ${new TextEncoder().encode(json).length}\r\n\r\n${json}`,
    ),
  );
  const buffer = new Uint8Array(take);
  let got = 0;
  while (got < take) {
    const n = await conn.read(buffer.subarray(got));
    if (n === null) break;
    got += n;
  }
  const head = new TextDecoder().decode(buffer.subarray(0, got));
  return {
    head,
    /** Reads the rest until the Edge closes the connection; returns how many bytes came. */
    async drain(): Promise<number> {
      let total = 0;
      const big = new Uint8Array(1024 * 1024);
      try {
        while (true) {
          const n = await conn.read(big);
          if (n === null) break;
          total += n;
        }
      } catch {
        // A reset ends it as well.
      }
      conn.close();
      return total;
    },
  };
}

/** Waits until `read()` has not changed for three polls 500 ms apart; returns its value. */
async function settled(what: string, read: () => number): Promise<number> {
  let last = -1;
  let same = 0;
  return await until(
    what,
    () => {
      const now = read();
      same = now === last ? same + 1 : 0;
      last = now;
      return same >= 3 && now;
    },
    30_000,
    500,
  );
}

const SURFACES = [
  {
    name: "an OpenAI SSE stream",
    path: "/v1/chat/completions",
    body: { model: "big", stream: true, messages: [{ role: "user", content: "flood" }] },
  },
  {
    name: "an Ollama NDJSON stream",
    path: "/api/chat",
    body: { model: "big", stream: true, messages: [{ role: "user", content: "flood" }] },
  },
];

for (const surface of SURFACES) {
  Deno.test(`a client that stops reading ${surface.name} of 300 MB holds both tiers to a bounded size`, async () => {
    const backend = startFirehose();
    try {
      await using stack = await startStack(backend.url);
      const openai = new OpenAI({ apiKey: "x", baseURL: `${stack.url}/v1`, maxRetries: 0 });
      // Warm both processes with one whole paced stream before measuring.
      const warm = await openai.chat.completions.create({
        model: "paced",
        messages: [{ role: "user", content: "warm" }],
      });
      assert.equal(warm.choices[0]?.message.content, mockAnswer("warm", 30));
      const before = { edge: stack.edge.rssBytes(), node: stack.node.rssBytes() };

      const paused = await pausedClient(stack.httpPort, surface.path, surface.body);
      assert.match(paused.head, /^HTTP\/1\.1 200/);
      const produced = await settled("the backend to stop being read", () => backend.produced);
      assert.ok(produced < 64 * MiB, `the backend streamed ${produced} bytes to a stalled client`);
      assert.ok(
        produced < STALLED_PRODUCED_BOUND,
        `the backend streamed ${produced} bytes to a stalled client, over the window and the ` +
          `socket buffers (${STALLED_PRODUCED_BOUND})`,
      );

      // Another stream on the same node and link goes on to its end meanwhile.
      let paced = "";
      const stream = await openai.chat.completions.create({
        model: "paced",
        stream: true,
        messages: [{ role: "user", content: "pace" }],
      });
      for await (const chunk of stream) paced += chunk.choices[0]?.delta.content ?? "";
      assert.equal(paced, mockAnswer("pace", 30));

      const grown = {
        edge: stack.edge.rssBytes() - before.edge,
        node: stack.node.rssBytes() - before.node,
      };
      assert.ok(grown.edge < 64 * MiB, `the edge grew by ${grown.edge} bytes`);
      assert.ok(grown.node < 64 * MiB, `the node grew by ${grown.node} bytes`);
      assert.equal(backend.closedEarly, 0, "the backend request ended before the stall timeout");

      // Past runs.stall_timeout_ms the Edge cancels the run; the Node closes its backend request.
      const row = await until(
        "the stalled run to be cancelled in the history",
        () => {
          const row = historyOf(stack.history).find((r) => r.adapter === "openai");
          return row?.status === "cancelled" && row;
        },
        STALL_MS + 20_000,
        200,
      );
      assert.match(
        row.error?.message ?? "",
        new RegExp(`client read nothing for ${STALL_MS} ms \\(runs\\.stall_timeout_ms\\)`),
      );
      await until("the backend request to be closed", () => backend.closedEarly === 1);
      // The client's connection is ended, not left open with a buffer behind it.
      const rest = await paused.drain();
      assert.ok(rest < 64 * MiB, `the edge still sent ${rest} bytes after the stall`);
    } finally {
      await backend.close();
    }
  });
}
