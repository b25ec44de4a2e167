/**
 * Domain types of a run that both the Edge and the Node speak: messages, tools, sampling,
 * usage, and the events a run emits. Types only; `run_codec.ts` converts them to the wire.
 * @module
 */

/** One conversation turn. */
export interface ChatMessage {
  role: "system" | "developer" | "user" | "assistant" | "tool";
  /** The text; with `parts`, their text parts joined by newlines (for text-only adapters). */
  content: string;
  toolCallId?: string;
  toolCalls?: ToolCall[];
  name?: string;
  /** The content in order when it holds more than text (images); absent = text only. */
  parts?: ContentPart[];
}

/**
 * One piece of a message's content: text, or an image as a `data:` URL (base64) or an
 * http(s) URL, with OpenAI's `detail` when the client gave one.
 */
export type ContentPart =
  | { type: "text"; text: string }
  | { type: "image"; url: string; detail?: string };

/** The text of `parts` as a text-only adapter reads it: the text parts joined by newlines. */
export function partsText(parts: readonly ContentPart[]): string {
  return parts.flatMap((p) => p.type === "text" ? [p.text] : []).join("\n");
}

/** What an embedding run embeds (OpenAI `/v1/embeddings`, Ollama `/api/embed`). */
export interface EmbedInput {
  inputs: string[];
  /** Vector length asked for (OpenAI's `dimensions`); absent = the model's own. */
  dimensions?: number;
  /** Cut an input longer than the context instead of failing; absent = the backend's default. */
  truncate?: boolean;
}

/** A function the model may call; `parameters` is a JSON Schema object. */
export interface ToolDefinition {
  name: string;
  description: string;
  parameters: Record<string, unknown>;
}

/** A model's call of a tool; in a streamed delta, `arguments` is a piece of JSON text. */
export interface ToolCall {
  index: number;
  id: string;
  name: string;
  arguments: string;
}

/** Generation parameters; absent fields take the backend's default. */
export interface Sampling {
  temperature?: number;
  topP?: number;
  maxTokens?: number;
  stop?: string[];
  seed?: number;
  /** Backend-specific extras (e.g. `top_k`), passed through into the request body. */
  extra?: Record<string, unknown>;
}

/**
 * A constraint on the answer's text the backend must enforce (OpenAI's `response_format`,
 * the Responses API's `text.format`, Ollama's `format`); absent on a run = free text.
 */
export type OutputFormat =
  | { type: "json_object" }
  | {
    type: "json_schema";
    /** OpenAI requires one; surfaces without it (Ollama) use "response". */
    name: string;
    description?: string;
    /** The JSON Schema; absent = any JSON the name and description describe. */
    schema?: Record<string, unknown>;
    /** OpenAI's strict adherence; absent = the backend's default. */
    strict?: boolean;
  };

/**
 * Which tools the model may or must call: it decides (`auto`), calls none, calls at least one
 * (`required`), or calls the function named; absent on a run = the backend's default.
 */
export type ToolChoice = "auto" | "none" | "required" | { function: string };

/** Token counts of one run. */
export interface Usage {
  inputTokens: number;
  outputTokens: number;
}

/** Why a run finished normally. */
export type FinishReason = "stop" | "length" | "tool_calls";

/** The input of a run, the same on both sides of the Edge↔Node link. */
export interface RunInput {
  /** Adapter instance name (e.g. "mock", "cli", "ollama"). */
  adapter: string;
  /** Model name, CLI profile or agent inside the adapter. */
  target: string;
  messages: ChatMessage[];
  /** Prompt-only input; adapters fall back to the last user message when empty. */
  prompt: string;
  sampling: Sampling;
  tools: ToolDefinition[];
  /**
   * The CLI or agent session of the run; empty means none. Whether the run starts it or
   * continues it is {@linkcode SESSION_STATE_KEY} in `metadata` (absent: continues).
   */
  sessionId: string;
  metadata: Record<string, string>;
  /** 0 means the adapter's own limit. */
  timeoutMs: number;
  /**
   * The client reads only the whole answer (a non-streaming API call), so a model adapter may
   * ask its backend for it in one piece; absent or false streams deltas as they come.
   */
  wholeAnswer?: boolean;
  /** How the answer must be shaped; absent = free text. */
  outputFormat?: OutputFormat;
  /** Which tools the model may or must call; absent = the backend's default. */
  toolChoice?: ToolChoice;
  /** Whether the model may call several tools in one turn; absent = the backend's default. */
  parallelToolCalls?: boolean;
  /**
   * W3C `traceparent` of the run's parent span (`trace_context.ts`): the request's on the Edge
   * before dispatch, the Edge's dispatch span on the wire, the Node's run span in an adapter.
   * Absent = no trace context (the Edge starts one at dispatch).
   */
  traceParent?: string;
  /** W3C `tracestate` that travels with `traceParent`. */
  traceState?: string;
  /**
   * Present: the run embeds these inputs instead of generating text; it answers one
   * `embedding` event per input, in input order, then `completed` with the input token count.
   */
  embed?: EmbedInput;
}

/**
 * Run metadata key the Edge sets on a run with a session: `new` when the run starts session
 * `sessionId` (a CLI profile's `args`, with `{session}` filled), `resume` when it continues it
 * (its `resume_args`). Absent — an Edge that predates it — means a non-empty `sessionId`
 * continues a session.
 */
export const SESSION_STATE_KEY = "iop.session";

/** One step of a run's life as seen above the Node; `seq` increases from 1. */
export type RunEvent =
  & { runId: string; seq: number; timestampMs: number }
  & (
    | { type: "started"; nodeId: string; adapter: string; target: string }
    | { type: "output"; text: string }
    | { type: "tool_call"; call: ToolCall }
    | { type: "log"; stream: string; text: string }
    | { type: "usage"; usage: Usage }
    | { type: "embedding"; index: number; values: number[] }
    | { type: "completed"; finishReason: FinishReason; usage?: Usage; exitCode: number }
    | {
      type: "failed";
      code: string;
      message: string;
      retryable: boolean;
      exitCode: number;
      /** When to try again, set by an Edge's own refusal (a pool queue full); never on the wire. */
      retryAfterSeconds?: number;
    }
    | { type: "cancelled"; reason: string }
  );

/** The events that end a run. */
export type TerminalRunEvent = Extract<RunEvent, { type: "completed" | "failed" | "cancelled" }>;

/** True for completed, failed and cancelled events. */
export function isTerminal(event: RunEvent): event is TerminalRunEvent {
  return event.type === "completed" || event.type === "failed" || event.type === "cancelled";
}

/** A run input with every field at its empty default, overridden by `partial`. */
export function runInput(
  partial: Partial<RunInput> & Pick<RunInput, "adapter" | "target">,
): RunInput {
  return {
    messages: [],
    prompt: "",
    sampling: {},
    tools: [],
    sessionId: "",
    metadata: {},
    timeoutMs: 0,
    ...partial,
  };
}
