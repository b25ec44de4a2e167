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
 * TIMEOUT.
 * @module
 */
import { createParser, type EventSourceMessage } from "eventsource-parser";
import { IopError } from "../../../shared/errors.ts";

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

  /** Marks a body chunk as received, (re)starting the idle limit. */
  activity(): void {
    if (this.#limits.idleTimeoutMs <= 0) return;
    clearTimeout(this.#idle);
    this.#idle = this.#arm("idleTimeoutMs", "send more output");
  }

  /** Stops the timers and unlinks the caller's signal; call when the request is over. */
  dispose(): void {
    for (const t of [this.#connect, this.#first, this.#idle, this.#total]) clearTimeout(t);
    this.#outer.removeEventListener("abort", this.#onOuterAbort);
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
    return setTimeout(() => {
      this.#timeout = new IopError(
        "TIMEOUT",
        `Model server did not ${what} within ${limit}=${ms}`,
      );
      this.#controller.abort(this.#timeout);
    }, ms);
  }
}

/** Removes every occurrence of `secret` from `text`, so that no key reaches a log or error. */
export function redact(text: string, secret: string): string {
  return secret === "" ? text : text.replaceAll(secret, "[redacted]");
}

/** Reads a backend's error body: `{"error":"…"}`, `{"error":{"message":…}}` or plain text. */
export async function backendMessage(res: Response): Promise<string> {
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
  options: PostOptions = {},
): Promise<Response> {
  let res: Response;
  try {
    res = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json", ...options.headers },
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

/**
 * Yields the body's byte chunks, telling `guard` of each; cancels the body when the consumer
 * stops early so that the connection closes.
 */
export async function* chunks(
  res: Response,
  guard: RequestGuard,
): AsyncGenerator<Uint8Array> {
  if (!res.body) return;
  const reader = res.body.getReader();
  let finished = false;
  try {
    while (true) {
      const { done, value } = await reader.read();
      if (done) {
        finished = true;
        return;
      }
      guard.activity();
      yield value;
    }
  } finally {
    if (!finished) {
      guard.abandon();
      await reader.cancel().catch(() => {});
    }
    reader.releaseLock();
  }
}

/** Yields the non-empty lines of an NDJSON body, however its bytes were split. */
export async function* ndjsonLines(source: AsyncIterable<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let buffer = "";
  for await (const chunk of source) {
    buffer += decoder.decode(chunk, { stream: true });
    let newline = buffer.indexOf("\n");
    while (newline >= 0) {
      const line = buffer.slice(0, newline).trim();
      buffer = buffer.slice(newline + 1);
      if (line !== "") yield line;
      newline = buffer.indexOf("\n");
    }
  }
  const rest = (buffer + decoder.decode()).trim();
  if (rest !== "") yield rest;
}

/** Yields the events of an SSE body, however its bytes were split. */
export async function* sseEvents(
  source: AsyncIterable<Uint8Array>,
): AsyncGenerator<EventSourceMessage> {
  const decoder = new TextDecoder();
  const pending: EventSourceMessage[] = [];
  const parser = createParser({ onEvent: (event) => pending.push(event) });
  for await (const chunk of source) {
    parser.feed(decoder.decode(chunk, { stream: true }));
    while (pending.length > 0) yield pending.shift()!;
  }
  parser.feed(decoder.decode() + "\n\n");
  while (pending.length > 0) yield pending.shift()!;
}

/** Reads the whole JSON body under `guard`, mapping read failures like a broken stream. */
export async function readJson(res: Response, guard: RequestGuard, url: string): Promise<unknown> {
  try {
    return await res.json();
  } catch (err) {
    if (err instanceof SyntaxError && !guard.signal.aborted) {
      throw new IopError("BACKEND_ERROR", `Model server sent invalid JSON: ${err.message}`);
    }
    throw guard.failure(err, "stream", url);
  }
}
