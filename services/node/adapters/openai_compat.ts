/**
 * The `openai_compat` adapter: runs models on any server speaking OpenAI's Chat Completions
 * (`POST /v1/chat/completions`, SSE with `stream_options.include_usage`), embeds through
 * `POST /v1/embeddings` (its wire in `openai_embeddings.ts`), lists models from
 * `GET /v1/models`, and sends the API key as a Bearer token that is never logged. A message
 * with images goes as OpenAI's content-part array (`text` and `image_url` parts, in order); the
 * server fetches any link itself.
 * The `vllm` adapter is this one with vLLM's health endpoint and its truncation field (see
 * `vllm.ts`).
 * @module
 */
import { IopError } from "../../../shared/errors.ts";
import { httpModelFeatures } from "../../../shared/adapter_kinds/http_model.ts";
import type { KindFeatures } from "../../../shared/adapter_kinds/kind.ts";
import { backendExtras } from "../../../shared/adapter_kinds/features.ts";
import { createLogger, type Logger } from "../../../shared/log.ts";
import type { ContentPart, OutputFormat, ToolChoice } from "../../../shared/run.ts";
import { traceIdOf } from "../../../shared/trace_context.ts";
import type {
  Adapter,
  Capabilities,
  ChatMessage,
  EventSink,
  ExecutionResult,
  ExecutionSpec,
  HttpModelSettings,
} from "../ports.ts";
import { relayEmbeddings } from "./embedding.ts";
import { probeOpenAICompat, probeVllm } from "./health.ts";
import { Http1Client } from "./http1_client.ts";
import {
  postJson,
  readBody,
  readJson,
  redact,
  type RequestGuard,
  SseDecoder,
} from "./http_stream.ts";
import {
  apiKeyOf,
  baseOf,
  guardedRun,
  type ModelAdapterOptions,
  refuseUnhonoured,
  type RunContext,
} from "./model_run.ts";
import { embeddingsBackend, openAIEmbeddingsBody, openAIVectors } from "./openai_embeddings.ts";

/** Options of {@linkcode createOpenAICompatAdapter}. */
export interface OpenAICompatOptions extends ModelAdapterOptions {
  /** Reported as the adapter's kind and metrics label (default "openai_compat"). */
  kind?: "openai_compat" | "vllm";
  /** A GET path whose 200 means healthy (vLLM: "/health"); absent = `/v1/models` decides. */
  healthPath?: string;
}

interface WireToolCall {
  index?: number;
  id?: string;
  function?: { name?: string; arguments?: string };
}

interface WireChoice {
  delta?: { content?: string | null; tool_calls?: WireToolCall[] };
  message?: { content?: string | null; tool_calls?: WireToolCall[] };
  finish_reason?: string | null;
}

interface WireChunk {
  error?: { message?: string } | string;
  choices?: WireChoice[];
  usage?: { prompt_tokens?: number; completion_tokens?: number } | null;
}

/** One content part in OpenAI's shape. */
function wirePart(p: ContentPart): Record<string, unknown> {
  if (p.type === "text") return { type: "text", text: p.text };
  return {
    type: "image_url",
    image_url: p.detail !== undefined ? { url: p.url, detail: p.detail } : { url: p.url },
  };
}

function wireMessage(m: ChatMessage): Record<string, unknown> {
  const content = m.parts?.length ? m.parts.map(wirePart) : m.content;
  const out: Record<string, unknown> = { role: m.role, content };
  if (m.role === "tool") out.tool_call_id = m.toolCallId ?? "";
  if (m.name && m.role !== "tool") out.name = m.name;
  if (m.toolCalls?.length) {
    out.tool_calls = m.toolCalls.map((c) => ({
      id: c.id,
      type: "function",
      function: { name: c.name, arguments: c.arguments },
    }));
  }
  return out;
}

/** OpenAI's `response_format` for a run's output format. */
export function responseFormatOf(f: OutputFormat): Record<string, unknown> {
  if (f.type === "json_object") return { type: "json_object" };
  const schema: Record<string, unknown> = { name: f.name };
  if (f.description !== undefined) schema.description = f.description;
  if (f.schema !== undefined) schema.schema = f.schema;
  if (f.strict !== undefined) schema.strict = f.strict;
  return { type: "json_schema", json_schema: schema };
}

/** OpenAI's `tool_choice` for a run's tool choice. */
export function toolChoiceOf(c: ToolChoice): unknown {
  return typeof c === "string" ? c : { type: "function", function: { name: c.function } };
}

/**
 * The request body for `spec`. `sampling.extra` goes in only under the names this kind reads
 * (vLLM's `top_k`, `repetition_penalty` ...); other extras (Ollama's `num_ctx`) are dropped with
 * a warning, since servers such as OpenAI's refuse unknown fields. Extras never replace a field
 * set here.
 */
function requestBody(
  spec: ExecutionSpec,
  stream: boolean,
  features: KindFeatures,
  log: Logger,
): Record<string, unknown> {
  const s = spec.sampling;
  const messages = spec.messages.length > 0
    ? spec.messages.map(wireMessage)
    : [{ role: "user", content: spec.prompt }];
  const body: Record<string, unknown> = { model: spec.target, messages, stream };
  if (stream) body.stream_options = { include_usage: true };
  if (s.temperature !== undefined) body.temperature = s.temperature;
  if (s.topP !== undefined) body.top_p = s.topP;
  // `max_tokens` rather than `max_completion_tokens`: every compatible server knows it.
  if (s.maxTokens !== undefined) body.max_tokens = s.maxTokens;
  if (s.stop?.length) body.stop = s.stop;
  if (s.seed !== undefined) body.seed = s.seed;
  if (spec.tools.length) {
    body.tools = spec.tools.map((t) => ({
      type: "function",
      function: { name: t.name, description: t.description, parameters: t.parameters },
    }));
  }
  if (spec.toolChoice !== undefined) body.tool_choice = toolChoiceOf(spec.toolChoice);
  if (spec.parallelToolCalls !== undefined) body.parallel_tool_calls = spec.parallelToolCalls;
  if (spec.outputFormat) body.response_format = responseFormatOf(spec.outputFormat);
  if (!s.extra) return body;
  const { extras, dropped } = backendExtras(features, s.extra);
  if (dropped.length > 0) {
    log.warn("sampling options dropped", {
      run_id: spec.runId,
      trace_id: traceIdOf(spec.traceParent),
      options: dropped.join(","),
    });
  }
  return { ...extras, ...body };
}

function finishOf(
  reason: string | null | undefined,
  sawTools: boolean,
): ExecutionResult["finishReason"] {
  if (reason === "length") return "length";
  if (reason === "tool_calls" || reason === "function_call" || sawTools) return "tool_calls";
  return "stop";
}

/** Folds chunks (or the one non-streaming answer) into sink events and the result. */
class CompletionReader {
  finish: string | null | undefined;
  usage: ExecutionResult["usage"];
  sawTools = false;
  constructor(
    private readonly sink: EventSink,
    private readonly guard: RequestGuard,
    private readonly secret: string,
  ) {}

  take(chunk: WireChunk): void {
    if (chunk.error !== undefined) {
      const message = typeof chunk.error === "string"
        ? chunk.error
        : chunk.error.message ?? "error";
      throw new IopError("BACKEND_ERROR", redact(message, this.secret));
    }
    for (const choice of chunk.choices ?? []) {
      const part = choice.delta ?? choice.message;
      if (typeof part?.content === "string" && part.content !== "") {
        this.guard.token();
        this.sink.output(part.content);
      }
      for (const [position, call] of (part?.tool_calls ?? []).entries()) {
        this.guard.token();
        this.sawTools = true;
        this.sink.toolCall({
          // A stream's deltas carry their call's index; a whole answer's calls are in order.
          index: call.index ?? position,
          id: call.id ?? "",
          name: call.function?.name ?? "",
          arguments: call.function?.arguments ?? "",
        });
      }
      if (choice.finish_reason) this.finish = choice.finish_reason;
    }
    if (chunk.usage) {
      this.usage = {
        inputTokens: chunk.usage.prompt_tokens ?? 0,
        outputTokens: chunk.usage.completion_tokens ?? 0,
      };
    }
  }

  result(): ExecutionResult {
    const out: ExecutionResult = { finishReason: finishOf(this.finish, this.sawTools) };
    if (this.usage) out.usage = this.usage;
    return out;
  }
}

function parseData(data: string): WireChunk {
  try {
    return JSON.parse(data) as WireChunk;
  } catch {
    throw new IopError(
      "BACKEND_ERROR",
      `Model server sent an event that is not JSON: ${data.slice(0, 200)}`,
    );
  }
}

/** Creates an adapter for the OpenAI-compatible server at `settings.baseUrl` (with or without `/v1`). */
export function createOpenAICompatAdapter(
  name: string,
  settings: HttpModelSettings,
  options: OpenAICompatOptions = {},
): Adapter {
  const kind = options.kind ?? "openai_compat";
  const features = httpModelFeatures[kind];
  const root = baseOf(settings).replace(/\/v1$/, "");
  const ctx: RunContext = {
    kind,
    name,
    logger: options.logger ?? createLogger(`node.adapter.${kind}`).with({ adapter: name }),
    metrics: options.metrics,
  };
  const client = new Http1Client();
  const headers = (): Record<string, string> => {
    const key = apiKeyOf(settings);
    return key === "" ? {} : { authorization: `Bearer ${key}` };
  };

  const execute = (spec: ExecutionSpec, sink: EventSink, { signal }: { signal: AbortSignal }) =>
    guardedRun(ctx, spec, settings, signal, async (guard) => {
      refuseUnhonoured(kind, features, spec);
      const secret = apiKeyOf(settings);
      if (spec.embed) {
        const backend = embeddingsBackend(kind);
        const inputs = spec.embed.inputs.length;
        return await relayEmbeddings(
          {
            url: `${root}/v1/embeddings`,
            body: openAIEmbeddingsBody(spec.target, spec.embed, kind),
            post: { client, headers: headers(), secret },
            backend,
            read: (answer) => openAIVectors(answer, inputs, backend),
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
      const url = `${root}/v1/chat/completions`;
      const body = requestBody(spec, stream, features, ctx.logger);
      const res = await postJson(url, body, guard, {
        client,
        headers: headers(),
        secret,
      });
      const reader = new CompletionReader(sink, guard, secret);
      if (!stream) {
        reader.take(await readJson(res, guard, url) as WireChunk);
        return reader.result();
      }
      let done = false;
      const events = new SseDecoder((event) => {
        if (done) return;
        if (event.data === "[DONE]") done = true;
        else reader.take(parseData(event.data));
      });
      try {
        await readBody(res, guard, (bytes) => {
          events.feed(bytes);
          return done;
        }, sink);
        if (!done) events.end();
      } catch (err) {
        throw guard.failure(err, "stream", url);
      }
      // Some servers close without [DONE]; a finish reason still means the answer is whole.
      if (done || reader.finish) return reader.result();
      throw new IopError(
        "BACKEND_ERROR",
        "Model server stream ended early, without a finish reason",
      );
    });

  const capabilities = async ({ signal }: { signal: AbortSignal }): Promise<Capabilities> => {
    const caps = { streaming: true, tools: features.tools, sessions: false };
    const limit = settings.connectTimeoutMs > 0
      ? AbortSignal.any([signal, AbortSignal.timeout(settings.connectTimeoutMs)])
      : signal;
    let healthy = true;
    let detail = `${kind} at ${root}`;
    if (options.healthPath) {
      try {
        const res = await fetch(root + options.healthPath, { signal: limit });
        await res.body?.cancel();
        if (!res.ok) {
          healthy = false;
          detail = `${kind} at ${root}: GET ${options.healthPath} answered ${res.status}`;
        }
      } catch (err) {
        if (signal.aborted) throw signal.reason;
        return {
          ...caps,
          targets: [...settings.models],
          healthy: false,
          detail: `${kind} at ${root} unreachable: ${message(err)}`,
        };
      }
    }
    try {
      const res = await fetch(`${root}/v1/models`, { headers: headers(), signal: limit });
      if (!res.ok) {
        await res.body?.cancel();
        throw new Error(`GET /v1/models answered ${res.status}`);
      }
      const list = await res.json() as { data?: { id?: string }[] };
      const targets = (list.data ?? []).map((m) => m.id ?? "").filter((id) => id !== "");
      return { ...caps, targets, healthy, detail };
    } catch (err) {
      if (signal.aborted) throw signal.reason;
      return {
        ...caps,
        targets: [...settings.models],
        healthy: false,
        detail: `${kind} at ${root}: ${message(err)}`,
      };
    }
  };

  // vLLM's own health endpoint; any other server is healthy while it lists its models.
  const probe = ({ signal }: { signal: AbortSignal }) =>
    options.healthPath
      ? probeVllm(root, signal)
      : probeOpenAICompat(root, { signal, headers: headers() });

  return {
    name,
    kind,
    execute,
    capabilities,
    probe,
    close: () => Promise.resolve(client.close()),
  };
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
