/**
 * `POST /v1/chat/completions`: the request becomes a run input; the answer is one
 * `chat.completion` object or an SSE stream of `chat.completion.chunk`s in the exact order of
 * PROTOCOLS.md (role delta, content/tool-call deltas, a closing `delta:{}` with the finish
 * reason, the usage chunk when asked, `[DONE]`). A user message's `image_url` parts travel as
 * the run message's image parts, their URLs checked (`image_input.ts`).
 * @module
 */
import {
  type ChatMessage,
  type ContentPart,
  type OutputFormat,
  partsText,
  type RunEvent,
  type RunInput,
  type ToolChoice,
  type ToolDefinition,
  type Usage,
} from "../../../../shared/run.ts";
import { checkFields, type FieldPolicy, never, onlyAt } from "../field_policy.ts";
import {
  FieldError,
  INT32_MAX,
  type JsonFields,
  MAX_TOKENS_BOUNDS,
  type NumberBounds,
  SEED_BOUNDS,
} from "../json_fields.ts";
import { UINT32_MAX } from "../../../../shared/run_codec.ts";
import type { RequestMeter } from "../http_metrics.ts";
import { errorOf, type RunAnswer } from "../run_bridge.ts";
import { checkImageUrl } from "../image_input.ts";
import { openaiError } from "./errors.ts";

/** A parsed chat completion request. */
export interface ChatRequest {
  model: string;
  stream: boolean;
  includeUsage: boolean;
  input: Omit<RunInput, "adapter" | "target">;
}

const ROLES = ["system", "developer", "user", "assistant", "tool"] as const;

/** The types of a text content part (Chat Completions', and the Responses API's input/output). */
const TEXT_PARTS = ["text", "input_text", "output_text"];

/** Text of an OpenAI content field: a string, null, or text parts. */
export function contentText(m: JsonFields, key = "content"): string {
  const v = m.value[key];
  if (v === undefined || v === null) return "";
  if (typeof v === "string") return v;
  return m.objects(key).map((part) => {
    const type = part.requiredString("type");
    if (!TEXT_PARTS.includes(type)) {
      part.fail("type", `'${type}' is not supported; only text parts are`);
    }
    return part.string("text") ?? "";
  }).join("");
}

const DETAILS = ["auto", "low", "high"];

/** One `image_url` content part: a checked URL and OpenAI's optional `detail`. */
function imagePart(part: JsonFields, options: ParseOptions): ContentPart {
  const image = part.object("image_url") ?? part.fail("image_url", "is required");
  const checked = checkImageUrl(image.requiredString("url"), {
    allowLinks: options.allowImageLinks ?? false,
  });
  if ("problem" in checked) return image.fail("url", checked.problem);
  const detail = image.string("detail");
  if (detail === undefined) return { type: "image", url: checked.url };
  if (!DETAILS.includes(detail)) {
    image.fail("detail", `must be one of ${DETAILS.join(", ")}: got '${detail}'`);
  }
  return { type: "image", url: checked.url, detail };
}

/**
 * The content of a message: text as before, or — when a user message's content parts hold an
 * image — every part in order (one run part per content part, so a part's index names the
 * client's `content[j]`), with the text parts joined by newlines as the text-only content.
 */
function messageContent(
  m: JsonFields,
  role: string,
  options: ParseOptions,
): Pick<ChatMessage, "content" | "parts"> {
  const v = m.value.content;
  if (!Array.isArray(v) || !v.some((p) => (p as { type?: unknown } | null)?.type === "image_url")) {
    return { content: contentText(m) };
  }
  const items = m.objects("content");
  if (role !== "user") {
    const at = v.findIndex((p) => (p as { type?: unknown } | null)?.type === "image_url");
    items[at]!.fail("type", `'image_url' is only allowed in user messages, not ${role} ones`);
  }
  const parts = items.map((part): ContentPart => {
    const type = part.requiredString("type");
    if (type === "image_url") return imagePart(part, options);
    if (!TEXT_PARTS.includes(type)) {
      part.fail("type", `'${type}' is not supported; only text and image_url parts are`);
    }
    return { type: "text", text: part.string("text") ?? "" };
  });
  return { content: partsText(parts), parts };
}

function parseMessage(m: JsonFields, options: ParseOptions): ChatMessage {
  const role = m.requiredString("role");
  if (!(ROLES as readonly string[]).includes(role)) {
    m.fail("role", `must be one of ${ROLES.join(", ")}: got '${role}'`);
  }
  const msg: ChatMessage = {
    role: role as ChatMessage["role"],
    ...messageContent(m, role, options),
  };
  const name = m.string("name");
  if (name !== undefined) msg.name = name;
  if (role === "tool") msg.toolCallId = m.requiredString("tool_call_id");
  const calls = m.objects("tool_calls");
  if (calls.length > 0) {
    msg.toolCalls = calls.map((call, index) => {
      const fn = call.object("function") ?? call.fail("function", "is required");
      return {
        index,
        id: call.requiredString("id"),
        name: fn.requiredString("name"),
        arguments: fn.string("arguments") ?? "",
      };
    });
  }
  return msg;
}

/** OpenAI `tools` (function tools only) as run tool definitions. */
export function parseTools(body: JsonFields, nested: boolean): ToolDefinition[] {
  return body.objects("tools").map((tool) => {
    const type = tool.requiredString("type");
    if (type !== "function") tool.fail("type", `'${type}' is not supported; use 'function'`);
    const fn = nested ? (tool.object("function") ?? tool.fail("function", "is required")) : tool;
    const params = fn.object("parameters");
    return {
      name: fn.requiredString("name"),
      description: fn.string("description") ?? "",
      parameters: params?.value ?? {},
    };
  });
}

/** OpenAI's rule for a `json_schema` format's name. */
const SCHEMA_NAME = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * A `json_schema` format from its fields (`name`, `description`, `schema`, `strict`): nested
 * under `response_format.json_schema` in Chat Completions, flat in the Responses `text.format`.
 */
export function jsonSchemaFormat(f: JsonFields): OutputFormat {
  const name = f.requiredString("name");
  if (!SCHEMA_NAME.test(name)) {
    f.fail("name", `must be 1 to 64 letters, digits, underscores or dashes: got '${name}'`);
  }
  const out: OutputFormat = { type: "json_schema", name };
  const description = f.string("description");
  if (description !== undefined) out.description = description;
  const schema = f.object("schema");
  if (schema) out.schema = schema.value;
  const strict = f.boolean("strict");
  if (strict !== undefined) out.strict = strict;
  return out;
}

/**
 * An output format object (`{type: "text" | "json_object" | "json_schema", ...}`) as a run's
 * output format; `text` is none. `nested` reads the schema from `json_schema` (Chat
 * Completions' `response_format`), else from the object itself (the Responses `text.format`).
 */
export function outputFormatOf(f: JsonFields, nested: boolean): OutputFormat | undefined {
  const type = f.requiredString("type");
  switch (type) {
    case "text":
      return undefined;
    case "json_object":
      return { type: "json_object" };
    case "json_schema":
      if (!nested) return jsonSchemaFormat(f);
      return jsonSchemaFormat(
        f.object("json_schema") ?? f.fail("json_schema", "is required when 'type' is json_schema"),
      );
    default:
      f.fail("type", `must be one of text, json_object, json_schema: got '${type}'`);
  }
}

const TOOL_CHOICES = ["auto", "none", "required"];

/**
 * OpenAI's `tool_choice`: `auto`, `none`, `required`, or a function of `tools` to call, given
 * as `{type: "function", function: {name}}` (`nested`, Chat Completions) or `{type: "function",
 * name}` (Responses). Other kinds (`allowed_tools`, hosted tools) are refused naming the field.
 */
export function parseToolChoice(
  body: JsonFields,
  tools: ToolDefinition[],
  nested: boolean,
): ToolChoice | undefined {
  const v = body.value.tool_choice;
  if (v === undefined || v === null) return undefined;
  let choice: ToolChoice;
  if (typeof v === "string") {
    if (!TOOL_CHOICES.includes(v)) {
      body.fail(
        "tool_choice",
        `must be one of ${TOOL_CHOICES.join(", ")} or a function: got '${v}'`,
      );
    }
    choice = v as ToolChoice;
  } else {
    const c = body.object("tool_choice")!;
    const type = c.requiredString("type");
    if (type !== "function") {
      c.fail("type", `'${type}' is not supported; use 'function' (or auto, none, required)`);
    }
    const fn = nested ? (c.object("function") ?? c.fail("function", "is required")) : c;
    const name = fn.requiredString("name");
    if (!tools.some((t) => t.name === name)) {
      fn.fail("name", `names no tool in 'tools': got '${name}'`);
    }
    choice = { function: name };
  }
  if (choice === "required" && tools.length === 0) {
    body.fail("tool_choice", "is 'required', but the request has no 'tools'");
  }
  return choice;
}

/**
 * The structured-output and tool-choice fields of a run: `outputFormat`, `toolChoice` and
 * `parallelToolCalls`, each present only when the client set it.
 */
export function choicesOf(
  format: OutputFormat | undefined,
  toolChoice: ToolChoice | undefined,
  parallel: boolean | undefined,
): Pick<RunInput, "outputFormat" | "toolChoice" | "parallelToolCalls"> {
  return {
    ...(format ? { outputFormat: format } : {}),
    ...(toolChoice !== undefined ? { toolChoice } : {}),
    ...(parallel !== undefined ? { parallelToolCalls: parallel } : {}),
  };
}

/** Options of the request parsers. */
export interface ParseOptions {
  /** Accept `mock.*` metadata keys (`http.allow_mock_metadata`); default false. */
  allowMockMetadata?: boolean;
  /** Accept http(s) image links (`http.allow_image_links`); default false: `data:` URLs only. */
  allowImageLinks?: boolean;
}

/**
 * Sampling fields beyond OpenAI's own that travel in `sampling.extra`, with their bounds: the
 * penalties (OpenAI's), and vLLM's `top_k`, `min_p` and `repetition_penalty`, which clients of
 * vLLM send in the same body. Each backend kind maps them to its own names or drops them with a
 * logged warning (`shared/adapter_kinds/features.ts`).
 */
const CHAT_EXTRAS: Readonly<Record<string, NumberBounds>> = {
  presence_penalty: { min: -2, max: 2 },
  frequency_penalty: { min: -2, max: 2 },
  top_k: { min: -1, max: INT32_MAX, integer: true },
  min_p: { min: 0, max: 1 },
  repetition_penalty: { min: 0 },
};

/** Fields OpenAI reads only for its own accounting: they change no answer. */
export const ACCOUNTING_FIELDS: FieldPolicy = {
  // An end-user id for OpenAI's abuse monitoring.
  user: "inert",
  safety_identifier: "inert",
  // A hint for OpenAI's prompt cache routing; a backend's own cache needs none.
  prompt_cache_key: "inert",
  service_tier: onlyAt("must be auto or default: this Edge has no other tiers", "auto", "default"),
};

/** Every field of a chat completion request, and how it is treated. */
const CHAT_FIELDS: FieldPolicy = {
  ...ACCOUNTING_FIELDS,
  ...Object.fromEntries(Object.keys(CHAT_EXTRAS).map((k) => [k, "carried"])),
  model: "carried",
  messages: "carried",
  n: "carried",
  stream: "carried",
  stream_options: "carried",
  temperature: "carried",
  top_p: "carried",
  max_tokens: "carried",
  max_completion_tokens: "carried",
  stop: "carried",
  seed: "carried",
  tools: "carried",
  tool_choice: "carried",
  parallel_tool_calls: "carried",
  response_format: "carried",
  metadata: "carried",
  store: onlyAt(
    "cannot be true: chat completions are not stored (the Responses API stores)",
    false,
  ),
  logprobs: onlyAt("cannot be true: no backend of this Edge reports log probabilities", false),
  top_logprobs: onlyAt("must be 0: no backend of this Edge reports log probabilities", 0),
  logit_bias: onlyAt("must be empty: token biases cannot be carried to the backends", {}),
  modalities: onlyAt('must be ["text"]: the models here answer in text only', ["text"]),
  audio: never("cannot be honoured: the models here answer in text only"),
  prediction: never("cannot be honoured: predicted outputs are not carried to the backends"),
  reasoning_effort: never("cannot be honoured: reasoning effort is not carried to the backends"),
  verbosity: never("cannot be honoured: verbosity is not carried to the backends"),
  web_search_options: never("cannot be honoured: this Edge has no web search"),
  functions: never("is the deprecated form of 'tools': send 'tools' instead"),
  function_call: never("is the deprecated form of 'tool_choice': send 'tool_choice' instead"),
};

/** Validates a chat completion body; errors name the bad field. */
export function parseChatRequest(body: JsonFields, options: ParseOptions = {}): ChatRequest {
  checkFields(body, CHAT_FIELDS, "/v1/chat/completions");
  const model = body.requiredString("model");
  const messagesRaw = body.array("messages");
  if (!messagesRaw) body.fail("messages", "is required");
  if (messagesRaw.length === 0) body.fail("messages", "must contain at least one message");
  const messages = body.objects("messages").map((m) => parseMessage(m, options));
  const n = body.number("n", { min: 1, max: UINT32_MAX, integer: true });
  if (n !== undefined && n !== 1) body.fail("n", "must be 1: only one choice is supported");
  const stream = body.boolean("stream") ?? false;
  const streamOptions = body.object("stream_options");
  if (streamOptions && !stream) {
    body.fail("stream_options", "is only allowed when 'stream' is true");
  }
  const sampling: RunInput["sampling"] = {};
  const temperature = body.number("temperature", { min: 0, max: 2 });
  if (temperature !== undefined) sampling.temperature = temperature;
  const topP = body.number("top_p", { min: 0, max: 1 });
  if (topP !== undefined) sampling.topP = topP;
  const maxTokens = body.number("max_completion_tokens", MAX_TOKENS_BOUNDS) ??
    body.number("max_tokens", MAX_TOKENS_BOUNDS);
  if (maxTokens !== undefined) sampling.maxTokens = maxTokens;
  const stop = body.stringList("stop");
  if (stop !== undefined) sampling.stop = stop;
  const seed = body.number("seed", SEED_BOUNDS);
  if (seed !== undefined) sampling.seed = seed;
  const extra = extrasOf(body, CHAT_EXTRAS);
  if (extra) sampling.extra = extra;
  const tools = parseTools(body, true);
  const responseFormat = body.object("response_format");
  return {
    model,
    stream,
    includeUsage: streamOptions?.boolean("include_usage") ?? false,
    input: {
      messages,
      prompt: "",
      sampling,
      tools,
      sessionId: "",
      metadata: metadataOf(body, options),
      timeoutMs: 0,
      wholeAnswer: !stream,
      ...choicesOf(
        responseFormat && outputFormatOf(responseFormat, true),
        parseToolChoice(body, tools, true),
        body.boolean("parallel_tool_calls"),
      ),
    },
  };
}

/** The `extras` fields of `body`, each checked against its bounds; undefined when none is set. */
function extrasOf(
  body: JsonFields,
  extras: Readonly<Record<string, NumberBounds>>,
): Record<string, unknown> | undefined {
  let out: Record<string, unknown> | undefined;
  for (const [key, bounds] of Object.entries(extras)) {
    const value = body.number(key, bounds);
    if (value !== undefined) (out ??= {})[key] = value;
  }
  return out;
}

/**
 * OpenAI's `metadata` (string values) as run metadata. `mock.*` keys drive the mock adapter's
 * fault knobs (token count, delays, failures), so a public client may set them only when the
 * config allows it.
 */
export function metadataOf(body: JsonFields, options: ParseOptions = {}): Record<string, string> {
  const meta = body.object("metadata");
  if (!meta) return {};
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(meta.value)) {
    if (typeof v !== "string") throw new FieldError(meta.at(k), `'${meta.at(k)}' must be a string`);
    if (!options.allowMockMetadata && k.toLowerCase().startsWith("mock.")) {
      throw new FieldError(
        meta.at(k),
        `'${meta.at(k)}' is a mock adapter knob, which this Edge does not take from clients ` +
          "(http.allow_mock_metadata is false)",
      );
    }
    out[k] = v;
  }
  return out;
}

function usageOf(answer: { inputTokens: number; outputTokens: number }) {
  return {
    prompt_tokens: answer.inputTokens,
    completion_tokens: answer.outputTokens,
    total_tokens: answer.inputTokens + answer.outputTokens,
  };
}

/** A new completion id. */
export function completionId(): string {
  return `chatcmpl-${crypto.randomUUID().replaceAll("-", "")}`;
}

/** The non-streaming `chat.completion` body. */
export function chatCompletion(model: string, answer: RunAnswer): Record<string, unknown> {
  const message: Record<string, unknown> = {
    role: "assistant",
    content: answer.toolCalls.length > 0 && answer.text === "" ? null : answer.text,
    refusal: null,
  };
  if (answer.toolCalls.length > 0) {
    message.tool_calls = answer.toolCalls.map((c) => ({
      id: c.id,
      type: "function",
      function: { name: c.name, arguments: c.arguments },
    }));
  }
  return {
    id: completionId(),
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model,
    choices: [{ index: 0, message, logprobs: null, finish_reason: answer.finishReason }],
    usage: usageOf(answer.usage),
  };
}

/**
 * The SSE frames of a streamed completion: written to `out` as the run's events are passed in
 * with `next(event)`; the generator returns after the frame that ends the stream.
 */
export function* chatChunks(
  model: string,
  includeUsage: boolean,
  meter: RequestMeter,
  out: (text: string) => void,
): Generator<void, void, RunEvent> {
  const id = completionId();
  const created = Math.floor(Date.now() / 1000);
  const frame = (choices: unknown[], usage?: unknown) => {
    const chunk: Record<string, unknown> = {
      id,
      object: "chat.completion.chunk",
      created,
      model,
      system_fingerprint: null,
      choices,
    };
    if (includeUsage) chunk.usage = usage ?? null;
    return `data: ${JSON.stringify(chunk)}\n\n`;
  };
  const delta = (d: Record<string, unknown>, finish: string | null = null) =>
    frame([{ index: 0, delta: d, logprobs: null, finish_reason: finish }]);
  out(delta({ role: "assistant", content: "" }));
  const seen = new Set<number>();
  let lastUsage: Usage = { inputTokens: 0, outputTokens: 0 };
  while (true) {
    const event = yield;
    switch (event.type) {
      case "usage":
        lastUsage = event.usage;
        break;
      case "output":
        if (event.text === "") break;
        meter.firstToken();
        out(delta({ content: event.text }));
        break;
      case "tool_call": {
        meter.firstToken();
        const c = event.call;
        const first = !seen.has(c.index);
        seen.add(c.index);
        const call: Record<string, unknown> = { index: c.index };
        if (first) {
          call.id = c.id || `call_${crypto.randomUUID().replaceAll("-", "").slice(0, 24)}`;
          call.type = "function";
          call.function = { name: c.name, arguments: c.arguments };
        } else {
          call.function = { arguments: c.arguments };
        }
        out(delta({ tool_calls: [call] }));
        break;
      }
      case "completed": {
        const usage = event.usage ?? lastUsage;
        meter.usage(usage.inputTokens, usage.outputTokens);
        out(delta({}, seen.size > 0 ? "tool_calls" : event.finishReason));
        if (includeUsage) out(frame([], usageOf(usage)));
        out("data: [DONE]\n\n");
        return;
      }
      case "failed":
      case "cancelled":
        out(`data: ${JSON.stringify(openaiError(errorOf(event)).body)}\n\n`);
        return;
    }
  }
}
