/**
 * HTTP plumbing shared by the model-server adapters: a guard that links the run's abort signal
 * to the fetch and enforces the time limits, status-to-{@linkcode IopError} mapping, and readers
 * for NDJSON lines and SSE events that survive arbitrary chunk boundaries.
 *
 * Time limits (each 0 = off): `connectTimeoutMs` runs from the request until its response
 * headers; `firstTokenTimeoutMs` from the request until the first content delta (for a
 * non-streaming request: until the whole answer); `idleTimeoutMs` is the longest gap between
 * body chunks, counted from the first one (before it the model is prefilling, which the
 * first-token limit covers); `totalTimeoutMs` bounds the whole run. Each ends the run with
 * TIMEOUT. Time spent waiting for room in the run's sink (flow control, `EventSink.ready`) is
 * not idle time: the backend is then waiting for us, not we for it.
 * @module
 */
import { createParser, type EventSourceMessage } from "eventsource-parser";
import { IopError } from "../../../shared/errors.ts";
import type { EventSink } from "../ports.ts";
import type { Http1Client, Http1Response } from "./http1_client.ts";
import { untilRoom } from "./room.ts";

/** The time limits of one model request, in milliseconds; 0 = off. */
export interface StreamLimits {
  connectTimeoutMs: number;
  firstTokenTimeoutMs: number;
  idleTimeoutMs: number;
  totalTimeoutMs: number;
}

type Timer = ReturnType<typeof setTimeout>;

/**
 * Owns one model request's lifetime: its `signal` aborts the fetch when the caller cancels or a
 * time limit passes, and {@linkcode RequestGuard.failure} says what the run must reject with.
 */
export class RequestGuard {
  readonly #controller = new AbortController();
  readonly #outer: AbortSignal;
  readonly #limits: StreamLimits;
  readonly #startedAt = performance.now();
  readonly #onOuterAbort = () => this.#controller.abort(this.#outer.reason);
  #timeout: IopError | undefined;
  #connect: Timer | undefined;
  #first: Timer | undefined;
  #idle: Timer | undefined;
  #total: Timer | undefined;
  #firstTokenAt: number | undefined;
  #lastActivityAt = 0;
  /** Set while the run waits for room in its sink: the idle limit does not run out then. */
  #waitingForRoom = false;
  #disposed = false;
  /**
   * W3C trace headers (`traceparent`, `tracestate`) {@linkcode postJson} sends with the request,
   * so the backend's spans join the run's trace; empty = none.
   */
  traceHeaders: Record<string, string> = {};

  constructor(outer: AbortSignal, limits: StreamLimits) {
    this.#outer = outer;
    this.#limits = limits;
    if (outer.aborted) this.#controller.abort(outer.reason);
    else outer.addEventListener("abort", this.#onOuterAbort, { once: true });
    this.#connect = this.#arm("connectTimeoutMs", "send response headers");
    this.#first = this.#arm("firstTokenTimeoutMs", "send the first token");
    this.#total = this.#arm("totalTimeoutMs", "finish the run");
  }

  /** Aborted when the run is cancelled or a limit passes; give it to fetch. */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** Seconds from the request to the first token, once there was one. */
  get timeToFirstTokenSeconds(): number | undefined {
    return this.#firstTokenAt === undefined
      ? undefined
      : (this.#firstTokenAt - this.#startedAt) / 1000;
  }

  /** Marks the response headers as received. */
  headersReceived(): void {
    clearTimeout(this.#connect);
  }

  /** Marks a content delta; the first one stops the first-token limit. */
  token(): void {
    if (this.#firstTokenAt !== undefined) return;
    this.#firstTokenAt = performance.now();
    clearTimeout(this.#first);
  }

  /**
   * Marks a body chunk as received, restarting the idle limit. Called per chunk, so it only
   * notes the time; the one idle timer re-arms itself for the rest of the limit when it fires
   * early (instead of a clearTimeout and setTimeout per chunk).
   */
  activity(): void {
    const ms = this.#limits.idleTimeoutMs;
    if (ms <= 0) return;
    this.#lastActivityAt = performance.now();
    this.#idle ??= this.#armIdle(ms);
  }

  /**
   * Waits for `wait` (from `EventSink.ready()`) unless the request is aborted first (then
   * rejects with the abort's reason); the idle limit stands still meanwhile and starts over after.
   */
  async roomFrom(wait: Promise<void>): Promise<void> {
    this.#waitingForRoom = true;
    try {
      await untilRoom(wait, this.#controller.signal);
    } finally {
      this.#waitingForRoom = false;
      if (this.#lastActivityAt !== 0) this.#lastActivityAt = performance.now();
    }
  }

  /** Stops the timers and unlinks the caller's signal; call when the request is over. */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    clearTimeout(this.#connect);
    clearTimeout(this.#first);
    clearTimeout(this.#idle);
    clearTimeout(this.#total);
    this.#outer.removeEventListener("abort", this.#onOuterAbort);
  }

  /** True once {@linkcode RequestGuard.dispose} ran. */
  get disposed(): boolean {
    return this.#disposed;
  }

  /** Aborts the request (closing its connection) without a cancel or timeout cause. */
  abandon(): void {
    if (!this.#controller.signal.aborted) {
      this.#controller.abort(new DOMException("model request abandoned", "AbortError"));
    }
  }

  /**
   * What the run rejects with after `err` was thrown: the caller's abort reason when cancelled,
   * the TIMEOUT error when a limit passed, IopErrors as they are, and network failures as
   * UNAVAILABLE before the headers (`phase` "connect") or BACKEND_ERROR while streaming.
   */
  failure(err: unknown, phase: "connect" | "stream", target: string): unknown {
    if (this.#outer.aborted) return this.#outer.reason;
    if (this.#timeout) return this.#timeout;
    if (err instanceof IopError) return err;
    const detail = err instanceof Error ? err.message : String(err);
    if (phase === "connect") {
      return new IopError("UNAVAILABLE", `Cannot reach the model server at ${target}: ${detail}`, {
        cause: err,
      });
    }
    return new IopError("BACKEND_ERROR", `Model server connection broke mid-stream: ${detail}`, {
      cause: err,
    });
  }

  #arm(limit: keyof StreamLimits, what: string): Timer | undefined {
    const ms = this.#limits[limit];
    if (ms <= 0) return undefined;
    return setTimeout(() => this.#expire(limit, what), ms);
  }

  #armIdle(delayMs: number): Timer {
    return setTimeout(() => {
      const left = this.#waitingForRoom
        ? this.#limits.idleTimeoutMs
        : this.#limits.idleTimeoutMs - (performance.now() - this.#lastActivityAt);
      if (left > 0) this.#idle = this.#armIdle(left);
      else this.#expire("idleTimeoutMs", "send more output");
    }, delayMs);
  }

  #expire(limit: keyof StreamLimits, what: string): void {
    this.#timeout = new IopError(
      "TIMEOUT",
      `Model server did not ${what} within ${limit}=${this.#limits[limit]}`,
    );
    this.#controller.abort(this.#timeout);
  }
}

/** Removes every occurrence of `secret` from `text`, so that no key reaches a log or error. */
export function redact(text: string, secret: string): string {
  return secret === "" ? text : text.replaceAll(secret, "[redacted]");
}

/** Reads a backend's error body: `{"error":"…"}`, `{"error":{"message":…}}` or plain text. */
export async function backendMessage(
  res: { status: number; statusText: string; text(): Promise<string> },
): Promise<string> {
  const text = (await res.text().catch(() => "")).slice(0, 2000).trim();
  try {
    const body = JSON.parse(text) as { error?: unknown; message?: unknown };
    if (typeof body.error === "string") return body.error;
    const nested = body.error as { message?: unknown } | undefined;
    if (nested && typeof nested.message === "string") return nested.message;
    if (typeof body.message === "string") return body.message;
  } catch {
    // Not JSON: the text itself is the message.
  }
  return text || `${res.status} ${res.statusText}`.trim();
}

/**
 * Maps an HTTP error status to an IopError: 404 NOT_FOUND, 401 UNAUTHENTICATED, 429/503
 * OVERLOADED (retryable), other 4xx INVALID_ARGUMENT, other 5xx BACKEND_ERROR (retryable).
 */
export function statusError(status: number, message: string): IopError {
  if (status === 404) return new IopError("NOT_FOUND", message);
  if (status === 401) return new IopError("UNAUTHENTICATED", message);
  if (status === 429 || status === 503) return new IopError("OVERLOADED", message);
  if (status >= 400 && status < 500) return new IopError("INVALID_ARGUMENT", message);
  return new IopError("BACKEND_ERROR", message, { retryable: true });
}

/** Options of {@linkcode postJson}. */
export interface PostOptions {
  /** The adapter's connection pool. */
  client: Http1Client;
  headers?: Record<string, string>;
  /** Removed from backend messages before they become errors. */
  secret?: string;
}

/**
 * POSTs `body` as JSON under `guard`, and resolves with the response once its headers are in;
 * a non-2xx answer rejects with {@linkcode statusError} carrying the backend's message.
 */
export async function postJson(
  url: string,
  body: unknown,
  guard: RequestGuard,
  options: PostOptions,
): Promise<Http1Response> {
  let res: Http1Response;
  try {
    res = await options.client.post(url, {
      headers: { "content-type": "application/json", ...guard.traceHeaders, ...options.headers },
      body: JSON.stringify(body),
      signal: guard.signal,
    });
  } catch (err) {
    throw guard.failure(err, "connect", new URL(url).origin);
  }
  guard.headersReceived();
  if (!res.ok) {
    const message = await backendMessage(res).catch(() => res.statusText);
    throw guard.failure(
      statusError(res.status, redact(message, options.secret ?? "")),
      "connect",
      url,
    );
  }
  return res;
}

/** How long a body may take to end after its end marker before its connection is dropped. */
const END_GRACE_MS = 1_000;

/**
 * Reads a streamed body, handing each piece to `onChunk` (a view valid only during the call, so
 * `onChunk` must copy what it keeps) and telling `guard` of each read. `onChunk` returns true at
 * the body's end marker (`[DONE]`, Ollama's `done`): the rest of the body is then read for a
 * short grace, so that the connection goes back to the pool, and dropped after it. A body
 * given up early is cancelled, which closes its connection. Before each read it waits while
 * `sink` has no room (`EventSink.ready`), so a stalled consumer leaves the body unread and the
 * backend's writes stop on a full socket.
 */
export async function readBody(
  res: Http1Response,
  guard: RequestGuard,
  onChunk: (bytes: Uint8Array) => boolean,
  sink?: EventSink,
): Promise<void> {
  let marked = false;
  const take = (bytes: Uint8Array) => {
    if (!marked) marked = onChunk(bytes);
  };
  let finished = false;
  try {
    while (!marked) {
      const wait = sink?.ready();
      if (wait) await guard.roomFrom(wait);
      if (!(await res.read(take))) {
        finished = true;
        return;
      }
      guard.activity();
    }
    finished = await drained(res);
  } finally {
    if (!finished) {
      guard.abandon();
      res.cancel();
    }
  }
}

/** Reads what follows an end marker; true when the body ended within the grace period. */
async function drained(res: Http1Response): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<"late">((
    resolve,
  ) => (timer = setTimeout(resolve, END_GRACE_MS, "late")));
  try {
    while (true) {
      const more = await Promise.race([res.read(() => {}).catch(() => false), late]);
      if (more === "late") return false;
      if (!more) return true;
    }
  } finally {
    clearTimeout(timer);
  }
}

/** Splits NDJSON bytes into non-empty lines, however they were split. */
export class LineDecoder {
  readonly #decoder = new TextDecoder();
  readonly #onLine: (line: string) => void;
  #buffer = "";

  constructor(onLine: (line: string) => void) {
    this.#onLine = onLine;
  }

  /** Takes the next bytes; calls `onLine` for each line they complete. */
  feed(bytes: Uint8Array): void {
    this.#buffer += this.#decoder.decode(bytes, { stream: true });
    let newline = this.#buffer.indexOf("\n");
    if (newline < 0) return;
    let start = 0;
    while (newline >= 0) {
      const line = this.#buffer.slice(start, newline).trim();
      start = newline + 1;
      if (line !== "") this.#onLine(line);
      newline = this.#buffer.indexOf("\n", start);
    }
    this.#buffer = this.#buffer.slice(start);
  }

  /** Ends the input; a last line without a newline is still a line. */
  end(): void {
    const rest = (this.#buffer + this.#decoder.decode()).trim();
    this.#buffer = "";
    if (rest !== "") this.#onLine(rest);
  }
}

/** Splits SSE bytes into events, however they were split. */
export class SseDecoder {
  readonly #decoder = new TextDecoder();
  readonly #parser: ReturnType<typeof createParser>;

  constructor(onEvent: (event: EventSourceMessage) => void) {
    this.#parser = createParser({ onEvent });
  }

  /** Takes the next bytes; calls `onEvent` for each event they complete. */
  feed(bytes: Uint8Array): void {
    this.#parser.feed(this.#decoder.decode(bytes, { stream: true }));
  }

  /** Ends the input; a last event without its blank line is still an event. */
  end(): void {
    this.#parser.feed(this.#decoder.decode() + "\n\n");
  }
}

/** Options of {@linkcode readJson}. */
export interface ReadJsonOptions {
  /** The most bytes of body read; a longer body fails the run (absent = no limit). */
  maxBytes?: number;
  /** What the body is, for that failure ("the embeddings answer"). */
  what?: string;
}

/**
 * Reads the whole JSON body under `guard`, mapping read failures like a broken stream; a body
 * over `maxBytes` is dropped (closing its connection) as soon as it passes the limit.
 */
export async function readJson(
  res: Http1Response,
  guard: RequestGuard,
  url: string,
  options: ReadJsonOptions = {},
): Promise<unknown> {
  try {
    const text = options.maxBytes === undefined
      ? await res.text()
      : await cappedText(res, options.maxBytes, options.what ?? "the answer");
    return JSON.parse(text);
  } catch (err) {
    if (err instanceof SyntaxError && !guard.signal.aborted) {
      throw new IopError("BACKEND_ERROR", `Model server sent invalid JSON: ${err.message}`);
    }
    throw guard.failure(err, "stream", url);
  }
}

/** The body as text, failing once it passes `maxBytes` (a throw in `read` closes the body). */
async function cappedText(res: Http1Response, maxBytes: number, what: string): Promise<string> {
  const parts: string[] = [];
  const decoder = new TextDecoder();
  let bytes = 0;
  const take = (chunk: Uint8Array) => {
    bytes += chunk.byteLength;
    if (bytes > maxBytes) {
      throw new IopError("BACKEND_ERROR", `Cannot read ${what} as it exceeds ${maxBytes} bytes`);
    }
    parts.push(decoder.decode(chunk, { stream: true }));
  };
  while (await res.read(take)) {
    // Reading on.
  }
  parts.push(decoder.decode());
  return parts.join("");
}
