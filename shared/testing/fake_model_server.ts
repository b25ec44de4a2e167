/**
 * Plumbing shared by the fake model servers (`fake_ollama.ts`, `fake_openai.ts`): behaviour
 * knobs, a log of received requests that notices when a client goes away, a paced response
 * body that can stall, fail or drop the connection on cue, and the deterministic vectors their
 * embedding endpoints answer ({@linkcode fakeEmbedding}).
 * @module
 */
import { deterministicEmbedding, shortenEmbedding } from "../deterministic_embedding.ts";

/** A fake's behaviour for one model or one request; every field is optional. */
export interface FakeBehavior {
  /** The answer text; split into word pieces ("Hello", " world"). */
  reply?: string;
  /** Without `reply`: answer with this many pieces "tok0 tok1 …" (default 3). */
  tokens?: number;
  /** Wait before sending the response headers (exercises connect timeouts). */
  headersDelayMs?: number;
  /** Wait after the headers before the first piece (the model's prefill time). */
  firstTokenDelayMs?: number;
  /** Wait between pieces. */
  chunkDelayMs?: number;
  /** After this many content pieces, send the backend's in-stream error frame and end. */
  failAfterChunks?: number;
  /** Message of the in-stream error. */
  failMessage?: string;
  /** After this many content pieces, drop the connection without finishing the body. */
  disconnectAfterChunks?: number;
  /** Answer 503 like a saturated server. */
  overloaded?: boolean;
  /** Answer with this HTTP error status and `errorMessage` instead of generating. */
  errorStatus?: number;
  errorMessage?: string;
  /** Tool calls the model makes after its text, when the request offered tools. */
  toolCalls?: { name: string; arguments: Record<string, unknown> }[];
  /** Finish reason when the answer is not cut by a token limit (default "stop"). */
  finishReason?: "stop" | "length";
  /**
   * Length of the model's embedding vectors (default {@linkcode DEFAULT_EMBEDDING_DIMENSIONS});
   * a request's `dimensions` may shorten them, never lengthen them.
   */
  embeddingDimensions?: number;
  /**
   * The model's context for an embedding input, in words (default: unlimited). A longer input
   * is cut when the request asks for truncation (Ollama's default) and refused with 400 when
   * it does not.
   */
  contextTokens?: number;
  /** Answer `embeddingDimensions` values whatever `dimensions` asked (a model that cannot shorten). */
  ignoreDimensions?: boolean;
  /** OpenAI's `data` listed last input first (each item keeps its `index`), as a server may. */
  shuffleEmbeddings?: boolean;
  /** OpenAI's `data[i].index` replaced by these values (missing, repeated or unknown indexes). */
  embeddingIndexes?: number[];
  /** Answer base64 vectors even when `encoding_format` asked for floats. */
  forceBase64?: boolean;
}

/** Vector length of a fake model that sets no `embeddingDimensions`. */
export const DEFAULT_EMBEDDING_DIMENSIONS = 8;

/**
 * The fakes' vector for `text` (the mock adapter's too): see
 * {@linkcode deterministicEmbedding}.
 */
export const fakeEmbedding: (text: string, dimensions: number) => number[] = deterministicEmbedding;

export { shortenEmbedding };

/** `values` as little-endian float32 bytes in base64 (OpenAI's `encoding_format: base64`). */
export function float32Base64(values: number[]): string {
  const bytes = new Uint8Array(values.length * 4);
  const view = new DataView(bytes.buffer);
  values.forEach((v, i) => view.setFloat32(i * 4, v, true));
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary);
}

/** Header through which one request overrides behaviour: a JSON {@linkcode FakeBehavior}. */
export const BEHAVIOR_HEADER = "x-fake-behavior";

/** One request a fake received, with how it ended. */
export interface RecordedRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
  /** Parsed JSON body, or undefined when there was none or it did not parse. */
  body: unknown;
  receivedAt: number;
  /** True once the client closed the connection before the fake finished answering. */
  clientClosed: boolean;
  /** Resolves when the exchange ends: fully answered, dropped by the fake, or closed by the client. */
  ended: Promise<"completed" | "disconnected" | "client_closed">;
}

/** The request log of a fake, with awaitable conditions so tests never sleep. */
export class RequestLog {
  /** Every request in arrival order. */
  readonly requests: RecordedRequest[] = [];
  #waiters: { n: number; resolve: (r: RecordedRequest) => void }[] = [];
  #open = 0;
  #stop = new AbortController();

  /** Aborted when the fake shuts down, so stalled answers end instead of holding it open. */
  get stopSignal(): AbortSignal {
    return this.#stop.signal;
  }

  /** Ends every stalled answer; called by `close()`. */
  stopAll(): void {
    this.#stop.abort();
  }

  /** Requests whose answer is still being produced. */
  get openRequests(): number {
    return this.#open;
  }

  /** Requests the client abandoned before the answer was complete. */
  get closedByClient(): RecordedRequest[] {
    return this.requests.filter((r) => r.clientClosed);
  }

  /** Resolves with the `n`-th request (1-based) once it has arrived. */
  waitForRequest(n = 1): Promise<RecordedRequest> {
    const have = this.requests[n - 1];
    if (have) return Promise.resolve(have);
    return new Promise((resolve) => this.#waiters.push({ n, resolve }));
  }

  /** Records a request and returns the handle the fake uses to report how it ended. */
  async record(req: Request): Promise<Exchange> {
    const text = req.method === "GET" || req.method === "HEAD" ? "" : await req.text();
    let body: unknown = undefined;
    try {
      body = text === "" ? undefined : JSON.parse(text);
    } catch {
      body = undefined;
    }
    const done = Promise.withResolvers<"completed" | "disconnected" | "client_closed">();
    const entry: RecordedRequest = {
      method: req.method,
      path: new URL(req.url).pathname,
      headers: Object.fromEntries(req.headers),
      body,
      receivedAt: performance.now(),
      clientClosed: false,
      ended: done.promise,
    };
    this.requests.push(entry);
    this.#open++;
    let finished = false;
    const finish = (how: "completed" | "disconnected" | "client_closed") => {
      if (finished) return;
      finished = true;
      this.#open--;
      if (how === "client_closed") entry.clientClosed = true;
      done.resolve(how);
    };
    // Deno aborts request.signal when the client goes away, and (legacy behaviour) also after a
    // completed response; `finished` tells the two apart.
    req.signal.addEventListener("abort", () => finish("client_closed"));
    for (const w of this.#waiters.filter((w) => w.n === this.requests.length)) w.resolve(entry);
    this.#waiters = this.#waiters.filter((w) => w.n !== this.requests.length);
    return { entry, finish, signal: AbortSignal.any([req.signal, this.#stop.signal]), text };
  }
}

/** A recorded request plus the means to end it. */
export interface Exchange {
  entry: RecordedRequest;
  finish(how: "completed" | "disconnected" | "client_closed"): void;
  signal: AbortSignal;
  text: string;
}

/** Merges behaviour layers, later ones winning; a malformed header is ignored. */
export function resolveBehavior(
  layers: (FakeBehavior | undefined)[],
  header: string | null,
): FakeBehavior {
  let fromHeader: FakeBehavior = {};
  if (header) {
    try {
      fromHeader = JSON.parse(header) as FakeBehavior;
    } catch {
      fromHeader = {};
    }
  }
  return Object.assign({}, ...layers, fromHeader);
}

/** The answer's pieces as a model would stream them. */
export function replyPieces(b: FakeBehavior): string[] {
  if (b.reply !== undefined) return b.reply.match(/\s*\S+/g) ?? (b.reply === "" ? [] : [b.reply]);
  return Array.from({ length: b.tokens ?? 3 }, (_, i) => (i === 0 ? "" : " ") + `tok${i}`);
}

/** Rough token count of prompt text: its words. */
export function countWords(text: string): number {
  return text.split(/\s+/).filter((w) => w !== "").length;
}

/** Sleeps `ms`, resolving false early if `signal` aborts. */
export function sleepUnlessAborted(ms: number, signal: AbortSignal): Promise<boolean> {
  if (ms <= 0) return Promise.resolve(!signal.aborted);
  if (signal.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const onAbort = () => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve(true);
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

/** What a paced body sends: content frames, then closing frames, or an error frame on cue. */
export interface PacedPlan {
  contentFrames: string[];
  /** Built when the content is out, so that durations and counts in them are real. */
  closingFrames: () => string[];
  errorFrame: string;
  behavior: FakeBehavior;
}

/** Thrown into a response body to make Deno drop the connection mid-body. */
export class SimulatedDisconnect extends Error {
  constructor() {
    super("fake model server dropped the connection on purpose");
    this.name = "SimulatedDisconnect";
  }
}

const encoder = new TextEncoder();

/**
 * A response body that sends `plan`'s frames with the configured delays, one frame per pull so
 * a slow reader applies backpressure, and reports to `exchange` how it ended.
 */
export function pacedBody(exchange: Exchange, plan: PacedPlan): ReadableStream<Uint8Array> {
  const { behavior: b } = plan;
  const frames = [...plan.contentFrames];
  let closingAdded = false;
  let sent = 0;
  let content = 0;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let wake: (() => void) | undefined;
  const next = (c: ReadableStreamDefaultController<Uint8Array>) => {
    if (b.disconnectAfterChunks !== undefined && content >= b.disconnectAfterChunks) {
      exchange.finish("disconnected");
      c.error(new SimulatedDisconnect());
      return;
    }
    if (b.failAfterChunks !== undefined && content >= b.failAfterChunks) {
      c.enqueue(encoder.encode(plan.errorFrame));
      exchange.finish("completed");
      c.close();
      return;
    }
    if (sent === frames.length && !closingAdded) {
      closingAdded = true;
      frames.push(...plan.closingFrames());
    }
    const frame = frames[sent];
    if (frame === undefined) {
      exchange.finish("completed");
      c.close();
      return;
    }
    if (sent < plan.contentFrames.length) content++;
    sent++;
    c.enqueue(encoder.encode(frame));
  };
  return new ReadableStream<Uint8Array>({
    start(c) {
      // On shutdown a stalled body is dropped so that the server can stop at once.
      exchange.signal.addEventListener("abort", () => {
        if (timer === undefined) return;
        clearTimeout(timer);
        timer = undefined;
        exchange.finish("client_closed");
        c.error(new SimulatedDisconnect());
        wake?.();
      }, { once: true });
    },
    pull(c) {
      const delay = sent === 0 ? b.firstTokenDelayMs ?? 0 : b.chunkDelayMs ?? 0;
      if (delay <= 0) return next(c);
      return new Promise<void>((resolve) => {
        wake = resolve;
        timer = setTimeout(() => {
          timer = undefined;
          next(c);
          resolve();
        }, delay);
      });
    },
    cancel() {
      if (timer !== undefined) clearTimeout(timer);
      exchange.finish("client_closed");
    },
  });
}

/** A running fake: its base URL, what it received, and how to stop it. */
export interface FakeServer extends AsyncDisposable {
  /** Base URL without a trailing slash, e.g. `http://127.0.0.1:41234`. */
  url: string;
  log: RequestLog;
  /** Shorthand for `log.requests`. */
  requests: RecordedRequest[];
  close(): Promise<void>;
  /** Lets the process exit while the fake still listens (for benchmarks). */
  unref(): void;
}

/** Where a fake listens; tests keep the default 127.0.0.1 and a free port. */
export interface FakeListen {
  hostname?: string;
  port?: number;
}

/** Serves `handler` (default 127.0.0.1, port 0), quietly absorbing simulated disconnects. */
export function serveFake(
  log: RequestLog,
  handler: (req: Request) => Response | Promise<Response>,
  listen: FakeListen = {},
): FakeServer {
  const hostname = listen.hostname ?? "127.0.0.1";
  const server = Deno.serve({
    hostname,
    port: listen.port ?? 0,
    onListen: () => {},
    onError: (err) => {
      if (!(err instanceof SimulatedDisconnect)) console.error("fake model server error", err);
      return new Response("internal error", { status: 500 });
    },
  }, handler);
  let closed: Promise<void> | undefined;
  const close = () => {
    log.stopAll();
    return closed ??= server.shutdown();
  };
  return {
    url: `http://${hostname}:${server.addr.port}`,
    log,
    requests: log.requests,
    close,
    unref: () => server.unref(),
    [Symbol.asyncDispose]: close,
  };
}

/** A JSON response with the content type the real servers use. */
export function json(body: unknown, status = 200, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { "content-type": "application/json; charset=utf-8", ...headers },
  });
}
