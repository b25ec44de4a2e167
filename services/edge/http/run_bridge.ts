/**
 * What every public surface does with a request once it is parsed: submit it as a run through
 * the service layer (tied to the client's connection), hold back the response until the run
 * produced its first output or failed (so an early failure still gets a proper HTTP status),
 * and fold the run's events into an answer. Also maps IopError codes to HTTP statuses.
 * @module
 */
import { type ErrorCode, IopError, isErrorCode } from "../../../shared/errors.ts";
import { type BatchStream, itemsWithPause, prepended } from "../../../shared/async_queue.ts";
import type { FinishReason, RunEvent, ToolCall, Usage } from "../../../shared/run.ts";
import type { RunHandle, RunSubmission } from "../ports.ts";
import type { EdgeService } from "../service.ts";

/** The HTTP status of an error code. */
export function httpStatusOf(code: string): number {
  switch (code) {
    case "INVALID_ARGUMENT":
      return 400;
    case "UNAUTHENTICATED":
      return 401;
    case "NOT_FOUND":
      return 404;
    case "OVERLOADED":
      return 429;
    case "CANCELLED":
      return 499;
    case "UNAVAILABLE":
    case "NODE_LOST":
      return 503;
    case "TIMEOUT":
      return 504;
    default:
      return 500;
  }
}

/** A started run whose first events were already read. */
export interface StartedRun {
  handle: RunHandle;
  /** Every event of the run in order, including those read while starting. */
  events: BatchStream<RunEvent>;
}

/**
 * Submits the run and waits for its first output (or tool call). Throws the run's error when
 * it fails before that, so the caller can still answer with an error status. The run is
 * cancelled when `signal` aborts.
 */
export async function startRun(
  service: EdgeService,
  submission: RunSubmission,
  signal: AbortSignal,
): Promise<StartedRun> {
  const handle = await service.submitRun(submission, { signal });
  const events = handle.events();
  const head: RunEvent[] = [];
  let answering = false;
  while (!answering) {
    const batch = await events.nextBatch();
    if (batch === undefined) break;
    for (const event of batch) {
      // A failure after the answer began belongs to the answer (its stream ends with it).
      const failure = answering ? undefined : errorOf(event);
      if (failure) throw failure;
      head.push(event);
      answering ||= event.type === "output" || event.type === "tool_call" ||
        event.type === "completed";
    }
  }
  return { handle, events: prepended(head, events) };
}

function toCode(code: string): ErrorCode {
  return isErrorCode(code) ? code : "INTERNAL";
}

/** Turns a failed or cancelled terminal event into the error a surface reports. */
export function errorOf(event: RunEvent): IopError | undefined {
  if (event.type === "failed") {
    return new IopError(toCode(event.code), event.message, { retryable: event.retryable });
  }
  if (event.type === "cancelled") {
    return new IopError("CANCELLED", `The run was cancelled: ${event.reason}`);
  }
  return undefined;
}

/** Joins streamed tool-call pieces by index: id and name from the first piece, text appended. */
export class ToolCallAccumulator {
  readonly #calls = new Map<number, ToolCall>();

  /** Adds one piece. */
  add(piece: ToolCall): void {
    const call = this.#calls.get(piece.index);
    if (!call) {
      this.#calls.set(piece.index, { ...piece });
      return;
    }
    if (piece.id && !call.id) call.id = piece.id;
    if (piece.name && !call.name) call.name = piece.name;
    call.arguments += piece.arguments;
  }

  /** The whole calls in index order, with generated ids where the backend gave none. */
  calls(): ToolCall[] {
    return [...this.#calls.values()].sort((a, b) => a.index - b.index).map((c) => ({
      ...c,
      id: c.id || `call_${crypto.randomUUID().replaceAll("-", "").slice(0, 24)}`,
    }));
  }
}

/** A finished run folded into one answer. */
export interface RunAnswer {
  text: string;
  toolCalls: ToolCall[];
  finishReason: FinishReason;
  usage: Usage;
}

/** Reads the run to its end; throws the run's error when it failed or was cancelled. */
export async function collectAnswer(events: AsyncIterable<RunEvent>): Promise<RunAnswer> {
  let text = "";
  const tools = new ToolCallAccumulator();
  let usage: Usage = { inputTokens: 0, outputTokens: 0 };
  for await (const event of events) {
    switch (event.type) {
      case "output":
        text += event.text;
        break;
      case "tool_call":
        tools.add(event.call);
        break;
      case "usage":
        usage = event.usage;
        break;
      case "completed": {
        const toolCalls = tools.calls();
        return {
          text,
          toolCalls,
          finishReason: toolCalls.length > 0 ? "tool_calls" : event.finishReason,
          usage: event.usage ?? usage,
        };
      }
      case "failed":
      case "cancelled":
        throw errorOf(event)!;
    }
  }
  throw new IopError("INTERNAL", "The run ended without a terminal event");
}

/**
 * A response body streamed from the texts `produce` makes of the run's events. Everything made
 * of one batch of events (what arrived together) leaves as one chunk, so a burst of deltas
 * costs one write, not one per delta. The producer is advanced only while the body's reader
 * wants more (backpressure); when the client goes away the run is cancelled. `onEnd` runs once
 * either way.
 */
export function streamBody(
  events: BatchStream<RunEvent>,
  produce: (events: AsyncIterable<RunEvent>) => AsyncGenerator<string>,
  handle: RunHandle,
  onEnd: () => void,
): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  let controller: ReadableStreamDefaultController<Uint8Array> | undefined;
  let pending = "";
  let ended = false;
  let flushed = false;
  const flush = () => {
    if (pending === "" || ended) return;
    controller?.enqueue(encoder.encode(pending));
    pending = "";
    flushed = true;
  };
  const end = () => {
    if (ended) return;
    ended = true;
    onEnd();
  };
  const chunks = produce(itemsWithPause(events, flush));
  return new ReadableStream<Uint8Array>({
    start(c) {
      controller = c;
    },
    async pull(c) {
      // A pull that enqueues nothing is not called again, so advance until a batch was flushed.
      flushed = false;
      try {
        while (!flushed) {
          const next = await chunks.next();
          if (!next.done) {
            pending += next.value;
            continue;
          }
          flush();
          end();
          c.close();
          return;
        }
      } catch (err) {
        end();
        c.error(err);
      }
    },
    cancel() {
      handle.cancel("client went away");
      end();
      void chunks.return(undefined);
    },
  });
}
