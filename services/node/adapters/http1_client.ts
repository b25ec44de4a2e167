/**
 * A small HTTP/1.1 client for the requests a run sends to its model server: one POST per run,
 * keep-alive connections per origin, and a response body read straight from the socket into
 * one buffer per connection, whether framed by `content-length`, `chunked` or the connection's
 * end.
 *
 * Why not `fetch`: on this path Deno's fetch cost about 150 µs of CPU per request and 1.2 ms
 * per 64-chunk stream where the same exchange over a plain socket costs 25 µs and 0.6 ms; the
 * model adapters spend most of a run's CPU here. Health checks and listings keep using fetch.
 *
 * Limits: no redirects, no proxies, no compression (no `accept-encoding` is sent), no
 * `100-continue`; a response head over 64 KiB is refused. An aborted request closes its
 * connection, which is how a cancel reaches the backend.
 * @module
 */

/** Largest response head (status line and headers) accepted. */
const MAX_HEAD_BYTES = 64 * 1024;
/** Socket read size; one buffer per connection, reused for every read. */
const READ_BYTES = 16 * 1024;
/** Idle connections kept per origin. */
const MAX_IDLE_PER_ORIGIN = 64;

const encoder = new TextEncoder();
const latin1 = new TextDecoder("latin1");

/** The failure of an exchange; `beforeResponse` tells a request that never reached an answer. */
export class Http1Error extends Error {
  readonly beforeResponse: boolean;
  constructor(message: string, beforeResponse: boolean, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "Http1Error";
    this.beforeResponse = beforeResponse;
  }
}

/** One response: status and headers are in; the body is read with `read`, `text` or `json`. */
export interface Http1Response {
  readonly status: number;
  readonly statusText: string;
  readonly ok: boolean;
  /**
   * Reads the next part of the body and hands each piece to `onData` (a view that is valid only
   * during the call); resolves false once the body has ended.
   */
  read(onData: (bytes: Uint8Array) => void): Promise<boolean>;
  /** The whole (rest of the) body as text. */
  text(): Promise<string>;
  /** The whole (rest of the) body parsed as JSON. */
  json(): Promise<unknown>;
  /** Drops the rest of the body by closing the connection. */
  cancel(): void;
}

/** Options of {@linkcode Http1Client.post}. */
export interface PostRequest {
  headers: Record<string, string>;
  body: string;
  signal: AbortSignal;
}

interface Origin {
  hostname: string;
  port: number;
  tls: boolean;
  key: string;
}

/** Options of {@linkcode Http1Client}. */
export interface Http1ClientOptions {
  /** PEM certificates trusted for `https` besides the system's (for private CAs and tests). */
  caCerts?: string[];
}

/** Keep-alive connections per origin, shared by every run of an adapter. */
export class Http1Client {
  readonly #idle = new Map<string, Connection[]>();
  readonly #options: Http1ClientOptions;

  constructor(options: Http1ClientOptions = {}) {
    this.#options = options;
  }

  /** POSTs `request.body` to `url` and resolves once the response head is in. */
  async post(url: string, request: PostRequest): Promise<Http1Response> {
    const target = new URL(url);
    const origin = originOf(target);
    const head = `POST ${target.pathname}${target.search} HTTP/1.1\r\nhost: ${target.host}\r\n` +
      Object.entries(request.headers).map(([k, v]) => `${k}: ${v}\r\n`).join("") +
      `content-length: ${encoder.encode(request.body).byteLength}\r\n\r\n`;
    const bytes = encoder.encode(head + request.body);
    request.signal.throwIfAborted();
    const reused = this.#take(origin.key);
    if (reused) {
      try {
        return await reused.exchange(bytes, request.signal);
      } catch (err) {
        // A kept-alive connection the server had already closed: send once more on a new one.
        if (!(err instanceof Http1Error && err.beforeResponse) || request.signal.aborted) throw err;
      }
    }
    const conn = await Connection.open(
      origin,
      request.signal,
      (c) => this.#release(c),
      this.#options.caCerts,
    );
    return await conn.exchange(bytes, request.signal);
  }

  /** Closes every idle connection. */
  close(): void {
    for (const list of this.#idle.values()) for (const c of list) c.close();
    this.#idle.clear();
  }

  #take(key: string): Connection | undefined {
    const list = this.#idle.get(key);
    return list?.pop();
  }

  #release(conn: Connection): void {
    const list = this.#idle.get(conn.origin.key) ?? [];
    if (list.length >= MAX_IDLE_PER_ORIGIN) {
      conn.close();
      return;
    }
    list.push(conn);
    this.#idle.set(conn.origin.key, list);
  }
}

function originOf(url: URL): Origin {
  const tls = url.protocol === "https:";
  if (!tls && url.protocol !== "http:") {
    throw new TypeError(`Cannot send to '${url.href}' as only http and https are supported`);
  }
  const port = url.port === "" ? (tls ? 443 : 80) : Number(url.port);
  const hostname = url.hostname.replace(/^\[|\]$/g, "");
  return { hostname, port, tls, key: `${url.protocol}//${url.host}` };
}

type Framing =
  | { kind: "length"; left: number }
  | { kind: "chunked"; state: "size" | "data" | "data_end" | "trailer"; left: number }
  | { kind: "close" };

/** One socket and the exchange on it; returned to the pool when a body ended cleanly. */
class Connection {
  readonly origin: Origin;
  readonly #conn: Deno.Conn;
  readonly #buffer = new Uint8Array(READ_BYTES);
  readonly #release: (c: Connection) => void;
  /** Bytes read but not consumed yet: buffer[start, end). */
  #start = 0;
  #end = 0;
  #closed = false;

  private constructor(origin: Origin, conn: Deno.Conn, release: (c: Connection) => void) {
    this.origin = origin;
    this.#conn = conn;
    this.#release = release;
  }

  static async open(
    origin: Origin,
    signal: AbortSignal,
    release: (c: Connection) => void,
    caCerts: string[] | undefined,
  ): Promise<Connection> {
    const { hostname, port } = origin;
    let conn: Deno.Conn;
    try {
      conn = origin.tls
        ? await abortable(
          Deno.connectTls({ hostname, port, ...(caCerts ? { caCerts } : {}) }),
          signal,
        )
        : await Deno.connect({ hostname, port, signal });
    } catch (err) {
      throw new Http1Error(
        `cannot connect to ${origin.hostname}:${origin.port}: ${(err as Error).message}`,
        true,
        { cause: err },
      );
    }
    if (!origin.tls) (conn as Deno.TcpConn).setNoDelay(true);
    return new Connection(origin, conn, release);
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    try {
      this.#conn.close();
    } catch {
      // Already closed.
    }
  }

  async exchange(request: Uint8Array, signal: AbortSignal): Promise<Http1Response> {
    this.#start = this.#end = 0;
    const onAbort = () => this.close();
    signal.addEventListener("abort", onAbort, { once: true });
    const done = () => signal.removeEventListener("abort", onAbort);
    try {
      await this.#writeAll(request);
      let head = await this.#readHead();
      // An interim answer (100 Continue, 103 Early Hints) precedes the real one.
      while (/^HTTP\/1\.[01] 1\d\d\b/.test(head)) head = await this.#readHead();
      return this.#response(head, done);
    } catch (err) {
      done();
      this.close();
      if (signal.aborted) throw signal.reason;
      throw err;
    }
  }

  async #writeAll(data: Uint8Array): Promise<void> {
    let offset = 0;
    try {
      while (offset < data.byteLength) offset += await this.#conn.write(data.subarray(offset));
    } catch (err) {
      throw new Http1Error(`cannot send the request: ${(err as Error).message}`, true, {
        cause: err,
      });
    }
  }

  /** Fills the buffer with at least one more byte; false at the end of the stream. */
  async #fill(): Promise<boolean> {
    if (this.#start > 0 && this.#start === this.#end) this.#start = this.#end = 0;
    if (this.#end === this.#buffer.byteLength) {
      if (this.#start === 0) throw new Http1Error("response head is too large", false);
      this.#buffer.copyWithin(0, this.#start, this.#end);
      this.#end -= this.#start;
      this.#start = 0;
    }
    let n: number | null;
    try {
      n = await this.#conn.read(this.#buffer.subarray(this.#end));
    } catch (err) {
      throw new Http1Error(`connection broke: ${(err as Error).message}`, this.#end === 0, {
        cause: err,
      });
    }
    if (n === null) return false;
    this.#end += n;
    return true;
  }

  async #readHead(): Promise<string> {
    let scanned = this.#start;
    while (true) {
      const at = indexOfBlankLine(this.#buffer, Math.max(this.#start, scanned - 3), this.#end);
      if (at >= 0) {
        const head = latin1.decode(this.#buffer.subarray(this.#start, at));
        this.#start = at + 4;
        return head;
      }
      scanned = this.#end;
      if (this.#end - this.#start > MAX_HEAD_BYTES) {
        throw new Http1Error(`response head exceeds ${MAX_HEAD_BYTES} bytes`, false);
      }
      if (!(await this.#fill())) {
        throw new Http1Error("server closed the connection before answering", this.#end === 0);
      }
    }
  }

  #response(head: string, done: () => void): Http1Response {
    const lines = head.split("\r\n");
    const status = /^HTTP\/1\.([01]) (\d{3})(?: (.*))?$/.exec(lines[0] ?? "");
    if (!status) throw new Http1Error(`malformed status line '${lines[0]}'`, false);
    const headers = new Map<string, string>();
    for (const line of lines.slice(1)) {
      const colon = line.indexOf(":");
      if (colon <= 0) continue;
      const name = line.slice(0, colon).trim().toLowerCase();
      const value = line.slice(colon + 1).trim();
      headers.set(name, headers.has(name) ? `${headers.get(name)}, ${value}` : value);
    }
    const code = Number(status[2]);
    const keepAlive = status[1] === "1" &&
      !/(^|,)\s*close\s*(,|$)/i.test(headers.get("connection") ?? "");
    const chunked = /chunked/i.test(headers.get("transfer-encoding") ?? "");
    const length = headers.get("content-length");
    if (!chunked && length !== undefined && !/^\d+$/.test(length)) {
      throw new Http1Error(`malformed content-length '${length}'`, false);
    }
    let framing: Framing = chunked
      ? { kind: "chunked", state: "size", left: 0 }
      : length !== undefined
      ? { kind: "length", left: Number(length) }
      : code === 204 || code === 304
      ? { kind: "length", left: 0 }
      : { kind: "close" };
    let ended = false;
    const finish = (clean: boolean) => {
      if (ended) return;
      ended = true;
      done();
      // Bytes after the body mean the server does not speak plain HTTP/1.1 on this connection.
      const reusable = clean && keepAlive && framing.kind !== "close" && this.#start === this.#end;
      if (reusable) this.#release(this);
      else this.close();
    };
    if (framing.kind === "length" && framing.left === 0) finish(true);

    const read = async (onData: (bytes: Uint8Array) => void): Promise<boolean> => {
      if (ended) return false;
      try {
        // More bytes are needed when the buffer is empty or holds only part of a chunk line.
        let starved = this.#start === this.#end;
        while (true) {
          if (starved && !(await this.#fill())) {
            if (framing.kind === "close") {
              finish(false);
              return false;
            }
            throw new Http1Error("server closed the connection inside the body", false);
          }
          const before = this.#start;
          const over = this.#consume(framing, onData);
          framing = over.framing;
          if (over.ended) {
            finish(true);
            return false;
          }
          if (this.#start > before) return true;
          starved = true;
        }
      } catch (err) {
        // Socket failures arrive as Http1Error; anything else was thrown by `onData`.
        finish(false);
        throw err;
      }
    };
    const text = async () => {
      const parts: string[] = [];
      const decoder = new TextDecoder();
      while (await read((bytes) => parts.push(decoder.decode(bytes, { stream: true })))) {
        // Reading on.
      }
      parts.push(decoder.decode());
      return parts.join("");
    };
    return {
      status: code,
      statusText: status[3] ?? "",
      ok: code >= 200 && code < 300,
      read,
      text,
      json: async () => JSON.parse(await text()),
      cancel: () => finish(false),
    };
  }

  /** Hands the buffered body bytes to `onData` under `framing`; says when the body ended. */
  #consume(
    framing: Framing,
    onData: (bytes: Uint8Array) => void,
  ): { framing: Framing; ended: boolean } {
    const buf = this.#buffer;
    if (framing.kind === "close") {
      onData(buf.subarray(this.#start, this.#end));
      this.#start = this.#end;
      return { framing, ended: false };
    }
    if (framing.kind === "length") {
      const n = Math.min(framing.left, this.#end - this.#start);
      if (n > 0) onData(buf.subarray(this.#start, this.#start + n));
      this.#start += n;
      const left = framing.left - n;
      return { framing: { kind: "length", left }, ended: left === 0 };
    }
    let { state, left } = framing;
    while (this.#start < this.#end) {
      if (state === "data") {
        const n = Math.min(left, this.#end - this.#start);
        onData(buf.subarray(this.#start, this.#start + n));
        this.#start += n;
        left -= n;
        if (left === 0) state = "data_end";
        continue;
      }
      const eol = indexOfCrlf(buf, this.#start, this.#end);
      if (eol < 0) {
        if (this.#end - this.#start > 1024) throw new Http1Error("malformed chunk framing", false);
        break;
      }
      const line = latin1.decode(buf.subarray(this.#start, eol));
      this.#start = eol + 2;
      if (state === "data_end") {
        if (line !== "") throw new Http1Error("malformed chunk framing", false);
        state = "size";
      } else if (state === "size") {
        const size = Number.parseInt(line.split(";")[0]!.trim(), 16);
        if (!Number.isFinite(size) || size < 0) {
          throw new Http1Error(`malformed chunk size '${line}'`, false);
        }
        if (size === 0) state = "trailer";
        else {
          state = "data";
          left = size;
        }
      } else if (line === "") {
        return { framing: { kind: "chunked", state, left }, ended: true };
      }
    }
    return { framing: { kind: "chunked", state, left }, ended: false };
  }
}

/** `connecting`, or the abort's reason when `signal` fires first (closing the late connection). */
function abortable(connecting: Promise<Deno.Conn>, signal: AbortSignal): Promise<Deno.Conn> {
  if (signal.aborted) {
    void connecting.then((c) => c.close(), () => {});
    return Promise.reject(signal.reason);
  }
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      void connecting.then((c) => c.close(), () => {});
      reject(signal.reason);
    };
    signal.addEventListener("abort", onAbort, { once: true });
    connecting.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

function indexOfBlankLine(buf: Uint8Array, from: number, to: number): number {
  for (let i = from; i + 3 < to; i++) {
    if (buf[i] === 13 && buf[i + 1] === 10 && buf[i + 2] === 13 && buf[i + 3] === 10) return i;
  }
  return -1;
}

function indexOfCrlf(buf: Uint8Array, from: number, to: number): number {
  for (let i = from; i + 1 < to; i++) {
    if (buf[i] === 13 && buf[i + 1] === 10) return i;
  }
  return -1;
}
