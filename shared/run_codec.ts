/**
 * Conversion between the run domain types (`run.ts`) and their wire messages, used by the
 * transports of both the Edge and the Node and by nothing else.
 * @module
 */
import { create } from "@bufbuild/protobuf";
import {
  type Error as WireError,
  ErrorSchema,
  UsageSchema,
} from "../proto/gen/iop/v1/common_pb.ts";
import {
  type ChatMessage as WireChatMessage,
  ChatMessageSchema,
  type ContentPart as WireContentPart,
  ContentPartSchema,
  type EmbedRequest as WireEmbedRequest,
  EmbedRequestSchema,
  type OutputFormat as WireOutputFormat,
  OutputFormatSchema,
  type RunEvent as WireRunEvent,
  RunEventSchema,
  type RunRequest,
  RunRequestSchema,
  type SamplingOptions,
  SamplingOptionsSchema,
  type ToolCall as WireToolCall,
  ToolCallSchema,
  type ToolChoice as WireToolChoice,
  ToolChoiceMode,
  ToolChoiceSchema,
  ToolDefinitionSchema,
} from "../proto/gen/iop/v1/node_pb.ts";
import { IopError, isErrorCode } from "./errors.ts";
import { cleanTracestate, parseTraceparent } from "./trace_context.ts";
import type {
  ChatMessage,
  ContentPart,
  EmbedInput,
  FinishReason,
  OutputFormat,
  RunEvent,
  RunInput,
  Sampling,
  ToolCall,
  ToolChoice,
  Usage,
} from "./run.ts";

const ROLES = new Set(["system", "developer", "user", "assistant", "tool"]);
const FINISH = new Set(["stop", "length", "tool_calls"]);

/** Domain run input → wire RunRequest. */
export function toRunRequest(runId: string, input: RunInput): RunRequest {
  return create(RunRequestSchema, {
    runId,
    adapter: input.adapter,
    target: input.target,
    messages: input.messages.map(toWireMessage),
    prompt: input.prompt,
    sampling: toWireSampling(input.sampling),
    tools: input.tools.map((t) =>
      create(ToolDefinitionSchema, {
        name: t.name,
        description: t.description,
        parametersJson: JSON.stringify(t.parameters),
      })
    ),
    sessionId: input.sessionId,
    metadata: input.metadata,
    timeoutMs: input.timeoutMs,
    wholeAnswer: input.wholeAnswer ?? false,
    ...(input.outputFormat ? { outputFormat: toWireOutputFormat(input.outputFormat) } : {}),
    ...(input.toolChoice ? { toolChoice: toWireToolChoice(input.toolChoice) } : {}),
    ...(input.parallelToolCalls !== undefined
      ? { parallelToolCalls: input.parallelToolCalls }
      : {}),
    traceParent: input.traceParent ?? "",
    traceState: input.traceState ?? "",
    ...(input.embed ? { embed: toWireEmbed(input.embed) } : {}),
  });
}

/** Wire RunRequest → domain run input; throws INVALID_ARGUMENT on a malformed request. */
export function fromRunRequest(req: RunRequest): RunInput {
  if (!req.runId || !req.adapter) {
    throw new IopError("INVALID_ARGUMENT", "Cannot run as run_id and adapter are required");
  }
  return {
    adapter: req.adapter,
    target: req.target,
    messages: req.messages.map(fromWireMessage),
    prompt: req.prompt,
    sampling: fromWireSampling(req.sampling),
    tools: req.tools.map((t) => ({
      name: t.name,
      description: t.description,
      parameters: parseObject(t.parametersJson, `tool '${t.name}' parameters`),
    })),
    sessionId: req.sessionId,
    metadata: { ...req.metadata },
    timeoutMs: req.timeoutMs,
    ...(req.wholeAnswer ? { wholeAnswer: true } : {}),
    ...outputFormatField(req.outputFormat),
    ...toolChoiceField(req.toolChoice),
    ...(req.parallelToolCalls !== undefined ? { parallelToolCalls: req.parallelToolCalls } : {}),
    ...traceFields(req.traceParent, req.traceState),
    ...(req.embed ? { embed: fromWireEmbed(req.embed) } : {}),
  };
}

function toWireEmbed(e: EmbedInput): WireEmbedRequest {
  return create(EmbedRequestSchema, {
    inputs: e.inputs,
    dimensions: e.dimensions ?? 0,
    ...(e.truncate !== undefined ? { truncate: e.truncate } : {}),
  });
}

function fromWireEmbed(e: WireEmbedRequest): EmbedInput {
  if (e.inputs.length === 0) {
    throw new IopError("INVALID_ARGUMENT", "Cannot embed as the embed request has no input");
  }
  return {
    inputs: e.inputs,
    ...(e.dimensions ? { dimensions: e.dimensions } : {}),
    ...(e.truncate !== undefined ? { truncate: e.truncate } : {}),
  };
}

/** The trace context of a wire run: a malformed `trace_parent` is dropped with its state. */
function traceFields(parent: string, state: string): Pick<RunInput, "traceParent" | "traceState"> {
  if (!parseTraceparent(parent)) return {};
  const cleaned = cleanTracestate(state);
  return cleaned ? { traceParent: parent, traceState: cleaned } : { traceParent: parent };
}

function toWireOutputFormat(f: OutputFormat): WireOutputFormat {
  switch (f.type) {
    case "json_object":
      return create(OutputFormatSchema, { format: { case: "jsonObject", value: {} } });
    case "json_schema":
      return create(OutputFormatSchema, {
        format: {
          case: "jsonSchema",
          value: {
            name: f.name,
            description: f.description ?? "",
            schemaJson: f.schema ? JSON.stringify(f.schema) : "",
            ...(f.strict !== undefined ? { strict: f.strict } : {}),
          },
        },
      });
  }
}

/**
 * The run's output format; a format of a case this build does not know is refused rather
 * than dropped, since a client relies on the answer's shape.
 */
function outputFormatField(f: WireOutputFormat | undefined): Pick<RunInput, "outputFormat"> {
  if (!f) return {};
  const v = f.format;
  switch (v.case) {
    case "jsonObject":
      return { outputFormat: { type: "json_object" } };
    case "jsonSchema": {
      const out: OutputFormat = { type: "json_schema", name: v.value.name };
      if (v.value.description) out.description = v.value.description;
      if (v.value.schemaJson) {
        out.schema = parseObject(v.value.schemaJson, "output format schema");
      }
      if (v.value.strict !== undefined) out.strict = v.value.strict;
      return { outputFormat: out };
    }
    case undefined:
      throw new IopError("INVALID_ARGUMENT", "Cannot run as the output format has no known kind");
  }
}

const MODES = {
  auto: ToolChoiceMode.AUTO,
  none: ToolChoiceMode.NONE,
  required: ToolChoiceMode.REQUIRED,
} as const;

function toWireToolChoice(c: ToolChoice): WireToolChoice {
  return create(ToolChoiceSchema, {
    choice: typeof c === "string"
      ? { case: "mode", value: MODES[c] }
      : { case: "functionName", value: c.function },
  });
}

/** The run's tool choice; like the output format, an unknown one is refused, not dropped. */
function toolChoiceField(c: WireToolChoice | undefined): Pick<RunInput, "toolChoice"> {
  if (!c) return {};
  const v = c.choice;
  const unknown = () =>
    new IopError("INVALID_ARGUMENT", "Cannot run as the tool choice has no known value");
  switch (v.case) {
    case "mode":
      switch (v.value) {
        case ToolChoiceMode.AUTO:
          return { toolChoice: "auto" };
        case ToolChoiceMode.NONE:
          return { toolChoice: "none" };
        case ToolChoiceMode.REQUIRED:
          return { toolChoice: "required" };
        default:
          throw unknown();
      }
    case "functionName":
      if (v.value === "") throw unknown();
      return { toolChoice: { function: v.value } };
    case undefined:
      throw unknown();
  }
}

function toWireMessage(m: ChatMessage): WireChatMessage {
  return create(ChatMessageSchema, {
    role: m.role,
    content: m.content,
    toolCallId: m.toolCallId ?? "",
    toolCalls: (m.toolCalls ?? []).map(toWireToolCall),
    name: m.name ?? "",
    parts: (m.parts ?? []).map(toWirePart),
  });
}

function toWirePart(p: ContentPart): WireContentPart {
  return create(ContentPartSchema, {
    part: p.type === "text"
      ? { case: "text", value: p.text }
      : { case: "image", value: { url: p.url, detail: p.detail ?? "" } },
  });
}

function fromWirePart(p: WireContentPart): ContentPart {
  switch (p.part.case) {
    case "text":
      return { type: "text", text: p.part.value };
    case "image": {
      const { url, detail } = p.part.value;
      if (!url) throw new IopError("INVALID_ARGUMENT", "Cannot accept an image part without url");
      return detail ? { type: "image", url, detail } : { type: "image", url };
    }
    default:
      throw new IopError("INVALID_ARGUMENT", "Cannot accept an empty content part");
  }
}

function fromWireMessage(m: WireChatMessage): ChatMessage {
  if (!ROLES.has(m.role)) {
    throw new IopError("INVALID_ARGUMENT", `Cannot accept message role '${m.role}'`);
  }
  const out: ChatMessage = { role: m.role as ChatMessage["role"], content: m.content };
  if (m.toolCallId) out.toolCallId = m.toolCallId;
  if (m.toolCalls.length) out.toolCalls = m.toolCalls.map(fromWireToolCall);
  if (m.name) out.name = m.name;
  if (m.parts.length) out.parts = m.parts.map(fromWirePart);
  return out;
}

/** Domain tool call → wire. */
export function toWireToolCall(c: ToolCall): WireToolCall {
  return create(ToolCallSchema, c);
}

/** Wire tool call → domain. */
export function fromWireToolCall(c: WireToolCall): ToolCall {
  return { index: c.index, id: c.id, name: c.name, arguments: c.arguments };
}

/** The largest value a proto `uint32` field carries. */
export const UINT32_MAX = 4_294_967_295;

/**
 * Refuses sampling values the wire types cannot carry (`uint32 max_tokens`, `int64 seed`,
 * finite doubles) as INVALID_ARGUMENT, not retryable: the HTTP surfaces check these when they
 * parse a request, this keeps any other caller from failing later as an encoding error.
 */
function checkSamplingBounds(s: Sampling): void {
  const fail = (field: string, value: number, rule: string) => {
    throw new IopError(
      "INVALID_ARGUMENT",
      `Cannot send the run as '${field}' must be ${rule}: current value is ${value}`,
    );
  };
  if (s.maxTokens !== undefined && !(Number.isInteger(s.maxTokens) && s.maxTokens >= 0)) {
    fail("max_tokens", s.maxTokens, "a whole number of at least 0");
  }
  if (s.maxTokens !== undefined && s.maxTokens > UINT32_MAX) {
    fail("max_tokens", s.maxTokens, `at most ${UINT32_MAX}`);
  }
  if (s.seed !== undefined && !Number.isSafeInteger(s.seed)) {
    fail("seed", s.seed, `a whole number within ±${Number.MAX_SAFE_INTEGER}`);
  }
  if (s.temperature !== undefined && !Number.isFinite(s.temperature)) {
    fail("temperature", s.temperature, "a finite number");
  }
  if (s.topP !== undefined && !Number.isFinite(s.topP)) fail("top_p", s.topP, "a finite number");
}

function toWireSampling(s: Sampling): SamplingOptions {
  checkSamplingBounds(s);
  const out = create(SamplingOptionsSchema, { stop: s.stop ?? [] });
  if (s.temperature !== undefined) out.temperature = s.temperature;
  if (s.topP !== undefined) out.topP = s.topP;
  if (s.maxTokens !== undefined) out.maxTokens = s.maxTokens;
  if (s.seed !== undefined) out.seed = BigInt(s.seed);
  if (s.extra) out.extraJson = JSON.stringify(s.extra);
  return out;
}

function fromWireSampling(s: SamplingOptions | undefined): Sampling {
  const out: Sampling = {};
  if (!s) return out;
  if (s.temperature !== undefined) out.temperature = s.temperature;
  if (s.topP !== undefined) out.topP = s.topP;
  if (s.maxTokens !== undefined) out.maxTokens = s.maxTokens;
  if (s.stop.length) out.stop = [...s.stop];
  if (s.seed !== undefined) out.seed = Number(s.seed);
  if (s.extraJson) out.extra = parseObject(s.extraJson, "sampling extra");
  return out;
}

function parseObject(json: string, what: string): Record<string, unknown> {
  if (!json) return {};
  try {
    const v = JSON.parse(json);
    if (typeof v === "object" && v !== null && !Array.isArray(v)) return v;
  } catch {
    // Reported below.
  }
  throw new IopError("INVALID_ARGUMENT", `Cannot parse ${what} as a JSON object`);
}

/** Domain usage → wire. */
export function toWireUsage(u: Usage) {
  return create(UsageSchema, u);
}

/** Domain error → wire. */
export function toWireError(err: IopError): WireError {
  return create(ErrorSchema, { code: err.code, message: err.message, retryable: err.retryable });
}

/** Wire error → domain; unknown codes become INTERNAL, keeping the message. */
export function fromWireError(err: WireError | undefined): IopError {
  if (!err) return new IopError("INTERNAL", "Peer reported a failure without details");
  const code = isErrorCode(err.code) ? err.code : "INTERNAL";
  return new IopError(code, err.message, { retryable: err.retryable });
}

/** Domain run event → wire. */
export function toWireRunEvent(e: RunEvent): WireRunEvent {
  const base = { runId: e.runId, seq: BigInt(e.seq), timestampMs: BigInt(e.timestampMs) };
  switch (e.type) {
    case "started":
      return create(RunEventSchema, {
        ...base,
        event: {
          case: "started",
          value: { nodeId: e.nodeId, adapter: e.adapter, target: e.target },
        },
      });
    case "output":
      // The one event a stream sends by the thousand: written out as `create` would build it
      // (every field set, nothing else), at a fifth of its cost.
      return {
        $typeName: "iop.v1.RunEvent",
        ...base,
        event: { case: "output", value: { $typeName: "iop.v1.OutputDelta", text: e.text } },
      };
    case "tool_call":
      return create(RunEventSchema, {
        ...base,
        event: { case: "toolCall", value: { call: toWireToolCall(e.call) } },
      });
    case "log":
      return create(RunEventSchema, {
        ...base,
        event: { case: "log", value: { stream: e.stream, text: e.text } },
      });
    case "usage":
      return create(RunEventSchema, { ...base, event: { case: "usage", value: e.usage } });
    case "completed":
      return create(RunEventSchema, {
        ...base,
        event: {
          case: "completed",
          value: {
            finishReason: e.finishReason,
            exitCode: e.exitCode,
            ...(e.usage ? { usage: e.usage } : {}),
          },
        },
      });
    case "failed":
      return create(RunEventSchema, {
        ...base,
        event: {
          case: "failed",
          value: {
            error: { code: e.code, message: e.message, retryable: e.retryable },
            exitCode: e.exitCode,
          },
        },
      });
    case "cancelled":
      return create(RunEventSchema, {
        ...base,
        event: { case: "cancelled", value: { reason: e.reason } },
      });
    case "embedding":
      return create(RunEventSchema, {
        ...base,
        event: { case: "embedding", value: { index: e.index, values: e.values } },
      });
  }
}

/** Wire run event → domain; undefined for an event with no known case. */
export function fromWireRunEvent(w: WireRunEvent): RunEvent | undefined {
  const base = { runId: w.runId, seq: Number(w.seq), timestampMs: Number(w.timestampMs) };
  const ev = w.event;
  switch (ev.case) {
    case "started":
      return { ...base, type: "started", ...pick(ev.value, ["nodeId", "adapter", "target"]) };
    case "output":
      return { ...base, type: "output", text: ev.value.text };
    case "toolCall":
      return ev.value.call
        ? { ...base, type: "tool_call", call: fromWireToolCall(ev.value.call) }
        : undefined;
    case "log":
      return { ...base, type: "log", stream: ev.value.stream, text: ev.value.text };
    case "usage":
      return {
        ...base,
        type: "usage",
        usage: { inputTokens: ev.value.inputTokens, outputTokens: ev.value.outputTokens },
      };
    case "completed": {
      const finish = FINISH.has(ev.value.finishReason) ? ev.value.finishReason : "stop";
      const u = ev.value.usage;
      return {
        ...base,
        type: "completed",
        finishReason: finish as FinishReason,
        exitCode: ev.value.exitCode,
        ...(u ? { usage: { inputTokens: u.inputTokens, outputTokens: u.outputTokens } } : {}),
      };
    }
    case "failed": {
      const err = fromWireError(ev.value.error);
      return {
        ...base,
        type: "failed",
        code: err.code,
        message: err.message,
        retryable: err.retryable,
        exitCode: ev.value.exitCode,
      };
    }
    case "cancelled":
      return { ...base, type: "cancelled", reason: ev.value.reason };
    case "embedding":
      return { ...base, type: "embedding", index: ev.value.index, values: ev.value.values };
    case undefined:
      return undefined;
  }
}

function pick<T, K extends keyof T>(obj: T, keys: K[]): Pick<T, K> {
  const out = {} as Pick<T, K>;
  for (const k of keys) out[k] = obj[k];
  return out;
}
