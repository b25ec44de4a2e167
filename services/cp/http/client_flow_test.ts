/**
 * The `/client` WebSocket under slow clients, on real sockets: a client that stops reading gets
 * no more pushes once its socket holds more than the bound, and is closed with 1008 and a reason
 * after the stall timeout while another client keeps receiving; one that reads again before
 * then gets the newest status, not every one it missed.
 */
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { Registry } from "prom-client";
import { EdgeStatusResponseSchema } from "../../../proto/gen/iop/v1/control_pb.ts";
import { createLogger } from "../../../shared/log.ts";
import { CommandCenter } from "../commands.ts";
import { parseCpConfig } from "../config.ts";
import { EdgeRegistry } from "../registry.ts";
import { openAuditStore } from "../store/audit_store.ts";
import { createCpHttp } from "./app.ts";
import { CLOSE_SLOW_CLIENT, type PushFlowOptions } from "./socket_flow.ts";
import { until } from "../../../tests/util.ts";

const TOKEN = "read-s3cret";
/** Each status report carries this much, so a few fill a socket's buffers. */
const REPORT_BYTES = 64 * 1024;
const MAX_BUFFERED = 128 * 1024;

/** A Control Plane HTTP app on a free port, with one edge attached; logs collected. */
function startCp(flow: PushFlowOptions) {
  const config = parseCpConfig({
    access: { tokens: [{ name: "viewer", token: TOKEN, role: "read" }] },
    audit: { path: ":memory:" },
  }, "cp.yaml");
  const logs: string[] = [];
  const logger = createLogger("cp.test", { level: "warn", writer: (line) => logs.push(line) });
  const registry = new EdgeRegistry({ eventsPerEdge: 5 });
  const audit = openAuditStore(":memory:");
  const commands = new CommandCenter({
    registry,
    audit,
    logger,
    defaultTimeoutMs: 1000,
    resultGraceMs: 0,
    retained: 5,
  });
  const app = createCpHttp({
    config,
    registry,
    commands,
    audit,
    metrics: new Registry(),
    logger,
    clientFlow: flow,
  });
  // The edge as the wire would attach it; its link is never asked anything here.
  registry.attach({ edgeId: "e1", version: "1", capabilities: [], labels: {} }, {
    requestStatus: () => Promise.reject(new Error("not asked in this test")),
    sendCommand: () => Promise.resolve(),
    close: () => {},
  });
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, app.fetch);
  let n = 0;
  return {
    port: server.addr.port,
    logs,
    /** The edge reports status number `n` (its pool's name carries the number and the bulk). */
    report(): number {
      n++;
      registry.recordStatus(
        "e1",
        create(EdgeStatusResponseSchema, {
          reportedAtMs: BigInt(n),
          pools: [{ pool: `report-${n}-${"x".repeat(REPORT_BYTES)}` }],
        }),
      );
      return n;
    },
    async [Symbol.asyncDispose]() {
      commands.close();
      await server.shutdown();
      audit.close();
    },
  };
}

/** A WebSocket message or the close frame, as the client read it. */
type Frame = { text: string } | { close: number; reason: string };

/**
 * A WebSocket client on a raw TCP socket, so that the test decides when its bytes are read:
 * nothing is read except in {@linkcode RawClient.readUntil}.
 */
class RawClient {
  readonly #conn: Deno.TcpConn;
  #buffer = new Uint8Array(0);
  readonly frames: Frame[] = [];

  private constructor(conn: Deno.TcpConn) {
    this.#conn = conn;
  }

  /** Connects, upgrades, authenticates and subscribes; resolves once subscribed. */
  static async open(port: number): Promise<RawClient> {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port });
    const key = btoa(String.fromCharCode(...crypto.getRandomValues(new Uint8Array(16))));
    await conn.write(new TextEncoder().encode(
      `GET /client HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nUpgrade: websocket\r\n` +
        `Connection: Upgrade\r\nSec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\n\r\n`,
    ));
    const client = new RawClient(conn);
    await client.#readHead();
    await client.send(JSON.stringify({ type: "auth", token: TOKEN, clientName: "slow" }));
    await client.send(JSON.stringify({ subscribe: {} }));
    await client.send(JSON.stringify({ correlationId: "9", statusRequest: {} }));
    await client.readUntil((f) => "text" in f && JSON.parse(f.text).correlationId === "9");
    return client;
  }

  /** Sends a masked text frame. */
  async send(text: string): Promise<void> {
    const payload = new TextEncoder().encode(text);
    assert.ok(payload.length < 126);
    const mask = crypto.getRandomValues(new Uint8Array(4));
    const frame = new Uint8Array(2 + 4 + payload.length);
    frame[0] = 0x81;
    frame[1] = 0x80 | payload.length;
    frame.set(mask, 2);
    for (let i = 0; i < payload.length; i++) frame[6 + i] = payload[i]! ^ mask[i % 4]!;
    await this.#conn.write(frame);
  }

  /** Reads frames until one satisfies `done` (or the connection ends); returns it. */
  async readUntil(done: (f: Frame) => boolean): Promise<Frame | undefined> {
    while (true) {
      let frame: Frame | undefined;
      while ((frame = this.#parse()) !== undefined) {
        this.frames.push(frame);
        if (done(frame)) return frame;
      }
      if (!await this.#fill()) return undefined;
    }
  }

  /** The numbers of the status reports received, in order. */
  get reports(): number[] {
    return this.frames.flatMap((f) => {
      if (!("text" in f)) return [];
      const pool = JSON.parse(f.text).event?.status?.pools?.[0]?.pool as string | undefined;
      return pool ? [Number(pool.split("-")[1])] : [];
    });
  }

  close(): void {
    this.#conn.close();
  }

  async #readHead(): Promise<void> {
    while (true) {
      const text = new TextDecoder().decode(this.#buffer);
      const end = text.indexOf("\r\n\r\n");
      if (end >= 0) {
        assert.match(text, /^HTTP\/1\.1 101/);
        this.#buffer = this.#buffer.subarray(end + 4);
        return;
      }
      if (!await this.#fill()) throw new Error("the upgrade was not answered");
    }
  }

  async #fill(): Promise<boolean> {
    const chunk = new Uint8Array(256 * 1024);
    let n: number | null;
    try {
      n = await this.#conn.read(chunk);
    } catch {
      return false;
    }
    if (n === null) return false;
    const next = new Uint8Array(this.#buffer.length + n);
    next.set(this.#buffer);
    next.set(chunk.subarray(0, n), this.#buffer.length);
    this.#buffer = next;
    return true;
  }

  /** One whole frame off the buffer (server frames are unmasked and unfragmented here). */
  #parse(): Frame | undefined {
    const b = this.#buffer;
    if (b.length < 2) return undefined;
    let length = b[1]! & 0x7f;
    let at = 2;
    if (length === 126) {
      if (b.length < 4) return undefined;
      length = (b[2]! << 8) | b[3]!;
      at = 4;
    } else if (length === 127) {
      if (b.length < 10) return undefined;
      length = Number(new DataView(b.buffer, b.byteOffset + 2, 8).getBigUint64(0));
      at = 10;
    }
    if (b.length < at + length) return undefined;
    const payload = b.subarray(at, at + length);
    this.#buffer = b.subarray(at + length);
    const opcode = b[0]! & 0x0f;
    if (opcode === 0x8) {
      const code = (payload[0]! << 8) | payload[1]!;
      return { close: code, reason: new TextDecoder().decode(payload.subarray(2)) };
    }
    return { text: new TextDecoder().decode(payload) };
  }
}

/** A browser-like client that reads everything: the status report numbers it got. */
async function openReader(port: number) {
  const ws = new WebSocket(`ws://127.0.0.1:${port}/client`);
  const reports: number[] = [];
  let subscribed = false;
  ws.onmessage = (e) => {
    const env = JSON.parse(e.data as string);
    if (env.correlationId === "9") subscribed = true;
    const pool = env.event?.status?.pools?.[0]?.pool as string | undefined;
    if (pool) reports.push(Number(pool.split("-")[1]));
  };
  const closed = new Promise<CloseEvent>((resolve) => ws.onclose = resolve);
  await new Promise((resolve, reject) => {
    ws.onopen = resolve;
    ws.onerror = reject;
  });
  ws.send(JSON.stringify({ type: "auth", token: TOKEN, clientName: "reader" }));
  ws.send(JSON.stringify({ subscribe: {} }));
  ws.send(JSON.stringify({ correlationId: "9", statusRequest: {} }));
  await until("the reader's subscription to be answered", () => subscribed, 10_000, 10);
  return {
    reports,
    async close() {
      ws.close();
      await closed;
    },
  };
}

/** Lets the sockets write (the Control Plane sends from its event loop). */
const turn = () => new Promise((resolve) => setTimeout(resolve, 5));

Deno.test("a /client socket that reads nothing is closed with 1008 after the stall timeout while another client keeps receiving", async () => {
  await using cp = startCp({ maxBufferedBytes: MAX_BUFFERED, stallTimeoutMs: 300, pollMs: 20 });
  const slow = await RawClient.open(cp.port);
  const reader = await openReader(cp.port);

  // The edge reports until the slow client is cut off; the reader takes every report.
  let last = 0;
  await until(
    "the slow client to be cut off",
    () => {
      if (cp.logs.some((l) => l.includes("the client reads too slowly"))) return true;
      last = cp.report();
      return false;
    },
    10_000,
    5,
  );
  const after = cp.report();
  await until(
    "the reader to get the last report",
    () => reader.reports.at(-1) === after,
    10_000,
    5,
  );
  assert.deepEqual(reader.reports, [...reader.reports].sort((a, b) => a - b), "in order");
  await reader.close();

  // The slow client, reading at last: what was sent before it fell behind, then the close.
  const close = await slow.readUntil((f) => "close" in f);
  slow.close();
  assert.deepEqual(close, {
    close: CLOSE_SLOW_CLIENT,
    reason: `too slow: over ${MAX_BUFFERED} bytes unsent for 300 ms`,
  });
  assert.ok(slow.reports.length < last, "no report was pushed to it once it fell behind");
  assert.ok(reader.reports.length > slow.reports.length, "the reader kept receiving");
  assert.ok(
    cp.logs.some((l) => l.includes('"client":"slow"')),
    "the log names the client cut off",
  );
});

Deno.test("a /client socket that falls behind and reads again gets the newest status, not every one it missed", async () => {
  await using cp = startCp({ maxBufferedBytes: MAX_BUFFERED, stallTimeoutMs: 60_000, pollMs: 20 });
  const slow = await RawClient.open(cp.port);
  // Far more than the socket buffers hold: most are held back, then coalesced.
  const reports = 400;
  for (let i = 0; i < reports; i++) {
    cp.report();
    await turn();
  }
  const got = await slow.readUntil((f) =>
    "text" in f &&
    JSON.parse(f.text).event?.status?.pools?.[0]?.pool.startsWith(`report-${reports}-`)
  );
  slow.close();
  assert.ok(got, "the newest report arrived");
  const seen = slow.reports;
  assert.equal(seen.at(-1), reports);
  assert.ok(seen.length < reports, `the missed reports were coalesced (${seen.length} sent)`);
  assert.deepEqual(seen, [...seen].sort((a, b) => a - b), "in order");
  assert.ok(!cp.logs.some((l) => l.includes("too slowly")), "it was not cut off");
});
