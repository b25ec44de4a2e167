/**
 * The `ollama` adapter: runs models on an Ollama server through its native API — `/api/chat`
 * for conversations, `/api/generate` for prompt-only runs — streaming NDJSON, embeds through
 * `/api/embed`, and reads what is runnable from `/api/tags` and health from `/api/version`.
 * Images travel as Ollama wants them, base64 bytes in a message's `images`: the adapter takes
 * them from `data:` URLs and never fetches a link (such a run is refused).
 * @module
 */
import { IopError } from "../../../shared/errors.ts";
import { backendExtras } from "../../../shared/adapter_kinds/features.ts";
import { httpModelFeatures } from "../../../shared/adapter_kinds/http_model.ts";
import { createLogger, type Logger } from "../../../shared/log.ts";
import type { OutputFormat } from "../../../shared/run.ts";
import { traceIdOf } from "../../../shared/trace_context.ts";
import type {
  Adapter,
  Capabilities,
  ChatMessage,
  EventSink,
  ExecutionResult,
  ExecutionSpec,
  HttpModelSettings,
  ToolCall,
} from "../ports.ts";
import { relayEmbeddings } from "./embedding.ts";
import { probeOllama } from "./health.ts";
import { Http1Client } from "./http1_client.ts";
import { LineDecoder, postJson, readBody, readJson, type RequestGuard } from "./http_stream.ts";
import {
  baseOf,
  guardedRun,
  type ModelAdapterOptions,
  refuseUnhonoured,
  type RunContext,
  unhonouredError,
} from "./model_run.ts";

const FEATURES = httpModelFeatures.ollama;

/** One object of Ollama's chat or generate answer (a stream line or the whole answer). */
interface OllamaChunk {
  error?: string;
  message?: { content?: string; tool_calls?: OllamaToolCall[] };
  response?: string;
  done?: boolean;
  done_reason?: string;
  prompt_eval_count?: number;
  eval_count?: number;
}

interface OllamaToolCall {
  id?: string;
  function?: { index?: number; name?: string; arguments?: unknown };
}

/** Ollama takes tool arguments as an object, IOP carries them as JSON text. */
function parseArguments(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return {};
  }
}

/** Ollama's answer of `/api/embed`. */
interface OllamaEmbedAnswer {
  embeddings?: unknown;
  prompt_eval_count?: number;
}

/** A `data:` URL's base64 payload: `data:<mime>;base64,<payload>`. */
const BASE64_DATA_URL = /^data:[^,;]*(?:;[^,;]*)*;base64,(.*)$/s;

/**
 * The base64 images of message `index` for Ollama's `images`. Links were refused before (the
 * kind takes `data:` URLs only); a `data:` URL that is not base64 is refused here.
 */
function imagesOf(m: ChatMessage, index: number): string[] {
  const images: string[] = [];
  for (const [part, p] of (m.parts ?? []).entries()) {
    if (p.type !== "image") continue;
    const payload = BASE64_DATA_URL.exec(p.url)?.[1];
    if (payload === undefined) {
      throw unhonouredError("ollama", {
        field: "image",
        index,
        part,
        reason: "takes images as base64 data: URLs only",
      });
    }
    images.push(payload);
  }
  return images;
}

/**
 * A chat message in Ollama's shape: `content` is the text (of the text parts, when there are
 * parts) and `images` the base64 of its images. A tool result names its tool (`tool_name`); one
 * that came with only the id of the call it answers (an OpenAI client) takes the name of that
 * call.
 */
function ollamaMessage(
  m: ChatMessage,
  index: number,
  callNames: Map<string, string>,
): Record<string, unknown> {
  const out: Record<string, unknown> = {
    role: m.role === "developer" ? "system" : m.role,
    content: m.content,
  };
  const images = imagesOf(m, index);
  if (images.length > 0) out.images = images;
  if (m.toolCalls?.length) {
    out.tool_calls = m.toolCalls.map((c) => ({
      function: { name: c.name, arguments: parseArguments(c.arguments) },
    }));
  }
  if (m.role === "tool") {
    const name = m.name || (m.toolCallId ? callNames.get(m.toolCallId) : undefined);
    if (name) out.tool_name = name;
  }
  return out;
}

/** The names of the tool calls in `messages`, by call id. */
function toolCallNames(messages: ChatMessage[]): Map<string, string> {
  const names = new Map<string, string>();
  for (const m of messages) for (const c of m.toolCalls ?? []) if (c.id) names.set(c.id, c.name);
  return names;
}

/** Ollama's `format`: "json", or the JSON Schema the answer must match. */
function formatOf(f: OutputFormat): unknown {
  return f.type === "json_schema" && f.schema ? f.schema : "json";
}

/**
 * Ollama's `options` for `spec`'s sampling, of a chat or an embedding run alike. `sampling.extra`
 * goes in only under Ollama's names; other extras are dropped with a warning.
 */
function optionsOf(spec: ExecutionSpec, log: Logger): Record<string, unknown> {
  const s = spec.sampling;
  const options: Record<string, unknown> = {};
  if (s.temperature !== undefined) options.temperature = s.temperature;
  if (s.topP !== undefined) options.top_p = s.topP;
  if (s.maxTokens !== undefined) options.num_predict = s.maxTokens;
  if (s.stop?.length) options.stop = s.stop;
  if (s.seed !== undefined) options.seed = s.seed;
  if (s.extra) {
    const { extras, dropped } = backendExtras(FEATURES, s.extra);
    if (dropped.length > 0) {
      log.warn("sampling options dropped", {
        run_id: spec.runId,
        trace_id: traceIdOf(spec.traceParent),
        options: dropped.join(","),
      });
    }
    for (const [key, value] of Object.entries(extras)) if (!(key in options)) options[key] = value;
  }
  return options;
}

/**
 * The request body and endpoint for `spec`: chat when there are messages, else generate, with
 * {@linkcode optionsOf} the sampling. Tool choice `none` is honoured by not offering the tools
 * (Ollama has no `tool_choice`; what it cannot honour was refused before).
 */
function requestFor(
  spec: ExecutionSpec,
  stream: boolean,
  log: Logger,
): { path: string; body: object } {
  const options = optionsOf(spec, log);
  const format = spec.outputFormat ? { format: formatOf(spec.outputFormat) } : {};
  if (spec.messages.length === 0) {
    return {
      path: "/api/generate",
      body: { model: spec.target, prompt: spec.prompt, stream, options, ...format },
    };
  }
  const names = toolCallNames(spec.messages);
  const body: Record<string, unknown> = {
    model: spec.target,
    messages: spec.messages.map((m, i) => ollamaMessage(m, i, names)),
    stream,
    options,
    ...format,
  };
  if (spec.tools.length && spec.toolChoice !== "none") {
    body.tools = spec.tools.map((t) => ({
      type: "function",
      function: { name: t.name, description: t.description, parameters: t.parameters },
    }));
  }
  return { path: "/api/chat", body };
}

/** Folds Ollama answer objects into sink events and, at `done`, the result. */
class ChunkReader {
  #toolCalls = 0;
  constructor(private readonly sink: EventSink, private readonly guard: RequestGuard) {}

  /** Handles one object; returns the result when it is the final one. */
  take(chunk: OllamaChunk): ExecutionResult | undefined {
    if (typeof chunk.error === "string") {
      throw new IopError("BACKEND_ERROR", chunk.error);
    }
    const text = chunk.message?.content ?? chunk.response ?? "";
    if (text !== "") {
      this.guard.token();
      this.sink.output(text);
    }
    for (const call of chunk.message?.tool_calls ?? []) {
      this.guard.token();
      const index = call.function?.index ?? this.#toolCalls;
      this.sink.toolCall(
        {
          index,
          id: call.id ?? `call_${index}`,
          name: call.function?.name ?? "",
          arguments: JSON.stringify(call.function?.arguments ?? {}),
        } satisfies ToolCall,
      );
      this.#toolCalls++;
    }
    if (!chunk.done) return undefined;
    const finishReason = this.#toolCalls > 0
      ? "tool_calls"
      : chunk.done_reason === "length"
      ? "length"
      : "stop";
    return {
      finishReason,
      usage: { inputTokens: chunk.prompt_eval_count ?? 0, outputTokens: chunk.eval_count ?? 0 },
    };
  }
}

/**
 * The `/api/embed` body of an embedding run: Ollama reads `truncate` (its default: true),
 * `dimensions`, and `options` (`num_ctx` ...) as for a chat.
 */
function embedBody(spec: ExecutionSpec, log: Logger): Record<string, unknown> {
  const embed = spec.embed!;
  const options = optionsOf(spec, log);
  return {
    model: spec.target,
    input: embed.inputs,
    ...(embed.truncate !== undefined ? { truncate: embed.truncate } : {}),
    ...(embed.dimensions !== undefined ? { dimensions: embed.dimensions } : {}),
    ...(Object.keys(options).length > 0 ? { options } : {}),
  };
}

function parseLine(line: string): OllamaChunk {
  try {
    return JSON.parse(line) as OllamaChunk;
  } catch {
    throw new IopError(
      "BACKEND_ERROR",
      `Ollama sent a line that is not JSON: ${line.slice(0, 200)}`,
    );
  }
}

/** Creates an adapter for the Ollama server at `settings.baseUrl`. */
export function createOllamaAdapter(
  name: string,
  settings: HttpModelSettings,
  options: ModelAdapterOptions = {},
): Adapter {
  const base = baseOf(settings);
  const ctx: RunContext = {
    kind: "ollama",
    name,
    logger: options.logger ?? createLogger("node.adapter.ollama").with({ adapter: name }),
    metrics: options.metrics,
  };

  const client = new Http1Client();
  const execute = (spec: ExecutionSpec, sink: EventSink, { signal }: { signal: AbortSignal }) =>
    guardedRun(ctx, spec, settings, signal, async (guard) => {
      refuseUnhonoured("ollama", FEATURES, spec);
      if (spec.embed) {
        return await relayEmbeddings(
          {
            url: `${base}/api/embed`,
            body: embedBody(spec, ctx.logger),
            post: { client },
            backend: "Ollama",
            read: (answer) => ({
              vectors: (answer as OllamaEmbedAnswer).embeddings,
              inputTokens: (answer as OllamaEmbedAnswer).prompt_eval_count ?? 0,
            }),
            ...(options.maxEmbeddingsAnswerBytes !== undefined
              ? { maxAnswerBytes: options.maxEmbeddingsAnswerBytes }
              : {}),
          },
          spec.embed,
          guard,
          sink,
        );
      }
      const stream = spec.wholeAnswer !== true;
      const { path, body } = requestFor(spec, stream, ctx.logger);
      const url = base + path;
      const res = await postJson(url, body, guard, { client });
      const reader = new ChunkReader(sink, guard);
      if (!stream) {
        const result = reader.take(await readJson(res, guard, url) as OllamaChunk);
        if (!result) throw new IopError("BACKEND_ERROR", "Ollama answer lacks done:true");
        return result;
      }
      let result: ExecutionResult | undefined;
      const lines = new LineDecoder((line) => {
        result ??= reader.take(parseLine(line));
      });
      try {
        await readBody(res, guard, (bytes) => {
          lines.feed(bytes);
          return result !== undefined;
        }, sink);
        if (!result) lines.end();
      } catch (err) {
        throw guard.failure(err, "stream", url);
      }
      if (result) return result;
      throw new IopError("BACKEND_ERROR", "Ollama stream ended early, without a done object");
    });

  const capabilities = async ({ signal }: { signal: AbortSignal }): Promise<Capabilities> => {
    const caps = { streaming: true, tools: FEATURES.tools, sessions: false };
    // A hung server must not hang the health report: the connect limit bounds it too.
    const limit = settings.connectTimeoutMs > 0
      ? AbortSignal.any([signal, AbortSignal.timeout(settings.connectTimeoutMs)])
      : signal;
    const get = async (path: string) => {
      const res = await fetch(base + path, { signal: limit });
      if (!res.ok) {
        await res.body?.cancel();
        throw new Error(`GET ${path} answered ${res.status}`);
      }
      return await res.json();
    };
    try {
      const [tags, version] = await Promise.all([get("/api/tags"), get("/api/version")]);
      const models = (tags as { models?: { name?: string }[] }).models ?? [];
      return {
        ...caps,
        targets: models.map((m) => m.name ?? "").filter((n) => n !== ""),
        healthy: true,
        detail: `ollama ${(version as { version?: string }).version ?? "unknown"} at ${base}`,
      };
    } catch (err) {
      if (signal.aborted) throw signal.reason;
      const detail = err instanceof Error ? err.message : String(err);
      return {
        ...caps,
        targets: [...settings.models],
        healthy: false,
        detail: `ollama at ${base} unreachable: ${detail}`,
      };
    }
  };

  return {
    name,
    kind: "ollama",
    execute,
    capabilities,
    probe: ({ signal }) => probeOllama(base, signal),
    close: () => Promise.resolve(client.close()),
  };
}
