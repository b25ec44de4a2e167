/**
 * `POST /v1/responses`: a Responses API request becomes a run input; the answer is one
 * `response` object or the SSE event sequence the SDK's `responses.stream()` checks
 * (created → in_progress → output_item.added → content_part.added → output_text.delta* →
 * output_text.done → content_part.done → output_item.done → [function_call items] →
 * completed | incomplete | failed), every event with an increasing `sequence_number`.
 *
 * Input items are normalised as they are parsed (each gets an id, string content becomes
 * `input_text` parts), which is how a stored response lists them (`stored_responses.ts`). An
 * `input_image` part travels as a `ChatMessage.parts` image.
 * @module
 */
import {
  type ChatMessage,
  type ContentPart,
  partsText,
  type RunEvent,
  type RunInput,
  type ToolCall,
  type Usage,
} from "../../../../shared/run.ts";
import type { FeatureFields } from "../capabilities.ts";
import type { RequestMeter } from "../http_metrics.ts";
import { checkImageUrl } from "../image_input.ts";
import { checkFields, type FieldPolicy, never, onlyAt } from "../field_policy.ts";
import { JsonFields, MAX_TOKENS_BOUNDS } from "../json_fields.ts";
import { errorOf, type RunAnswer, ToolCallAccumulator } from "../run_bridge.ts";
import {
  ACCOUNTING_FIELDS,
  choicesOf,
  metadataOf,
  outputFormatOf,
  type ParseOptions,
  parseToolChoice,
  parseTools,
} from "./chat.ts";

/** A parsed Responses request. */
export interface ResponsesRequest {
  model: string;
  stream: boolean;
  instructions: string | null;
  temperature: number | null;
  topP: number | null;
  maxOutputTokens: number | null;
  tools: unknown[];
  metadata: Record<string, string>;
  /** Echoed as the response's `text.format`, `tool_choice` and `parallel_tool_calls`. */
  echo: { textFormat: unknown; toolChoice: unknown; parallelToolCalls: boolean };
  input: Omit<RunInput, "adapter" | "target">;
  /** Whether the finished response is stored (`store`, default true). */
  store: boolean;
  /** The stored response this one continues (`previous_response_id`). */
  previousResponseId: string | null;
  /** The request's input items, normalised, as a stored response lists them. */
  inputItems: Record<string, unknown>[];
  /** How many leading run messages are the instructions (0 or 1); history goes after them. */
  instructionMessages: number;
  /** How many run messages after the instructions come from `previous_response_id`'s chain. */
  historyMessages: number;
}

/**
 * How the capability check names the fields of `req` it refuses: a tool result or an image of
 * the stored conversation is `previous_response_id`'s, one of this request `input`'s (tool
 * results are `function_call_output` input items).
 */
export function responsesFeatureFields(req: ResponsesRequest): FeatureFields {
  const first = req.instructionMessages;
  const fromHistory = (index: number) =>
    index >= first && index < first + req.historyMessages ? "previous_response_id" : "input";
  return {
    output_format: "text.format",
    tool_choice: "tool_choice",
    parallel_tool_calls: "parallel_tool_calls",
    tool_result: fromHistory,
    image: fromHistory,
    embed: "input",
    tools: "tools",
    truncate: "truncate",
    sampling: "input",
  };
}

const INPUT_ROLES = ["system", "developer", "user", "assistant"] as const;

/** One input item: the run message it becomes and its normalised form. */
export interface InputItem {
  message: ChatMessage;
  item: Record<string, unknown>;
}

const IMAGE_DETAILS = ["auto", "low", "high"] as const;

/** One part of a message item's content: a text or image run part and its normalised form. */
function parseContentPart(
  part: JsonFields,
  role: string,
  options: ParseOptions,
): { run: ContentPart; item: Record<string, unknown> } {
  const type = part.requiredString("type");
  if (type === "input_text" || type === "output_text" || type === "text") {
    const text = part.string("text") ?? "";
    const item = role === "assistant" || type === "output_text"
      ? { type: "output_text", text, annotations: part.array("annotations") ?? [] }
      : { type: "input_text", text };
    return { run: { type: "text", text }, item };
  }
  if (type === "input_image") {
    if (part.has("file_id")) part.fail("file_id", "is not supported; give the image as image_url");
    const checked = checkImageUrl(part.requiredString("image_url"), {
      allowLinks: options.allowImageLinks ?? false,
    });
    if ("problem" in checked) part.fail("image_url", checked.problem);
    const url = checked.url;
    const detail = part.string("detail");
    if (detail !== undefined && !(IMAGE_DETAILS as readonly string[]).includes(detail)) {
      part.fail("detail", `must be one of ${IMAGE_DETAILS.join(", ")}: got '${detail}'`);
    }
    return {
      run: { type: "image", url, ...(detail !== undefined ? { detail } : {}) },
      item: { type: "input_image", image_url: url, detail: detail ?? "auto", file_id: null },
    };
  }
  part.fail(
    "type",
    `'${type}' is not supported; only input_text, output_text and input_image parts are`,
  );
}

/** A `message` item: its content as text, or as parts when it holds an image. */
function parseMessageItem(item: JsonFields, id: string, options: ParseOptions): InputItem {
  const role = item.requiredString("role");
  if (!(INPUT_ROLES as readonly string[]).includes(role)) {
    item.fail("role", `must be one of ${INPUT_ROLES.join(", ")}: got '${role}'`);
  }
  const v = item.value.content;
  const parsed = v === undefined || v === null ? [] : typeof v === "string"
    ? [
      parseContentPart(
        new JsonFields({ type: "text", text: v }, item.at("content")),
        role,
        options,
      ),
    ]
    : item.objects("content").map((part) => parseContentPart(part, role, options));
  const runParts = parsed.map((p) => p.run);
  const message: ChatMessage = { role: role as ChatMessage["role"], content: "" };
  if (runParts.some((p) => p.type === "image")) {
    message.parts = runParts;
    message.content = partsText(runParts);
  } else {
    message.content = runParts.map((p) => p.type === "text" ? p.text : "").join("");
  }
  return {
    message,
    item: { id, type: "message", role, status: "completed", content: parsed.map((p) => p.item) },
  };
}

/** One input item (a message, a function call or a function call's output). */
export function parseInputItem(item: JsonFields, options: ParseOptions = {}): InputItem {
  const type = item.string("type") ?? "message";
  const id = item.string("id") || undefined;
  if (type === "function_call_output") {
    const callId = item.requiredString("call_id");
    const output = item.string("output") ?? "";
    return {
      message: { role: "tool", content: output, toolCallId: callId },
      item: {
        id: id ?? hexId("fco"),
        type,
        call_id: callId,
        output,
        status: "completed",
      },
    };
  }
  if (type === "function_call") {
    const call = {
      index: 0,
      id: item.requiredString("call_id"),
      name: item.requiredString("name"),
      arguments: item.string("arguments") ?? "",
    };
    return {
      message: { role: "assistant", content: "", toolCalls: [call] },
      item: {
        id: id ?? hexId("fc"),
        type,
        status: "completed",
        arguments: call.arguments,
        call_id: call.id,
        name: call.name,
      },
    };
  }
  if (type !== "message") item.fail("type", `'${type}' is not supported`);
  return parseMessageItem(item, id ?? hexId("msg"), options);
}

/**
 * The run messages of input items in order. A function call joins the assistant message before
 * it (the text the model said first, or the calls of the same turn), as Chat Completions
 * backends expect the calls of one turn in one assistant message.
 */
export function itemMessages(items: readonly InputItem[]): ChatMessage[] {
  const messages: ChatMessage[] = [];
  for (const { message } of items) {
    const last = messages.at(-1);
    if (message.toolCalls && last?.role === "assistant" && !last.parts) {
      const calls = last.toolCalls ??= [];
      for (const call of message.toolCalls) calls.push({ ...call, index: calls.length });
      continue;
    }
    messages.push(message.toolCalls ? { ...message, toolCalls: [...message.toolCalls] } : message);
  }
  return messages;
}

function parseInput(body: JsonFields, options: ParseOptions): InputItem[] {
  const v = body.value.input;
  if (v === undefined || v === null) body.fail("input", "is required");
  if (typeof v === "string") {
    return [parseInputItem(new JsonFields({ role: "user", content: v }, "input"), options)];
  }
  const items = body.objects("input");
  if (items.length === 0) body.fail("input", "must not be empty");
  return items.map((item) => parseInputItem(item, options));
}

/** Every field of a Responses request, and how it is treated. */
const RESPONSES_FIELDS: FieldPolicy = {
  ...ACCOUNTING_FIELDS,
  model: "carried",
  input: "carried",
  instructions: "carried",
  store: "carried",
  previous_response_id: "carried",
  temperature: "carried",
  top_p: "carried",
  max_output_tokens: "carried",
  metadata: "carried",
  stream: "carried",
  tools: "carried",
  tool_choice: "carried",
  text: "carried",
  parallel_tool_calls: "carried",
  // Only pads streamed deltas against side channels; the deltas carry the same text.
  stream_options: "inert",
  include: onlyAt("must be empty: no extra output data can be included", []),
  background: onlyAt("cannot be true: responses run in the foreground only", false),
  truncation: onlyAt("must be disabled: the Edge does not cut a conversation", "disabled"),
  top_logprobs: onlyAt("must be 0: no backend of this Edge reports log probabilities", 0),
  conversation: never("cannot be honoured: use previous_response_id to continue a conversation"),
  reasoning: never("cannot be honoured: reasoning settings are not carried to the backends"),
  max_tool_calls: never("cannot be honoured: the backends take no limit on tool calls"),
  prompt: never("cannot be honoured: this Edge keeps no prompt templates"),
};

/** The fields of `text`. */
const TEXT_FIELDS: FieldPolicy = {
  format: "carried",
  verbosity: onlyAt("must be medium: verbosity is not carried to the backends", "medium"),
};

/** Validates a Responses body; errors name the bad field. */
export function parseResponsesRequest(
  body: JsonFields,
  options: ParseOptions = {},
): ResponsesRequest {
  checkFields(body, RESPONSES_FIELDS, "/v1/responses");
  const text = body.object("text");
  if (text) checkFields(text, TEXT_FIELDS, "/v1/responses");
  const model = body.requiredString("model");
  const instructions = body.string("instructions") ?? null;
  const items = parseInput(body, options);
  const messages = itemMessages(items);
  if (instructions) messages.unshift({ role: "system", content: instructions });
  const store = body.boolean("store") ?? true;
  const previousResponseId = body.string("previous_response_id") ?? null;
  if (previousResponseId === "") body.fail("previous_response_id", "must not be empty");
  const sampling: RunInput["sampling"] = {};
  const temperature = body.number("temperature", { min: 0, max: 2 });
  if (temperature !== undefined) sampling.temperature = temperature;
  const topP = body.number("top_p", { min: 0, max: 1 });
  if (topP !== undefined) sampling.topP = topP;
  const maxOutput = body.number("max_output_tokens", MAX_TOKENS_BOUNDS);
  if (maxOutput !== undefined) sampling.maxTokens = maxOutput;
  const metadata = metadataOf(body, options);
  const stream = body.boolean("stream") ?? false;
  const tools = parseTools(body, false);
  const format = text?.object("format");
  const parallel = body.boolean("parallel_tool_calls");
  const choices = choicesOf(
    format && outputFormatOf(format, false),
    parseToolChoice(body, tools, false),
    parallel,
  );
  return {
    model,
    stream,
    instructions,
    temperature: temperature ?? null,
    topP: topP ?? null,
    maxOutputTokens: maxOutput ?? null,
    tools: body.array("tools") ?? [],
    metadata,
    echo: {
      textFormat: format?.value ?? { type: "text" },
      toolChoice: body.value.tool_choice ?? "auto",
      parallelToolCalls: parallel ?? true,
    },
    input: {
      messages,
      prompt: "",
      sampling,
      tools,
      sessionId: "",
      metadata,
      timeoutMs: 0,
      wholeAnswer: !stream,
      ...choices,
    },
    store,
    previousResponseId,
    inputItems: items.map((i) => i.item),
    instructionMessages: instructions ? 1 : 0,
    historyMessages: 0,
  };
}

/** A new id of an API object: `prefix_` and 32 hex digits. */
export function hexId(prefix: string): string {
  return `${prefix}_${crypto.randomUUID().replaceAll("-", "")}`;
}

type Status = "in_progress" | "completed" | "incomplete" | "failed" | "cancelled";

/**
 * What becomes of a finished `response` object before it is answered: stored when the request
 * asked (`stored_responses.ts`), answered with `store: false` when it was not. The identity
 * function when nothing is stored.
 */
export type KeepResponse = (response: Record<string, unknown>) => Record<string, unknown>;

const answerAsIs: KeepResponse = (response) => response;

/** Builds `response` objects that share one id and the request's echo fields. */
class ResponseShell {
  readonly id = hexId("resp");
  readonly createdAt = Math.floor(Date.now() / 1000);
  constructor(private readonly req: ResponsesRequest) {}

  build(
    status: Status,
    output: unknown[],
    extra: { usage?: Usage; error?: { code: string; message: string }; incomplete?: string } = {},
  ): Record<string, unknown> {
    const u = extra.usage;
    return {
      id: this.id,
      object: "response",
      created_at: this.createdAt,
      status,
      error: extra.error ?? null,
      incomplete_details: extra.incomplete ? { reason: extra.incomplete } : null,
      instructions: this.req.instructions,
      max_output_tokens: this.req.maxOutputTokens,
      model: this.req.model,
      output,
      parallel_tool_calls: this.req.echo.parallelToolCalls,
      previous_response_id: this.req.previousResponseId,
      reasoning: { effort: null, summary: null },
      store: this.req.store,
      temperature: this.req.temperature,
      text: { format: this.req.echo.textFormat },
      tool_choice: this.req.echo.toolChoice,
      tools: this.req.tools,
      top_p: this.req.topP,
      truncation: "disabled",
      usage: u
        ? {
          input_tokens: u.inputTokens,
          input_tokens_details: { cached_tokens: 0 },
          output_tokens: u.outputTokens,
          output_tokens_details: { reasoning_tokens: 0 },
          total_tokens: u.inputTokens + u.outputTokens,
        }
        : null,
      user: null,
      metadata: this.req.metadata,
    };
  }
}

function textPart(text: string) {
  return { type: "output_text", text, annotations: [], logprobs: [] };
}

function messageItem(
  id: string,
  status: "in_progress" | "completed" | "incomplete",
  content: unknown[],
) {
  return { id, type: "message", status, role: "assistant", content };
}

function functionItem(call: ToolCall, status: "in_progress" | "completed", args: string) {
  return {
    id: hexId("fc"),
    type: "function_call",
    status,
    arguments: args,
    call_id: call.id,
    name: call.name,
  };
}

/** The non-streaming `response` body, passed through `keep` (see {@linkcode KeepResponse}). */
export function responseObject(
  req: ResponsesRequest,
  answer: RunAnswer,
  keep: KeepResponse = answerAsIs,
): Record<string, unknown> {
  const shell = new ResponseShell(req);
  const output: unknown[] = [];
  if (answer.text !== "" || answer.toolCalls.length === 0) {
    output.push(messageItem(hexId("msg"), "completed", [textPart(answer.text)]));
  }
  for (const call of answer.toolCalls) output.push(functionItem(call, "completed", call.arguments));
  const incomplete = answer.finishReason === "length";
  return keep(shell.build(incomplete ? "incomplete" : "completed", output, {
    usage: answer.usage,
    ...(incomplete ? { incomplete: "max_output_tokens" } : {}),
  }));
}

/**
 * The SSE events of a streamed response, written to `out` as the run's events are passed in
 * with `next(event)`; the generator returns after the event that ends the response, whose
 * `response` went through `keep` first.
 */
export function* responseEvents(
  req: ResponsesRequest,
  meter: RequestMeter,
  out: (text: string) => void,
  keep: KeepResponse = answerAsIs,
): Generator<void, void, RunEvent> {
  const shell = new ResponseShell(req);
  let seq = 0;
  const emit = (type: string, data: Record<string, unknown>) =>
    out(`event: ${type}\ndata: ${JSON.stringify({ type, ...data, sequence_number: seq++ })}\n\n`);
  emit("response.created", { response: shell.build("in_progress", []) });
  emit("response.in_progress", { response: shell.build("in_progress", []) });

  const output: unknown[] = [];
  const msgId = hexId("msg");
  let text = "";
  let opened = false;
  const tools = new ToolCallAccumulator();
  let usage: Usage = { inputTokens: 0, outputTokens: 0 };
  const open = () => {
    if (opened) return;
    opened = true;
    emit("response.output_item.added", {
      output_index: 0,
      item: messageItem(msgId, "in_progress", []),
    });
    emit("response.content_part.added", {
      item_id: msgId,
      output_index: 0,
      content_index: 0,
      part: textPart(""),
    });
  };
  const close = () => {
    if (!opened) return;
    emit("response.output_text.done", {
      item_id: msgId,
      output_index: 0,
      content_index: 0,
      text,
      logprobs: [],
    });
    emit("response.content_part.done", {
      item_id: msgId,
      output_index: 0,
      content_index: 0,
      part: textPart(text),
    });
    const item = messageItem(msgId, "completed", [textPart(text)]);
    output.push(item);
    emit("response.output_item.done", { output_index: 0, item });
  };

  while (true) {
    const event = yield;
    switch (event.type) {
      case "usage":
        usage = event.usage;
        break;
      case "output":
        if (event.text === "") break;
        meter.firstToken();
        open();
        text += event.text;
        emit("response.output_text.delta", {
          item_id: msgId,
          output_index: 0,
          content_index: 0,
          delta: event.text,
          logprobs: [],
        });
        break;
      case "tool_call":
        meter.firstToken();
        tools.add(event.call);
        break;
      case "completed": {
        const calls = tools.calls();
        if (calls.length === 0) open();
        close();
        for (const call of calls) {
          const index = output.length;
          const added = functionItem(call, "in_progress", "");
          emit("response.output_item.added", { output_index: index, item: added });
          emit("response.function_call_arguments.delta", {
            item_id: added.id,
            output_index: index,
            delta: call.arguments,
          });
          emit("response.function_call_arguments.done", {
            item_id: added.id,
            output_index: index,
            name: call.name,
            arguments: call.arguments,
          });
          const done = { ...added, status: "completed", arguments: call.arguments };
          output.push(done);
          emit("response.output_item.done", { output_index: index, item: done });
        }
        const final = event.usage ?? usage;
        meter.usage(final.inputTokens, final.outputTokens);
        if (event.finishReason === "length" && calls.length === 0) {
          emit("response.incomplete", {
            response: keep(shell.build("incomplete", output, {
              usage: final,
              incomplete: "max_output_tokens",
            })),
          });
        } else {
          emit("response.completed", {
            response: keep(shell.build("completed", output, { usage: final })),
          });
        }
        return;
      }
      case "failed":
      case "cancelled": {
        // What was said before the failure stays in the (stored) output, marked incomplete.
        if (opened) output.unshift(messageItem(msgId, "incomplete", [textPart(text)]));
        const err = errorOf(event)!;
        const error = {
          code: err.code === "OVERLOADED" ? "rate_limit_exceeded" : "server_error",
          message: err.message,
        };
        // The stream has no event of its own for a cancelled response: it ends as failed.
        const response = shell.build(
          event.type === "cancelled" ? "cancelled" : "failed",
          output,
          { error },
        );
        emit("response.failed", { response: keep(response) });
        return;
      }
    }
  }
}
