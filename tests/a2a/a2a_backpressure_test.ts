/**
 * A2A streams under slow readers, with a real Edge and Node over TCP and clients on raw sockets
 * that stop reading: the stream that started a task pauses its run (the node stops producing)
 * and, after `runs.stall_timeout_ms`, the run is cancelled and the task says why; a resubscriber
 * that falls behind gets a final error event and its stream closes, while the stream that
 * started the task goes on to its end.
 */
import assert from "node:assert/strict";
import net from "node:net";
import { mockAnswer } from "../../services/node/adapters/mock.ts";
import { A2aTaskManager } from "../../services/edge/a2a/task_manager.ts";
import { memoryTaskStore } from "../../services/edge/a2a/task_store.ts";
import { createEdgeHttp } from "../../services/edge/http/app.ts";
import { mountSurfaces } from "../../services/edge/http/surfaces.ts";
import { type RawConfig, startStack } from "../stack.ts";
import { until } from "../util.ts";

/** Tokens of the flood agent's answer: far more SSE than the sockets' buffers hold. */
const FLOOD_TOKENS = 50_000;
/** A resubscriber falls this far behind at most (the streams' bound in this suite). */
const STREAM_BUFFER_BYTES = 256 * 1024;

function floodConfig(stallTimeoutMs: number): RawConfig {
  return {
    edge: { id: "edge-flood" },
    control_plane: { address: "" },
    // Edge, Node and clients share one event loop here, which the flood keeps busy in bursts of
    // a whole window: beats far enough apart that a starved machine does not drop the link.
    wire: { heartbeat_interval_ms: 2000 },
    runs: { stall_timeout_ms: stallTimeoutMs },
    a2a: { task_retention_ms: 60_000, store_path: ":memory:", max_task_bytes: 8 * 1024 * 1024 },
    nodes: [{
      id: "node-1",
      token: "tok-1",
      adapters: [
        { name: "flood", kind: "mock", tokens: FLOOD_TOKENS, token_delay_ms: 0 },
        { name: "mock", kind: "mock", tokens: 50, token_delay_ms: 1 },
      ],
    }],
    agents: [
      { id: "flood", name: "Flood", kind: "a2a", adapter: "flood", target: "any" },
      { id: "demo", name: "Demo", kind: "a2a", adapter: "mock", target: "any" },
    ],
  };
}

/** An Edge and Node serving the A2A surface with streams bounded at STREAM_BUFFER_BYTES. */
async function startFloodEdge(stallTimeoutMs: number) {
  const edge = await startStack({ config: floodConfig(stallTimeoutMs), tls: "off" });
  const tasks = new A2aTaskManager({
    service: edge.service,
    store: memoryTaskStore(),
    logger: edge.logger,
    retentionMs: 60_000,
    maxTaskBytes: edge.config.a2a.maxTaskBytes,
    streamBufferBytes: STREAM_BUFFER_BYTES,
  });
  const app = createEdgeHttp(edge.service, edge.registry);
  mountSurfaces(app, {
    service: edge.service,
    registry: edge.registry,
    logger: edge.logger,
    a2aTasks: tasks,
    version: "test",
  });
  const http = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, app.fetch);
  return {
    url: `http://127.0.0.1:${http.addr.port}`,
    port: http.addr.port,
    async [Symbol.asyncDispose]() {
      await http.shutdown();
      await edge.close();
      tasks.close();
    },
  };
}

const message = (text: string) => ({
  kind: "message",
  messageId: crypto.randomUUID(),
  role: "user",
  parts: [{ kind: "text", text }],
});

async function rpc(url: string, method: string, params: unknown) {
  const res = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }),
  });
  return (await res.json()).result;
}

/** The `data:` payloads of an SSE body. */
function frames(text: string): Record<string, unknown>[] {
  return text.split("\n\n").filter((b) => b.startsWith("data: ")).map((b) =>
    JSON.parse(b.slice(6))
  );
}

/**
 * A JSON-RPC stream on a raw TCP socket, so that the test decides when (if ever) its bytes are
 * read: it reads up to the first SSE frame, then nothing until `rest()`. It is a `node:net`
 * socket, paused, rather than a `Deno.Conn` left unread: on a starved machine a second read of a
 * `Deno.Conn` whose peer had flooded it was seen never to return with the bytes in its buffer.
 */
class RawStream implements Disposable {
  readonly #socket: net.Socket;
  readonly #chunks: Uint8Array[] = [];
  readonly #ended = Promise.withResolvers<void>();
  #onData: (() => void) | undefined;

  private constructor(socket: net.Socket) {
    this.#socket = socket;
    socket.on("data", (chunk: Uint8Array) => {
      this.#chunks.push(chunk);
      this.#onData?.();
    });
    // A reset counts as the end: the server dropped the connection.
    socket.on("error", () => this.#ended.resolve());
    socket.on("close", () => this.#ended.resolve());
  }

  static async open(port: number, path: string, method: string, params: unknown) {
    const socket = net.connect({ host: "127.0.0.1", port });
    const stream = new RawStream(socket);
    const body = JSON.stringify({ jsonrpc: "2.0", id: 7, method, params });
    socket.write(
      `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n` +
        `Accept: text/event-stream\r\nConnection: close\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
    );
    const firstFrame = Promise.withResolvers<void>();
    stream.#onData = () => {
      const text = new TextDecoder().decode(stream.#bytes());
      if (text.includes("\n\n", text.indexOf("\r\n\r\n") + 4)) firstFrame.resolve();
    };
    stream.#ended.promise.then(() =>
      firstFrame.reject(new Error("the stream ended before its first frame"))
    );
    await firstFrame.promise;
    stream.#onData = undefined;
    socket.pause();
    return stream;
  }

  /** The first SSE frame. */
  get first(): Record<string, unknown> {
    return frames(decodeChunked(this.#bytes()).body)[0]!;
  }

  /** Reads the rest of the response, to its end or the connection's; then closes. */
  async rest(): Promise<{ frames: Record<string, unknown>[]; complete: boolean }> {
    this.#socket.resume();
    await this.#ended.promise;
    this.#socket.destroy();
    const { body, complete } = decodeChunked(this.#bytes());
    return { frames: frames(body), complete };
  }

  /** Closes the socket, so a failed test does not leave the server waiting on it. */
  [Symbol.dispose](): void {
    this.#socket.destroy();
  }

  #bytes(): Uint8Array {
    const all = new Uint8Array(this.#chunks.reduce((n, c) => n + c.length, 0));
    let offset = 0;
    for (const c of this.#chunks) {
      all.set(c, offset);
      offset += c.length;
    }
    return all;
  }
}

/**
 * The body of an HTTP/1.1 chunked response (`bytes` from its status line on), and whether it
 * ended with the last chunk, as a stream closed by the server does, rather than being cut off.
 */
function decodeChunked(bytes: Uint8Array): { body: string; complete: boolean } {
  const decoder = new TextDecoder();
  const crlf = (from: number) => {
    for (let i = from; i + 1 < bytes.length; i++) {
      if (bytes[i] === 13 && bytes[i + 1] === 10) return i;
    }
    return -1;
  };
  const head = decoder.decode(bytes).indexOf("\r\n\r\n");
  assert.ok(head > 0, "a response head");
  assert.match(decoder.decode(bytes.subarray(0, head)), /transfer-encoding: chunked/i);
  let at = head + 4;
  const parts: Uint8Array[] = [];
  while (true) {
    const end = crlf(at);
    if (end < 0) break;
    const size = parseInt(decoder.decode(bytes.subarray(at, end)), 16);
    if (size === 0) return { body: join(parts), complete: true };
    if (end + 2 + size > bytes.length) {
      parts.push(bytes.subarray(end + 2));
      break;
    }
    parts.push(bytes.subarray(end + 2, end + 2 + size));
    at = end + 2 + size + 2;
  }
  return { body: join(parts), complete: false };

  function join(list: Uint8Array[]): string {
    const all = new Uint8Array(list.reduce((n, p) => n + p.length, 0));
    let offset = 0;
    for (const p of list) {
      all.set(p, offset);
      offset += p.length;
    }
    return decoder.decode(all);
  }
}

Deno.test("a stream that started a task and stops reading pauses its run, which is cancelled after runs.stall_timeout_ms while other streams go on", async () => {
  await using edge = await startFloodEdge(1000);
  using stalled = await RawStream.open(edge.port, "/a2a/flood", "message/stream", {
    message: message("go"),
  });
  const task = stalled.first.result as { id: string };
  assert.ok(task.id, "the first frame is the task");

  // Another client streams a task of its own to its end meanwhile.
  const res = await fetch(`${edge.url}/a2a/demo`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 2,
      method: "message/stream",
      params: { message: message("hello") },
    }),
  });
  const other = frames(await res.text());
  const last = other.at(-1)!.result as { final: boolean; status: { state: string } };
  assert.equal(last.final, true);
  assert.equal(last.status.state, "completed");

  const url = `${edge.url}/a2a/flood`;
  const ended = await until("the stalled task ends", async () => {
    const t = await rpc(url, "tasks/get", { id: task.id });
    return t.status.state === "working" ? undefined : t;
  }, 30_000);
  assert.equal(ended.status.state, "canceled");
  assert.match(
    ended.status.message.parts[0].text,
    /client read nothing for 1000 ms \(runs\.stall_timeout_ms\)/,
  );
  const kept = ended.artifacts[0].parts[0].text as string;
  const whole = mockAnswer("go", FLOOD_TOKENS);
  assert.ok(whole.startsWith(kept), "the task kept the output its run produced, in order");
  assert.ok(kept.length < whole.length, "the node stopped producing: the run never finished");

  // The stalled stream was cut off: what it held was dropped, and it has no final event.
  const rest = await stalled.rest();
  assert.equal(rest.complete, false, "the response was cut off, not ended");
  assert.ok(rest.frames.every((f) => !(f.result as { final?: boolean })?.final));
});

Deno.test("a resubscriber that falls behind gets a final error event and is closed while the stream that started the task reads to its end", async () => {
  await using edge = await startFloodEdge(60_000);
  const res = await fetch(`${edge.url}/a2a/flood`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "message/stream",
      params: { message: message("go") },
    }),
  });
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  while (!text.includes("\n\n")) text += (await reader.read()).value ?? "";
  const task = frames(text)[0]!.result as { id: string };

  using lagging = await RawStream.open(edge.port, "/a2a/flood", "tasks/resubscribe", {
    id: task.id,
  });
  assert.equal((lagging.first.result as { id: string }).id, task.id);

  // The first stream reads everything, to the final event.
  const chunks = [text];
  while (true) {
    const { value, done } = await reader.read();
    if (done) break;
    chunks.push(value);
  }
  text = chunks.join("");
  const all = frames(text);
  const last = all.at(-1)!.result as { final: boolean; status: { state: string } };
  assert.equal(last.final, true);
  assert.equal(last.status.state, "completed");
  const streamed = all.flatMap((f) => {
    const r = f.result as { kind: string; artifact?: { parts: { text: string }[] } };
    return r.kind === "artifact-update" ? [r.artifact!.parts[0]!.text] : [];
  }).join("");
  assert.equal(streamed, mockAnswer("go", FLOOD_TOKENS), "the first stream missed nothing");

  // The resubscriber, reading at last, finds what it was sent, then why it was closed.
  const behind = await lagging.rest();
  assert.equal(behind.complete, true, "its stream was closed, not cut off");
  const error = behind.frames.at(-1)!.error as { code: number; message: string; data: unknown };
  assert.equal(error.code, -32000);
  assert.match(error.message, new RegExp(`fell more than ${STREAM_BUFFER_BYTES} bytes behind`));
  assert.deepEqual(error.data, {
    reason: "slow_consumer",
    taskId: task.id,
    maxBufferedBytes: STREAM_BUFFER_BYTES,
  });
  assert.ok(behind.frames.length < all.length, "it was cut off before the end");
  assert.ok(behind.frames.slice(0, -1).every((f) => f.result !== undefined));
});
