/**
 * A fake OpenAI-compatible server (OpenAI itself or vLLM, by `flavor`) speaking the wire format
 * of PROTOCOLS.md: `GET /v1/models`, `POST /v1/chat/completions` as SSE (first delta role + "",
 * same id/created on every chunk, a closing `delta:{}` with `finish_reason`, the usage chunk with
 * `choices:[]` when asked, then `data: [DONE]`) or as one JSON object, plus vLLM's `GET /health`
 * and `/version`. Faults are set per model or per request through {@linkcode BEHAVIOR_HEADER}.
 *
 * Embeddings: `POST /v1/embeddings` `{model, input: string | string[] | tokens, dimensions?,
 * encoding_format?: "float" | "base64"}` → `{object:"list", data:[{object:"embedding", index,
 * embedding}], model, usage:{prompt_tokens, total_tokens}}`; base64 is the vector's
 * little-endian float32 bytes, as OpenAI sends them (and its SDK asks for by default). Every
 * model embeds; each vector is {@linkcode fakeEmbedding} of its input, `embeddingDimensions`
 * long (behaviour, per model; default 8), shortened to `dimensions` when smaller (larger is a
 * 400). An input over the model's `contextTokens` (words) is refused with 400, except that
 * vLLM cuts it to its last `truncate_prompt_tokens` words (-1: the context). OpenAI refuses
 * request fields it does not know (`truncate_prompt_tokens` included); vLLM takes them. The
 * behaviour knobs `ignoreDimensions`, `shuffleEmbeddings`, `embeddingIndexes` and `forceBase64`
 * make it answer as a looser server might.
 *
 * Chat content may be OpenAI's part array (`text`, `image_url` ...): parts are checked for
 * shape, recorded as received, and only text parts count as prompt words.
 * @module
 */
import {
  BEHAVIOR_HEADER,
  countWords,
  DEFAULT_EMBEDDING_DIMENSIONS,
  type Exchange,
  type FakeBehavior,
  fakeEmbedding,
  type FakeServer,
  float32Base64,
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

/** Options of {@linkcode startFakeOpenAI}. */
export interface FakeOpenAIOptions {
  /** "vllm" changes model cards, error bodies and enables `/health` and `/version`. */
  flavor?: "openai" | "vllm";
  /** Served models (default `["test-model"]`). */
  models?: string[];
  /** When set, `/v1/*` requires `Authorization: Bearer <apiKey>`. */
  apiKey?: string;
  defaults?: FakeBehavior;
  perModel?: Record<string, FakeBehavior>;
  /** vLLM only: `/health` answers 503 as when the engine died. */
  engineDead?: boolean;
}

/** A running fake OpenAI-compatible server. */
export interface FakeOpenAI extends FakeServer {
  setBehavior(model: string, behavior: FakeBehavior): void;
  /** vLLM: makes `/health` answer 503 (true) or 200 (false). */
  setEngineDead(dead: boolean): void;
}

type Flavor = "openai" | "vllm";

/** An error body in the flavor's shape: OpenAI's string codes, vLLM's numeric ones. */
function errorBody(flavor: Flavor, status: number, message: string, param: string | null = null) {
  if (flavor === "vllm") {
    const type = status === 404
      ? "NotFoundError"
      : status >= 500
      ? "InternalServerError"
      : status === 429
      ? "TooManyRequestsError"
      : "BadRequestError";
    return { error: { message, type, param, code: status } };
  }
  const type = status >= 500
    ? "server_error"
    : status === 429
    ? "requests"
    : "invalid_request_error";
  const code = status === 404 ? "model_not_found" : status === 429 ? "rate_limit_exceeded" : null;
  return { error: { message, type, param, code } };
}

/** The prompt's text: string contents, and the text parts of part arrays. */
function promptText(body: Record<string, unknown>): string {
  const messages = Array.isArray(body.messages) ? body.messages : [];
  return messages.map((m) => {
    const content = (m as { content?: unknown }).content;
    if (!Array.isArray(content)) return String(content ?? "");
    return content.map((p) => p?.type === "text" ? String(p.text ?? "") : "").join(" ");
  }).join(" ");
}

/** The `param` of the first content part that is not in OpenAI's shape, if any. */
function badContentPart(messages: unknown[]): string | undefined {
  for (const [i, m] of messages.entries()) {
    const content = (m as { content?: unknown } | null)?.content;
    if (!Array.isArray(content)) continue;
    for (const [j, part] of content.entries()) {
      const p = part as { type?: unknown; text?: unknown; image_url?: { url?: unknown } } | null;
      const ok = p?.type === "text"
        ? typeof p.text === "string"
        : p?.type === "image_url"
        ? typeof p.image_url?.url === "string" && /^(https?:|data:)/.test(p.image_url.url)
        : p?.type === "input_audio" || p?.type === "file" || p?.type === "refusal";
      if (!ok) return `messages[${i}].content[${j}]`;
    }
  }
  return undefined;
}

/** The fields OpenAI's embeddings endpoint takes; it refuses any other. */
const OPENAI_EMBED_FIELDS = new Set(["model", "input", "encoding_format", "dimensions", "user"]);

/** Embedding inputs as texts (token arrays as their numbers), or undefined when malformed. */
function embedTexts(input: unknown): string[] | undefined {
  const isTokens = (v: unknown) =>
    Array.isArray(v) && v.length > 0 && v.every((t) => Number.isInteger(t));
  if (typeof input === "string") return [input];
  if (isTokens(input)) return [(input as number[]).join(" ")];
  if (!Array.isArray(input) || input.length === 0) return undefined;
  if (input.every((i) => typeof i === "string")) return input;
  if (input.every(isTokens)) return input.map((t) => (t as number[]).join(" "));
  return undefined;
}

/** Starts a fake OpenAI-compatible server on 127.0.0.1 with a free port. */
export function startFakeOpenAI(options: FakeOpenAIOptions = {}): FakeOpenAI {
  const flavor: Flavor = options.flavor ?? "openai";
  const models = options.models ?? ["test-model"];
  const perModel = new Map(Object.entries(options.perModel ?? {}));
  let engineDead = options.engineDead ?? false;
  const log = new RequestLog();
  const created = Math.floor(Date.now() / 1000);

  const card = (id: string) =>
    flavor === "vllm"
      ? {
        id,
        object: "model",
        created,
        owned_by: "vllm",
        root: id,
        parent: null,
        max_model_len: 4096,
        permission: [],
      }
      : { id, object: "model", created, owned_by: "system" };

  const unauthorized = (req: Request): Response | undefined => {
    if (options.apiKey === undefined) return undefined;
    if (req.headers.get("authorization") === `Bearer ${options.apiKey}`) return undefined;
    if (flavor === "vllm") return json({ error: "Unauthorized" }, 401);
    return json(
      {
        error: {
          message:
            "Incorrect API key provided. You can find your API key in your account settings.",
          type: "invalid_request_error",
          param: null,
          code: "invalid_api_key",
        },
      },
      401,
    );
  };

  const complete = async (ex: Exchange, req: Request): Promise<Response> => {
    const body = (ex.entry.body ?? {}) as Record<string, unknown>;
    if (ex.entry.body === undefined) {
      return json(errorBody(flavor, 400, "We could not parse the JSON body of your request."), 400);
    }
    const model = body.model;
    if (typeof model !== "string" || !Array.isArray(body.messages)) {
      return json(errorBody(flavor, 400, "'model' and 'messages' are required", "model"), 400);
    }
    const badPart = badContentPart(body.messages);
    if (badPart) {
      return json(errorBody(flavor, 400, `Invalid content part at '${badPart}'.`, badPart), 400);
    }
    if (!models.includes(model)) {
      const message = flavor === "vllm"
        ? `The model \`${model}\` does not exist.`
        : `The model \`${model}\` does not exist or you do not have access to it.`;
      return json(errorBody(flavor, 404, message, "model"), 404);
    }
    const b = resolveBehavior(
      [options.defaults, perModel.get(model)],
      req.headers.get(BEHAVIOR_HEADER),
    );
    if (b.overloaded) {
      return json(errorBody(flavor, 503, "The server is overloaded or not ready yet."), 503);
    }
    if (b.errorStatus) {
      return json(errorBody(flavor, b.errorStatus, b.errorMessage ?? "error"), b.errorStatus);
    }
    if (!(await sleepUnlessAborted(b.headersDelayMs ?? 0, ex.signal))) return json({}, 499);

    let pieces = replyPieces(b);
    let finish: string = b.finishReason ?? "stop";
    const limit = body.max_completion_tokens ?? body.max_tokens;
    if (typeof limit === "number" && limit >= 0 && limit < pieces.length) {
      pieces = pieces.slice(0, limit);
      finish = "length";
    }
    const offeredTools = Array.isArray(body.tools) && body.tools.length > 0;
    const calls = offeredTools
      ? (b.toolCalls ?? []).map((c, index) => ({
        index,
        id: `call_${crypto.randomUUID().replaceAll("-", "").slice(0, 24)}`,
        name: c.name,
        arguments: JSON.stringify(c.arguments),
      }))
      : [];
    if (calls.length) finish = "tool_calls";
    const usage = {
      prompt_tokens: countWords(promptText(body)),
      completion_tokens: pieces.length + calls.length,
      total_tokens: countWords(promptText(body)) + pieces.length + calls.length,
    };
    const id = `chatcmpl-${crypto.randomUUID().replaceAll("-", "")}`;
    const now = Math.floor(Date.now() / 1000);

    if (body.stream !== true) {
      const wait = (b.firstTokenDelayMs ?? 0) + (b.chunkDelayMs ?? 0) * pieces.length;
      if (!(await sleepUnlessAborted(wait, ex.signal))) return json({}, 499);
      const message: Record<string, unknown> = {
        role: "assistant",
        content: calls.length && pieces.length === 0 ? null : pieces.join(""),
        refusal: null,
      };
      if (calls.length) {
        message.tool_calls = calls.map((c) => ({
          id: c.id,
          type: "function",
          function: { name: c.name, arguments: c.arguments },
        }));
      }
      ex.finish("completed");
      return json({
        id,
        object: "chat.completion",
        created: now,
        model,
        choices: [{ index: 0, message, logprobs: null, finish_reason: finish }],
        usage,
      });
    }

    const includeUsage = (body.stream_options as { include_usage?: unknown } | undefined)
      ?.include_usage === true;
    const frame = (choices: unknown[], extra: Record<string, unknown> = {}) =>
      `data: ${
        JSON.stringify({
          id,
          object: "chat.completion.chunk",
          created: now,
          model,
          choices,
          ...(includeUsage ? { usage: null } : {}),
          ...extra,
        })
      }\n\n`;
    const delta = (d: Record<string, unknown>, finishReason: string | null = null) =>
      frame([{ index: 0, delta: d, logprobs: null, finish_reason: finishReason }]);
    const contentFrames = [
      delta({ role: "assistant", content: "" }),
      ...pieces.map((p) => delta({ content: p })),
    ];
    for (const c of calls) {
      contentFrames.push(delta({
        tool_calls: [{
          index: c.index,
          id: c.id,
          type: "function",
          function: { name: c.name, arguments: "" },
        }],
      }));
      // Arguments arrive in pieces, as real servers send them.
      const half = Math.ceil(c.arguments.length / 2);
      for (const part of [c.arguments.slice(0, half), c.arguments.slice(half)]) {
        if (part !== "") {
          contentFrames.push(
            delta({ tool_calls: [{ index: c.index, function: { arguments: part } }] }),
          );
        }
      }
    }
    const stream = pacedBody(ex, {
      behavior: shifted(b),
      contentFrames,
      closingFrames: () => [
        delta({}, finish),
        ...(includeUsage ? [frame([], { usage })] : []),
        "data: [DONE]\n\n",
      ],
      errorFrame: `data: ${
        JSON.stringify(
          errorBody(
            flavor,
            500,
            b.failMessage ?? "The server had an error while processing your request.",
          ),
        )
      }\n\n`,
    });
    return new Response(stream, {
      headers: { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" },
    });
  };

  const embed = async (ex: Exchange, req: Request): Promise<Response> => {
    const body = (ex.entry.body ?? {}) as Record<string, unknown>;
    const invalid = (message: string, param: string | null) =>
      json(errorBody(flavor, 400, message, param), 400);
    if (ex.entry.body === undefined) {
      return invalid("We could not parse the JSON body of your request.", null);
    }
    const model = body.model;
    if (typeof model !== "string" || model === "") {
      return invalid("you must provide a model parameter", "model");
    }
    if (!models.includes(model)) {
      const message = flavor === "vllm"
        ? `The model \`${model}\` does not exist.`
        : `The model \`${model}\` does not exist or you do not have access to it.`;
      return json(errorBody(flavor, 404, message, "model"), 404);
    }
    if (flavor === "openai") {
      const unknown = Object.keys(body).find((k) => !OPENAI_EMBED_FIELDS.has(k));
      if (unknown) return invalid(`Unrecognized request argument supplied: ${unknown}`, null);
    }
    const texts = embedTexts(body.input);
    if (!texts || (flavor === "openai" && texts.some((t) => t === ""))) {
      return invalid(
        "'$.input' is invalid. Please check the API reference: " +
          "https://platform.openai.com/docs/api-reference.",
        "input",
      );
    }
    const format = body.encoding_format ?? "float";
    if (format !== "float" && format !== "base64") {
      return invalid(
        `Invalid value for 'encoding_format': '${String(format)}'.`,
        "encoding_format",
      );
    }
    const b = resolveBehavior(
      [options.defaults, perModel.get(model)],
      req.headers.get(BEHAVIOR_HEADER),
    );
    const size = b.embeddingDimensions ?? DEFAULT_EMBEDDING_DIMENSIONS;
    const dims = b.ignoreDimensions ? undefined : body.dimensions;
    if (
      dims !== undefined && dims !== null &&
      (!Number.isInteger(dims) || (dims as number) < 1 || (dims as number) > size)
    ) {
      return invalid(
        `Invalid value for 'dimensions' = ${String(dims)}. Must be between 1 and ${size}.`,
        "dimensions",
      );
    }
    const cut = flavor === "vllm" ? body.truncate_prompt_tokens : undefined;
    if (cut !== undefined && cut !== null && (!Number.isInteger(cut) || (cut as number) < -1)) {
      return invalid("truncate_prompt_tokens must be -1 or a positive integer", null);
    }
    if (b.overloaded) {
      return json(errorBody(flavor, 503, "The server is overloaded or not ready yet."), 503);
    }
    if (b.errorStatus) {
      return json(errorBody(flavor, b.errorStatus, b.errorMessage ?? "error"), b.errorStatus);
    }
    const wait = (b.headersDelayMs ?? 0) + (b.firstTokenDelayMs ?? 0);
    if (!(await sleepUnlessAborted(wait, ex.signal))) return json({}, 499);
    // vLLM keeps the last k tokens (-1: as many as the context holds).
    const keep = cut === -1
      ? b.contextTokens
      : typeof cut === "number" && cut > 0
      ? cut
      : undefined;
    const data = [];
    let tokens = 0;
    for (const [index, input] of texts.entries()) {
      let words = input.split(/\s+/).filter((w) => w !== "");
      let text = input;
      if (keep !== undefined && words.length > keep) {
        words = words.slice(words.length - keep);
        text = words.join(" ");
      }
      if (b.contextTokens !== undefined && words.length > b.contextTokens) {
        const message = flavor === "vllm"
          ? `This model's maximum context length is ${b.contextTokens} tokens. However, you ` +
            `requested ${words.length} tokens in the input for embedding generation. Please ` +
            "reduce the length of the input."
          : `This model's maximum context length is ${b.contextTokens} tokens, however you ` +
            `requested ${words.length} tokens (${words.length} in your prompt; 0 for the ` +
            "completion). Please reduce your prompt; or completion length.";
        return invalid(message, flavor === "vllm" ? null : "input");
      }
      tokens += words.length;
      const full = fakeEmbedding(text, size);
      const vector = typeof dims === "number" && dims < size ? shortenEmbedding(full, dims) : full;
      data.push({
        object: "embedding",
        index: b.embeddingIndexes?.[index] ?? index,
        embedding: format === "base64" || b.forceBase64 ? float32Base64(vector) : vector,
      });
    }
    if (b.shuffleEmbeddings) data.reverse();
    const usage = { prompt_tokens: tokens, total_tokens: tokens };
    return json({
      ...(flavor === "vllm"
        ? {
          id: `embd-${crypto.randomUUID().replaceAll("-", "")}`,
          created: Math.floor(Date.now() / 1000),
        }
        : {}),
      object: "list",
      data,
      model,
      usage: flavor === "vllm"
        ? { ...usage, completion_tokens: 0, prompt_tokens_details: null }
        : usage,
    });
  };

  const handler = async (req: Request): Promise<Response> => {
    const ex = await log.record(req);
    const path = ex.entry.path;
    const done = (r: Response) => {
      if (r.headers.get("content-type")?.startsWith("text/event-stream")) return r;
      ex.finish(ex.signal.aborted ? "client_closed" : "completed");
      return r;
    };
    if (flavor === "vllm" && req.method === "GET" && path === "/health") {
      return done(new Response(null, { status: engineDead ? 503 : 200 }));
    }
    if (flavor === "vllm" && req.method === "GET" && path === "/version") {
      return done(json({ version: "0.11.0" }));
    }
    if (path.startsWith("/v1/")) {
      const denied = unauthorized(req);
      if (denied) return done(denied);
    }
    if (req.method === "GET" && path === "/v1/models") {
      return done(json({ object: "list", data: models.map(card) }));
    }
    if (req.method === "POST" && path === "/v1/chat/completions") {
      return done(await complete(ex, req));
    }
    if (req.method === "POST" && path === "/v1/embeddings") {
      return done(await embed(ex, req));
    }
    return done(json(errorBody(flavor, 404, `Invalid URL (${req.method} ${path})`), 404));
  };

  const server = serveFake(log, handler);
  return {
    ...server,
    setBehavior: (model, behavior) => void perModel.set(model, behavior),
    setEngineDead: (dead) => void (engineDead = dead),
  };
}

/** Counts fault positions after the opening role delta, which carries no model token. */
function shifted(b: FakeBehavior): FakeBehavior {
  const out = { ...b };
  if (b.failAfterChunks !== undefined) out.failAfterChunks = b.failAfterChunks + 1;
  if (b.disconnectAfterChunks !== undefined) {
    out.disconnectAfterChunks = b.disconnectAfterChunks + 1;
  }
  return out;
}
