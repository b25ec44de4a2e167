/**
 * A fake Ollama server speaking the native API byte for byte as PROTOCOLS.md describes it:
 * `GET /`, `/api/tags`, `/api/version`, `/api/ps`, and `POST /api/chat` / `/api/generate`
 * streaming NDJSON by default. Faults (slow first token, mid-stream error line, dropped
 * connection, 503 busy) are set per model or per request through {@linkcode BEHAVIOR_HEADER}.
 *
 * Embeddings: `POST /api/embed` `{model, input: string | string[], truncate?, dimensions?}` →
 * `{model, embeddings, total_duration, load_duration, prompt_eval_count}` and the older
 * `POST /api/embeddings` `{model, prompt}` → `{embedding}`. Every model embeds; each vector is
 * {@linkcode fakeEmbedding} of its input, `embeddingDimensions` long (behaviour, per model;
 * default 8) and shortened to `dimensions` when that is smaller, as Ollama does (not under the
 * `ignoreDimensions` knob, as a model that cannot shorten). Inputs over a
 * model's `contextTokens` (words) are cut at the end, or refused with 400 under `truncate:
 * false`. `prompt_eval_count` is the inputs' word count.
 *
 * Images: a message's `images` (and generate's) must be base64 strings, as Ollama decodes them;
 * anything else (a `data:` URL, a link) is refused with 400 `illegal base64 data at input byte
 * N`. The request log keeps them as received.
 * @module
 */
import {
  BEHAVIOR_HEADER,
  countWords,
  DEFAULT_EMBEDDING_DIMENSIONS,
  type Exchange,
  type FakeBehavior,
  fakeEmbedding,
  type FakeListen,
  type FakeServer,
  json,
  pacedBody,
  replyPieces,
  RequestLog,
  resolveBehavior,
  serveFake,
  shortenEmbedding,
  sleepUnlessAborted,
} from "./fake_model_server.ts";

export {
  BEHAVIOR_HEADER,
  type FakeBehavior,
  fakeEmbedding,
  type RecordedRequest,
  shortenEmbedding,
} from "./fake_model_server.ts";

/** Options of {@linkcode startFakeOllama}. */
export interface FakeOllamaOptions {
  /** Installed models (default `["llama3.2:latest"]`); a name without a tag means `:latest`. */
  models?: string[];
  /** Behaviour of every model. */
  defaults?: FakeBehavior;
  /** Behaviour per model name, over `defaults`. */
  perModel?: Record<string, FakeBehavior>;
  /** Reported by `/api/version` (default "0.12.6"). */
  version?: string;
  /** Listening address (default 127.0.0.1 and a free port); containers use 0.0.0.0:11434. */
  listen?: FakeListen;
}

/** A running fake Ollama. */
export interface FakeOllama extends FakeServer {
  /** Replaces the behaviour of one model for the requests that follow. */
  setBehavior(model: string, behavior: FakeBehavior): void;
}

/** Ollama's answer when its pending-request queue is full. */
export const OLLAMA_BUSY = "server busy, please try again.  maximum pending requests exceeded";

function withTag(name: string): string {
  return name.includes(":") ? name : `${name}:latest`;
}

function modelEntry(name: string) {
  return {
    name,
    model: name,
    modified_at: "2025-01-01T00:00:00.000000000Z",
    size: 2019393189,
    digest: "a80c4f17acd55265feec403c7aef86be0c25983ab279d83f3bcd3abbcb5b8b72",
    details: {
      parent_model: "",
      format: "gguf",
      family: "llama",
      families: ["llama"],
      parameter_size: "3.2B",
      quantization_level: "Q4_K_M",
    },
  };
}

function promptText(body: Record<string, unknown>): string {
  const messages = Array.isArray(body.messages) ? body.messages : [];
  const parts = messages.map((m) => String((m as { content?: unknown }).content ?? ""));
  return [String(body.prompt ?? ""), String(body.system ?? ""), ...parts].join(" ");
}

/** Ollama's answer when `truncate: false` and an input is longer than the model's context. */
export const OLLAMA_CONTEXT_EXCEEDED = "input length exceeds maximum context length";

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/** Go's error for text that is not standard base64, as Ollama answers an undecodable image. */
function base64Error(text: string): string | undefined {
  const clean = text.replace(/[\r\n]/g, "");
  if (BASE64.test(clean) && clean.length % 4 === 0) return undefined;
  const bad = [...clean].findIndex((c, i) =>
    !/[A-Za-z0-9+/]/.test(c) && !(c === "=" && i >= clean.length - 2)
  );
  const at = bad >= 0 ? bad : clean.length - (clean.length % 4);
  return `illegal base64 data at input byte ${at}`;
}

/** The first image of a chat or generate body Ollama could not decode, as its error. */
function imageError(body: Record<string, unknown>): string | undefined {
  const lists = [
    body.images,
    ...(Array.isArray(body.messages) ? body.messages : []).map((m) =>
      (m as { images?: unknown }).images
    ),
  ];
  for (const images of lists) {
    if (images === undefined || images === null) continue;
    if (!Array.isArray(images)) return "json: cannot unmarshal images into []api.ImageData";
    for (const image of images) {
      if (typeof image !== "string") return "json: cannot unmarshal image into api.ImageData";
      const err = base64Error(image);
      if (err) return err;
    }
  }
  return undefined;
}

/** The inputs of an `/api/embed` body, or the error Ollama answers for them. */
function embedInputs(input: unknown): string[] | { error: string } {
  if (input === undefined || input === null) return [];
  if (typeof input === "string") return input === "" ? [] : [input];
  if (Array.isArray(input) && input.every((i) => typeof i === "string")) return input;
  return { error: "invalid input type" };
}

/** Starts a fake Ollama on 127.0.0.1 with a free port. */
export function startFakeOllama(options: FakeOllamaOptions = {}): FakeOllama {
  const models = (options.models ?? ["llama3.2:latest"]).map(withTag);
  const perModel = new Map(Object.entries(options.perModel ?? {}).map(([k, v]) => [withTag(k), v]));
  const loaded = new Set<string>();
  const log = new RequestLog();

  const generate = async (ex: Exchange, req: Request, kind: "chat" | "generate") => {
    const body = (ex.entry.body ?? {}) as Record<string, unknown>;
    if (ex.entry.body === undefined) return json({ error: "invalid request body" }, 400);
    if (typeof body.model !== "string" || body.model === "") {
      return json({ error: "model is required" }, 400);
    }
    const model = withTag(body.model);
    if (!models.includes(model)) return json({ error: `model '${body.model}' not found` }, 404);
    const b = resolveBehavior(
      [options.defaults, perModel.get(model)],
      req.headers.get(BEHAVIOR_HEADER),
    );
    if (b.overloaded) return json({ error: OLLAMA_BUSY }, 503);
    if (b.errorStatus) return json({ error: b.errorMessage ?? "error" }, b.errorStatus);
    const badImage = imageError(body);
    if (badImage) return json({ error: badImage }, 400);
    if (!(await sleepUnlessAborted(b.headersDelayMs ?? 0, ex.signal))) return json({}, 499);
    loaded.add(model);

    const started = performance.now();
    const reqOptions = (body.options ?? {}) as Record<string, unknown>;
    let pieces = replyPieces(b);
    let doneReason: string = b.finishReason ?? "stop";
    const limit = reqOptions.num_predict;
    if (typeof limit === "number" && limit >= 0 && limit < pieces.length) {
      pieces = pieces.slice(0, limit);
      doneReason = "length";
    }
    const offeredTools = Array.isArray(body.tools) && body.tools.length > 0;
    const toolCalls = offeredTools && kind === "chat"
      ? (b.toolCalls ?? []).map((c, i) => ({
        id: `call_${crypto.randomUUID().slice(0, 8)}`,
        function: { index: i, name: c.name, arguments: c.arguments },
      }))
      : [];
    const now = () => new Date().toISOString();
    const piece = (content: string, extra: Record<string, unknown> = {}) =>
      kind === "chat"
        ? {
          model: body.model,
          created_at: now(),
          message: { role: "assistant", content, ...extra },
          done: false,
        }
        : { model: body.model, created_at: now(), response: content, done: false };
    const final = () => {
      const ns = Math.round((performance.now() - started) * 1e6);
      return {
        ...piece(""),
        done: true,
        done_reason: doneReason,
        ...(kind === "generate" ? { context: [1, 2, 3] } : {}),
        total_duration: ns + 1000,
        load_duration: 1000,
        prompt_eval_count: countWords(promptText(body)),
        prompt_eval_duration: Math.round(ns / 3),
        eval_count: pieces.length + toolCalls.length,
        eval_duration: ns - Math.round(ns / 3),
      };
    };

    if (body.stream === false) {
      const wait = (b.firstTokenDelayMs ?? 0) + (b.chunkDelayMs ?? 0) * pieces.length;
      if (!(await sleepUnlessAborted(wait, ex.signal))) return json({}, 499);
      const text = pieces.join("");
      const extra = toolCalls.length ? { tool_calls: toolCalls } : {};
      ex.finish("completed");
      return json(
        kind === "chat"
          ? { ...final(), message: { role: "assistant", content: text, ...extra } }
          : { ...final(), response: text },
      );
    }
    const line = (o: unknown) => JSON.stringify(o) + "\n";
    const contentFrames = pieces.map((p) => line(piece(p)));
    if (toolCalls.length) contentFrames.push(line(piece("", { tool_calls: toolCalls })));
    const stream = pacedBody(ex, {
      behavior: b,
      contentFrames,
      closingFrames: () => [line(final())],
      errorFrame: line({
        error: b.failMessage ?? "llama runner process has terminated: exit status 2",
      }),
    });
    return new Response(stream, { headers: { "content-type": "application/x-ndjson" } });
  };

  /** `/api/embed`, or with `legacy` the older `/api/embeddings` (one `prompt`, no options). */
  const embed = async (ex: Exchange, req: Request, legacy: boolean): Promise<Response> => {
    const body = (ex.entry.body ?? {}) as Record<string, unknown>;
    if (ex.entry.body === undefined) return json({ error: "invalid request body" }, 400);
    if (typeof body.model !== "string" || body.model === "") {
      return json({ error: "model is required" }, 400);
    }
    const model = withTag(body.model);
    if (!models.includes(model)) return json({ error: `model '${body.model}' not found` }, 404);
    const b = resolveBehavior(
      [options.defaults, perModel.get(model)],
      req.headers.get(BEHAVIOR_HEADER),
    );
    if (b.overloaded) return json({ error: OLLAMA_BUSY }, 503);
    if (b.errorStatus) return json({ error: b.errorMessage ?? "error" }, b.errorStatus);
    const inputs = legacy
      ? (typeof body.prompt === "string" && body.prompt !== "" ? [body.prompt] : [])
      : embedInputs(body.input);
    if (!Array.isArray(inputs)) return json(inputs, 400);
    const started = performance.now();
    const wait = (b.headersDelayMs ?? 0) + (b.firstTokenDelayMs ?? 0);
    if (!(await sleepUnlessAborted(wait, ex.signal))) return json({}, 499);
    loaded.add(model);
    const size = b.embeddingDimensions ?? DEFAULT_EMBEDDING_DIMENSIONS;
    const asked = typeof body.dimensions === "number" && !b.ignoreDimensions ? body.dimensions : 0;
    const truncate = legacy || body.truncate !== false;
    const embeddings: number[][] = [];
    let tokens = 0;
    for (const input of inputs) {
      let words = input.split(/\s+/).filter((w) => w !== "");
      let text = input;
      if (b.contextTokens !== undefined && words.length > b.contextTokens) {
        if (!truncate) return json({ error: OLLAMA_CONTEXT_EXCEEDED }, 400);
        words = words.slice(0, b.contextTokens);
        text = words.join(" ");
      }
      tokens += words.length;
      const vector = fakeEmbedding(text, size);
      embeddings.push(asked > 0 && asked < size ? shortenEmbedding(vector, asked) : vector);
    }
    if (legacy) return json({ embedding: embeddings[0] ?? [] });
    const ns = Math.round((performance.now() - started) * 1e6);
    return json({
      model: body.model,
      embeddings,
      total_duration: ns + 1000,
      load_duration: 1000,
      prompt_eval_count: tokens,
    });
  };

  const handler = async (req: Request): Promise<Response> => {
    const ex = await log.record(req);
    const path = ex.entry.path;
    const done = (r: Response) => {
      ex.finish("completed");
      return r;
    };
    if (req.method === "GET" && path === "/") {
      return done(
        new Response("Ollama is running", {
          headers: { "content-type": "text/plain; charset=utf-8" },
        }),
      );
    }
    if (req.method === "GET" && path === "/api/version") {
      return done(json({ version: options.version ?? "0.12.6" }));
    }
    if (req.method === "GET" && path === "/api/tags") {
      return done(json({ models: models.map(modelEntry) }));
    }
    if (req.method === "GET" && path === "/api/ps") {
      const running = [...loaded].map((name) => ({
        ...modelEntry(name),
        expires_at: new Date(Date.now() + 300_000).toISOString(),
        size_vram: 2019393189,
      }));
      return done(json({ models: running }));
    }
    if (req.method === "POST" && (path === "/api/chat" || path === "/api/generate")) {
      const res = await generate(ex, req, path === "/api/chat" ? "chat" : "generate");
      // Error answers and client-closed waits end here; streams end when their body does.
      if (res.headers.get("content-type") !== "application/x-ndjson") {
        ex.finish(ex.signal.aborted ? "client_closed" : "completed");
      }
      return res;
    }
    if (req.method === "POST" && (path === "/api/embed" || path === "/api/embeddings")) {
      const res = await embed(ex, req, path === "/api/embeddings");
      ex.finish(ex.signal.aborted ? "client_closed" : "completed");
      return res;
    }
    return done(
      new Response("404 page not found", {
        status: 404,
        headers: { "content-type": "text/plain" },
      }),
    );
  };

  const server = serveFake(log, handler, options.listen);
  return {
    ...server,
    setBehavior: (model, behavior) => void perModel.set(withTag(model), behavior),
  };
}
