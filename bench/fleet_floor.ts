/**
 * The floor of the fleet bench (`edge_fleet_bench.ts --floor`): what any Deno process pays to
 * concentrate streams of that shape, with nothing of IOP in it. A relay process takes the same
 * `POST /v1/chat/completions` streams the Edge does and hands each to one of its links (plain
 * TCP, each frame a u32 length, a u32 stream id and a payload); the link end, in the bench
 * process, sends the stream's tokens back one frame at a time at the mock's pace, and the relay
 * writes each token to its client as an OpenAI chunk. Per token that is one read from a link
 * and one write to a client socket, as for the Edge, but no protobuf, TLS, run model, history,
 * metrics, retries or flow control.
 *
 * Relay: `deno run -A bench/fleet_floor.ts --http-port P --wire-port W` (started by the bench).
 * It answers `/readyz` with the links connected and `/metrics` with its event-loop lag the way
 * the Edge does, so the bench reads both alike.
 * @module
 */
import net from "node:net";
import { parseArgs } from "node:util";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** A frame: u32 length of what follows, u32 stream id, payload. */
function frame(stream: number, payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(8 + payload.byteLength);
  const view = new DataView(out.buffer);
  view.setUint32(0, 4 + payload.byteLength);
  view.setUint32(4, stream);
  out.set(payload, 8);
  return out;
}

/** Calls `onFrame` for every whole frame of a byte stream, however it was split. */
function frameReader(onFrame: (stream: number, payload: Uint8Array) => void) {
  let held = new Uint8Array(0);
  return (chunk: Uint8Array) => {
    const bytes = held.byteLength === 0 ? chunk : concat(held, chunk);
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    let offset = 0;
    while (bytes.byteLength - offset >= 8) {
      const length = view.getUint32(offset);
      if (bytes.byteLength - offset < 4 + length) break;
      onFrame(view.getUint32(offset + 4), bytes.subarray(offset + 8, offset + 4 + length));
      offset += 4 + length;
    }
    held = bytes.slice(offset);
  };
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.byteLength + b.byteLength);
  out.set(a);
  out.set(b, a.byteLength);
  return out;
}

/**
 * The link end of the floor, as the bench's simulated nodes are the Edge's: connects to the
 * relay's wire port and answers each stream it is handed (payload: u32 token count) with that
 * many tokens, `delayMs` apart, then an empty payload for its end. Returns how to close it.
 */
export function connectFloorLink(wirePort: number, delayMs: number): () => void {
  const socket = net.connect({ host: "127.0.0.1", port: wirePort, noDelay: true });
  const timers = new Set<ReturnType<typeof setTimeout>>();
  socket.on(
    "data",
    frameReader((stream, payload) => {
      const tokens = new DataView(payload.buffer, payload.byteOffset).getUint32(0);
      let sent = 0;
      const tick = () => {
        timers.delete(timer);
        if (socket.destroyed) return;
        sent++;
        const token = frame(stream, encoder.encode(` t${sent}`));
        // The last token and the stream's end leave together, as a run's last delta and its
        // completion do.
        socket.write(sent < tokens ? token : concat(token, frame(stream, new Uint8Array(0))));
        if (sent < tokens) timers.add(timer = setTimeout(tick, delayMs));
      };
      let timer = setTimeout(tick, delayMs);
      timers.add(timer);
    }),
  );
  socket.on("error", () => {});
  return () => {
    for (const t of timers) clearTimeout(t);
    socket.destroy();
  };
}

/** The relay process: links on `wirePort`, clients on `httpPort`. */
function runRelay(httpPort: number, wirePort: number): void {
  const links: net.Socket[] = [];
  const streams = new Map<number, ReadableStreamDefaultController<Uint8Array>>();
  let nextStream = 1;
  let nextLink = 0;
  net.createServer({ noDelay: true }, (socket) => {
    links.push(socket);
    const onFrame = (stream: number, payload: Uint8Array) => {
      const out = streams.get(stream);
      if (!out) return;
      const id = `chatcmpl-${stream}`;
      if (payload.byteLength === 0) {
        streams.delete(stream);
        out.enqueue(encoder.encode(
          `data: ${JSON.stringify(chunk(id, {}, "stop"))}\n\ndata: [DONE]\n\n`,
        ));
        out.close();
        return;
      }
      const delta = { content: decoder.decode(payload) };
      out.enqueue(encoder.encode(`data: ${JSON.stringify(chunk(id, delta, null))}\n\n`));
    };
    socket.on("data", frameReader(onFrame));
    socket.on("error", () => {});
    socket.on("close", () => links.splice(links.indexOf(socket), 1));
  }).listen(wirePort, "127.0.0.1");

  let lagS = 0;
  let tickAt = performance.now();
  setInterval(() => {
    const now = performance.now();
    lagS = Math.max(0, now - tickAt - 1000) / 1000;
    tickAt = now;
  }, 1000);

  Deno.serve({ hostname: "127.0.0.1", port: httpPort, onListen() {} }, async (req) => {
    const path = new URL(req.url).pathname;
    if (path === "/healthz") return Response.json({ status: "ok" });
    if (path === "/readyz") return Response.json({ nodes_connected: links.length });
    if (path === "/metrics") return new Response(`nodejs_eventloop_lag_seconds ${lagS}\n`);
    // A router reads the body (the model, the token cap) as the Edge must.
    const body = await req.json() as { max_tokens?: number };
    const link = links[nextLink++ % links.length];
    if (!link) return Response.json({ error: { message: "no link" } }, { status: 503 });
    const stream = nextStream++;
    const tokens = new Uint8Array(4);
    new DataView(tokens.buffer).setUint32(0, body.max_tokens ?? 16);
    const sse = new ReadableStream<Uint8Array>({
      start(out) {
        streams.set(stream, out);
        link.write(frame(stream, tokens));
      },
      cancel() {
        streams.delete(stream);
      },
    });
    return new Response(sse, { headers: { "content-type": "text/event-stream" } });
  });
}

function chunk(id: string, delta: { content?: string }, finish: string | null) {
  return {
    id,
    object: "chat.completion.chunk",
    created: Math.floor(Date.now() / 1000),
    model: "sim",
    choices: [{ index: 0, delta, finish_reason: finish }],
  };
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    strict: true,
    options: { "http-port": { type: "string" }, "wire-port": { type: "string" } },
  });
  runRelay(Number(values["http-port"]), Number(values["wire-port"]));
}
