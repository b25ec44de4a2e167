/**
 * A fake OpenAI-compatible server (OpenAI itself or vLLM, by `flavor`) speaking the wire format
 * of PROTOCOLS.md: `GET /v1/models`, `POST /v1/chat/completions` as SSE (first delta role + "",
 * same id/created on every chunk, a closing `delta:{}` with `finish_reason`, the usage chunk with
 * `choices:[]` when asked, then `data: [DONE]`) or as one JSON object, plus vLLM's `GET /health`
 * and `/version`. Faults are set per model or per request through {@linkcode BEHAVIOR_HEADER}.
 * @module
 */
import {
  BEHAVIOR_HEADER,
  countWords,
  type Exchange,
  type FakeBehavior,
  type FakeServer,
  json,
  pacedBody,
  replyPieces,
  RequestLog,
  resolveBehavior,
  serveFake,
  sleepUnlessAborted,
} from "./fake_model_server.ts";

export { BEHAVIOR_HEADER, type FakeBehavior, type RecordedRequest } from "./fake_model_server.ts";

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

function promptText(body: Record<string, unknown>): string {
  const messages = Array.isArray(body.messages) ? body.messages : [];
  return messages.map((m) => String((m as { content?: unknown }).content ?? "")).join(" ");
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
