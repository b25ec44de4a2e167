/**
 * Ollama request and response shapes: `/api/chat` and `/api/generate` bodies become run inputs;
 * run events become NDJSON chunks with Ollama's final `done:true` object (durations in ns).
 * `images` (per message, or on a generate request) become the message's image parts as `data:`
 * URLs typed by their bytes.
 * @module
 */
import type {
  ChatMessage,
  ContentPart,
  OutputFormat,
  RunEvent,
  RunInput,
  Sampling,
  ToolCall,
  Usage,
} from "../../../../shared/run.ts";
import type { RequestMeter } from "../http_metrics.ts";
import { UINT32_MAX } from "../../../../shared/run_codec.ts";
import { checkFields, type FieldPolicy, never, onlyAt } from "../field_policy.ts";
import { INT32_MAX, type JsonFields, type NumberBounds, SEED_BOUNDS } from "../json_fields.ts";
import { errorOf, type RunAnswer, ToolCallAccumulator } from "../run_bridge.ts";
import { base64ImageUrl } from "../image_input.ts";

/** A parsed Ollama chat or generate request. */
export interface OllamaRequest {
  model: string;
  stream: boolean;
  input: Omit<RunInput, "adapter" | "target">;
  /** Ollama runner options the client sent that the Edge drops (see {@linkcode samplingOf}). */
  droppedOptions: string[];
}

const ROLES = ["system", "user", "assistant", "tool"] as const;

/** Sampling options forwarded to the backend in `sampling.extra`, with their bounds. */
const EXTRA_OPTIONS: Record<string, NumberBounds> = {
  top_k: { min: 0, max: INT32_MAX, integer: true },
  min_p: { min: 0, max: 1 },
  repeat_penalty: { min: 0 },
  presence_penalty: { min: -2, max: 2 },
  frequency_penalty: { min: -2, max: 2 },
  num_ctx: { min: 1, max: INT32_MAX, integer: true },
};

/** Options mapped onto the run's own sampling fields. */
const MAPPED_OPTIONS = ["temperature", "top_p", "num_predict", "stop", "seed"];

/**
 * Ollama options that tune its runner (placement, threads, memory) or rarer samplers: Ollama
 * accepts them, but on a shared backend they are the operator's to set, so they are dropped
 * (and logged) rather than refused, which keeps clients that always send them working.
 */
const DROPPED_OPTIONS = new Set([
  "num_keep",
  "typical_p",
  "repeat_last_n",
  "tfs_z",
  "mirostat",
  "mirostat_tau",
  "mirostat_eta",
  "penalize_newline",
  "numa",
  "num_batch",
  "num_gpu",
  "main_gpu",
  "low_vram",
  "f16_kv",
  "logits_all",
  "vocab_only",
  "use_mmap",
  "use_mlock",
  "num_thread",
  "embedding_only",
  "rope_frequency_base",
  "rope_frequency_scale",
]);

/**
 * Ollama `options` as sampling. Only sampling parameters travel, each checked against its wire
 * or backend range, and only under their own names, so none can replace what the Edge sets
 * (`model`, `messages`, `stream`): the adapters merge `sampling.extra` into the backend body.
 * Runner options are dropped (returned in `dropped`); any other key is refused naming it.
 */
export function samplingOf(body: JsonFields): { sampling: Sampling; dropped: string[] } {
  const options = body.object("options");
  const sampling: Sampling = {};
  const dropped: string[] = [];
  if (!options) return { sampling, dropped };
  const temperature = options.number("temperature", { min: 0 });
  if (temperature !== undefined) sampling.temperature = temperature;
  const topP = options.number("top_p", { min: 0, max: 1 });
  if (topP !== undefined) sampling.topP = topP;
  // -1 (no limit) and -2 (fill the context) leave the limit to the backend.
  const numPredict = options.number("num_predict", { min: -2, max: UINT32_MAX, integer: true });
  if (numPredict !== undefined && numPredict > 0) sampling.maxTokens = numPredict;
  const stop = options.stringList("stop");
  if (stop !== undefined) sampling.stop = stop;
  const seed = options.number("seed", SEED_BOUNDS);
  if (seed !== undefined) sampling.seed = seed;
  const extra: Record<string, unknown> = {};
  for (const key of Object.keys(options.value)) {
    if (MAPPED_OPTIONS.includes(key)) continue;
    const bounds = Object.hasOwn(EXTRA_OPTIONS, key) ? EXTRA_OPTIONS[key] : undefined;
    if (bounds) {
      const value = options.number(key, bounds);
      if (value !== undefined) extra[key] = value;
    } else if (DROPPED_OPTIONS.has(key)) {
      dropped.push(key);
    } else {
      options.fail(
        key,
        `is not an option this Edge accepts; the sampling options are ${
          [...MAPPED_OPTIONS, ...Object.keys(EXTRA_OPTIONS)].join(", ")
        }`,
      );
    }
  }
  if (Object.keys(extra).length > 0) sampling.extra = extra;
  return { sampling, dropped };
}

function toolsOf(body: JsonFields): RunInput["tools"] {
  return body.objects("tools").map((tool) => {
    const fn = tool.object("function") ?? tool.fail("function", "is required");
    return {
      name: fn.requiredString("name"),
      description: fn.string("description") ?? "",
      parameters: fn.object("parameters")?.value ?? {},
    };
  });
}

/** The name a schema from Ollama's `format` (which has none) carries to OpenAI-style backends. */
export const OLLAMA_SCHEMA_NAME = "response";

/**
 * Ollama's `format`: `"json"` (any JSON object) or a JSON Schema object the answer must
 * match; absent or `""` means free text. Anything else is refused naming the field.
 */
export function formatOf(body: JsonFields): OutputFormat | undefined {
  const v = body.value.format;
  if (v === undefined || v === null || v === "") return undefined;
  if (v === "json") return { type: "json_object" };
  if (typeof v === "string") {
    body.fail("format", `must be "json" or a JSON schema object: got '${v}'`);
  }
  return { type: "json_schema", name: OLLAMA_SCHEMA_NAME, schema: body.object("format")!.value };
}

function base(body: JsonFields, messages: ChatMessage[], prompt: string): OllamaRequest {
  const stream = body.boolean("stream") ?? true;
  const { sampling, dropped } = samplingOf(body);
  const format = formatOf(body);
  return {
    model: body.requiredString("model"),
    stream,
    droppedOptions: dropped,
    input: {
      messages,
      prompt,
      sampling,
      tools: toolsOf(body),
      sessionId: "",
      metadata: {},
      timeoutMs: 0,
      wholeAnswer: !stream,
      ...(format ? { outputFormat: format } : {}),
    },
  };
}

/** Fields every Ollama model endpoint takes. */
export const OLLAMA_COMMON_FIELDS: FieldPolicy = {
  model: "carried",
  options: "carried",
  // How long Ollama keeps the model in memory: the backend's operator decides that for everyone.
  keep_alive: "inert",
};

/** Every field of an `/api/chat` body, and how it is treated. */
const CHAT_FIELDS: FieldPolicy = {
  ...OLLAMA_COMMON_FIELDS,
  messages: "carried",
  tools: "carried",
  format: "carried",
  stream: "carried",
  think: onlyAt("cannot be true: thinking output is not carried from the backends", false),
};

/** Every field of an `/api/generate` body, and how it is treated. */
const GENERATE_FIELDS: FieldPolicy = {
  ...OLLAMA_COMMON_FIELDS,
  prompt: "carried",
  system: "carried",
  images: "carried",
  format: "carried",
  stream: "carried",
  think: CHAT_FIELDS.think!,
  raw: onlyAt("cannot be true: prompts are always sent through the model's template", false),
  suffix: never("cannot be honoured: fill-in-the-middle is not carried to the backends"),
  template: never("cannot be honoured: the backend's own template is used"),
  context: onlyAt("must be empty: use /api/chat to continue a conversation", []),
};

/**
 * Validates an `/api/chat` body; errors name the bad field. Ollama clients send tool calls
 * without ids and tool results with only `tool_name`: each call gets an id unique in the
 * conversation, and each tool result the id of the earlier assistant call it answers — the
 * first unanswered one of that name, or (without a name) the first unanswered one — so an
 * OpenAI-compatible backend receives a `tool_call_id`. A result that matches no call keeps
 * none; the capability check refuses it for backends that need one.
 */
export function parseOllamaChat(body: JsonFields): OllamaRequest {
  checkFields(body, CHAT_FIELDS, "/api/chat");
  let unanswered: ToolCall[] = [];
  const messages = body.objects("messages").map((m, at): ChatMessage => {
    const role = m.requiredString("role");
    if (!(ROLES as readonly string[]).includes(role)) {
      m.fail("role", `must be one of ${ROLES.join(", ")}: got '${role}'`);
    }
    const msg: ChatMessage = {
      role: role as ChatMessage["role"],
      content: m.string("content") ?? "",
    };
    const images = imagesOf(m);
    if (images) msg.parts = withImages(msg.content, images);
    const calls = m.objects("tool_calls");
    if (calls.length > 0) {
      msg.toolCalls = calls.map((call, index) => {
        const fn = call.object("function") ?? call.fail("function", "is required");
        const args = fn.value.arguments;
        return {
          index,
          id: call.string("id") || `call_${at}_${index}`,
          name: fn.requiredString("name"),
          arguments: typeof args === "string" ? args : JSON.stringify(args ?? {}),
        };
      });
      unanswered = [...msg.toolCalls];
    }
    if (role === "tool") {
      const name = m.string("tool_name") || undefined;
      const id = m.string("tool_call_id") || undefined;
      const i = unanswered.findIndex((c) =>
        id !== undefined ? c.id === id : name === undefined || c.name === name
      );
      const call = i >= 0 ? unanswered.splice(i, 1)[0] : undefined;
      const callId = id ?? call?.id;
      if (callId !== undefined) msg.toolCallId = callId;
      const toolName = name ?? call?.name;
      if (toolName !== undefined) msg.name = toolName;
    }
    return msg;
  });
  return base(body, messages, "");
}

/**
 * Ollama's `images` of a message or a generate request (base64 bytes, no `data:` prefix) as
 * `data:` URLs typed by their magic number; undefined when absent or empty. A string that is not
 * base64 PNG, JPEG, GIF or WebP is refused naming it (`messages[0].images[1]`).
 */
export function imagesOf(body: JsonFields): string[] | undefined {
  const list = body.array("images");
  if (!list || list.length === 0) return undefined;
  return list.map((image, i) => {
    const key = `images[${i}]`;
    if (typeof image !== "string") return body.fail(key, "must be a base64 string");
    const checked = base64ImageUrl(image);
    return "problem" in checked ? body.fail(key, checked.problem) : checked.url;
  });
}

/** A message's parts: its text (when any), then its images. */
function withImages(content: string, images: string[]): ContentPart[] {
  const parts: ContentPart[] = images.map((url) => ({ type: "image", url }));
  return content === "" ? parts : [{ type: "text", text: content }, ...parts];
}

/** Validates an `/api/generate` body; errors name the bad field. */
export function parseOllamaGenerate(body: JsonFields): OllamaRequest {
  checkFields(body, GENERATE_FIELDS, "/api/generate");
  const prompt = body.string("prompt") ?? "";
  const system = body.string("system");
  const messages: ChatMessage[] = [];
  if (system) messages.push({ role: "system", content: system });
  const user: ChatMessage = { role: "user", content: prompt };
  const images = imagesOf(body);
  if (images) user.parts = withImages(prompt, images);
  messages.push(user);
  return base(body, messages, prompt);
}

function finalFields(usage: Usage, startedNs: number, doneReason: string) {
  const total = Math.max(0, Math.round(performance.now() * 1e6 - startedNs));
  return {
    done: true,
    done_reason: doneReason,
    total_duration: total,
    load_duration: 0,
    prompt_eval_count: usage.inputTokens,
    prompt_eval_duration: 0,
    eval_count: usage.outputTokens,
    eval_duration: total,
  };
}

function ollamaToolCalls(answer: Pick<RunAnswer, "toolCalls">) {
  return answer.toolCalls.map((c) => ({
    function: { name: c.name, arguments: parseArguments(c.arguments) },
  }));
}

function parseArguments(text: string): unknown {
  try {
    return JSON.parse(text || "{}");
  } catch {
    return text;
  }
}

/** The one-object answer of a non-streaming request. */
export function ollamaAnswer(
  kind: "chat" | "generate",
  model: string,
  answer: RunAnswer,
  startedNs: number,
): Record<string, unknown> {
  const head: Record<string, unknown> = { model, created_at: new Date().toISOString() };
  if (kind === "chat") {
    const message: Record<string, unknown> = { role: "assistant", content: answer.text };
    if (answer.toolCalls.length > 0) message.tool_calls = ollamaToolCalls(answer);
    head.message = message;
  } else {
    head.response = answer.text;
  }
  const reason = answer.finishReason === "length" ? "length" : "stop";
  return { ...head, ...finalFields(answer.usage, startedNs, reason) };
}

/**
 * NDJSON lines of a streamed answer, written to `out` as the run's events are passed in with
 * `next(event)`; a failure is one more `{"error":…}` line.
 */
export function* ollamaLines(
  kind: "chat" | "generate",
  model: string,
  startedNs: number,
  meter: RequestMeter,
  out: (text: string) => void,
): Generator<void, void, RunEvent> {
  const line = (fields: Record<string, unknown>, piece: string) => {
    const out: Record<string, unknown> = { model, created_at: new Date().toISOString() };
    if (kind === "chat") out.message = { role: "assistant", content: piece };
    else out.response = piece;
    return `${JSON.stringify({ ...out, ...fields })}\n`;
  };
  const tools = new ToolCallAccumulator();
  let usage: Usage = { inputTokens: 0, outputTokens: 0 };
  while (true) {
    const event = yield;
    switch (event.type) {
      case "usage":
        usage = event.usage;
        break;
      case "output":
        if (event.text === "") break;
        meter.firstToken();
        out(line({ done: false }, event.text));
        break;
      case "tool_call":
        meter.firstToken();
        tools.add(event.call);
        break;
      case "completed": {
        const toolCalls = tools.calls();
        if (toolCalls.length > 0 && kind === "chat") {
          out(`${
            JSON.stringify({
              model,
              created_at: new Date().toISOString(),
              message: {
                role: "assistant",
                content: "",
                tool_calls: ollamaToolCalls({ toolCalls }),
              },
              done: false,
            })
          }\n`);
        }
        const final = event.usage ?? usage;
        meter.usage(final.inputTokens, final.outputTokens);
        const reason = event.finishReason === "length" ? "length" : "stop";
        out(line(finalFields(final, startedNs, reason), ""));
        return;
      }
      case "failed":
      case "cancelled":
        out(`${JSON.stringify({ error: errorOf(event)!.message })}\n`);
        return;
    }
  }
}
