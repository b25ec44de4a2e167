/**
 * What every public surface does with a request once it is parsed: submit it as a run through
 * the service layer (tied to the client's connection), hold back the response until the run
 * produced its first output or failed (so an early failure still gets a proper HTTP status),
 * and fold the run's events into an answer.
 * @module
 */
import { type IdleTicker, idleTicker } from "./idle_ticker.ts";
import { type ErrorCode, IopError, isErrorCode, OverloadedError } from "../../../shared/errors.ts";
import { AsyncQueue } from "../../../shared/async_queue.ts";
import {
  type FinishReason,
  isTerminal,
  type RunEvent,
  type ToolCall,
  type Usage,
} from "../../../shared/run.ts";
import type { RunGateway, RunHandle, RunSubmission } from "../ports.ts";
import { holdLease } from "../tenants/limiter.ts";
import type { TenantRecord } from "../tenants/tenant.ts";

/**
 * Retry-After of a run refused as overloaded by its node (its own profile or run limits), which
 * says nothing of when to come back; the Edge's own refusals carry their estimate.
 */
const NODE_RETRY_AFTER_S = 1;

/**
 * Bytes a streamed body holds that its client has not read before its run is told the reader
 * is paused (so the node stops producing once its window is used up).
 */
export const STREAM_HIGH_WATER_BYTES = 64 * 1024;

/**
 * The events of a started run: buffered (and readable one by one, for a whole answer) until a
 * streaming body subscribes, then handed to it as they arrive; knows when the answer began.
 */
export class RunTap extends AsyncQueue<RunEvent> {
  readonly #answering = Promise.withResolvers<void>();
  #started = false;

  /**
   * Resolves at the first output, tool call, embedding or completion; rejects if the run failed
   * first.
   */
  get answering(): Promise<void> {
    return this.#answering.promise;
  }

  override push(event: RunEvent): void {
    if (!this.#started) {
      const failure = errorOf(event);
      if (failure) {
        this.#answering.reject(failure);
        return;
      }
      const type = event.type;
      if (
        type === "output" || type === "tool_call" || type === "embedding" || type === "completed"
      ) {
        this.#started = true;
        this.#answering.resolve();
      }
    }
    super.push(event);
    if (isTerminal(event)) this.end();
  }
}

/** A started run whose first events were already read. */
export interface StartedRun {
  handle: RunHandle;
  /** Every event of the run in order, including those read while starting. */
  events: RunTap;
}

/**
 * Admits the request of `caller` within its tenant's limits (throwing a 429-mapped
 * `TenantLimitError` when over one), counted on the public `model` it names (for the caller's
 * `/api/ps`), submits the run holding that admission until it ends, and waits for its first
 * output (or tool call). Throws the run's error when it fails before that, so the caller can
 * still answer with an error status. The run is cancelled when `signal` aborts.
 */
export async function startRun(
  service: RunGateway,
  submission: RunSubmission,
  signal: AbortSignal,
  caller: TenantRecord,
  model = "",
): Promise<StartedRun> {
  const lease = service.tenants.admit(caller, model);
  const handle = await holdLease(lease, service.submitRun(submission, { signal, tenant: lease }));
  // A client gone while the run was being sent aborted before the service listened for it.
  if (signal.aborted) handle.cancel("client went away");
  const events = new RunTap();
  handle.subscribe((event) => events.push(event));
  await events.answering;
  return { handle, events };
}

function toCode(code: string): ErrorCode {
  return isErrorCode(code) ? code : "INTERNAL";
}

/** Turns a failed or cancelled terminal event into the error a surface reports. */
export function errorOf(event: RunEvent): IopError | undefined {
  if (event.type === "failed") {
    // Refused for a node's own limits or a full pool queue: the client may retry (429 + Retry-After).
    if (event.code === "OVERLOADED") {
      return new OverloadedError(event.message, event.retryAfterSeconds ?? NODE_RETRY_AFTER_S);
    }
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

/** A finished embedding run: one vector per input, in input order, and the input tokens. */
export interface EmbeddingAnswer {
  vectors: number[][];
  inputTokens: number;
}

/**
 * Reads an embedding run of `inputs` inputs to its end; throws the run's error when it failed
 * or was cancelled, and INTERNAL when it did not answer exactly one vector per input.
 */
export async function collectEmbeddings(
  events: AsyncIterable<RunEvent>,
  inputs: number,
): Promise<EmbeddingAnswer> {
  const vectors: number[][] = new Array(inputs);
  let answered = 0;
  let usage: Usage | undefined;
  for await (const event of events) {
    switch (event.type) {
      case "embedding":
        if (event.index >= inputs || vectors[event.index] !== undefined) {
          throw new IopError(
            "INTERNAL",
            `Cannot answer the embedding run as its backend sent vector ${event.index} ` +
              `${event.index >= inputs ? `for ${inputs} inputs` : "twice"}`,
          );
        }
        vectors[event.index] = event.values;
        answered++;
        break;
      case "usage":
        usage = event.usage;
        break;
      case "completed":
        if (answered !== inputs) {
          throw new IopError(
            "INTERNAL",
            `Cannot answer the embedding run as its backend sent ${answered} vectors for ` +
              `${inputs} inputs`,
          );
        }
        return { vectors, inputTokens: (event.usage ?? usage)?.inputTokens ?? 0 };
      case "failed":
      case "cancelled":
        throw errorOf(event)!;
    }
  }
  throw new IopError("INTERNAL", "The run ended without a terminal event");
}

/**
 * Runs an embedding submission as {@linkcode startRun} does (tenant admission, the pool's
 * queue, cancelled when `signal` aborts) and reads its vectors; a run that answers badly is
 * cancelled rather than left running.
 */
export async function embedRun(
  service: RunGateway,
  submission: RunSubmission & { embed: { inputs: string[] } },
  signal: AbortSignal,
  caller: TenantRecord,
  model = "",
): Promise<EmbeddingAnswer> {
  const run = await startRun(service, submission, signal, caller, model);
  try {
    return await collectEmbeddings(run.events, submission.embed.inputs.length);
  } catch (err) {
    run.handle.cancel("the embedding answer was refused");
    throw err;
  }
}

/**
 * Writes a streamed answer: it receives the run's events through `next(event)` and writes the
 * response's text to `out`; it returns once the answer is complete.
 */
export type AnswerWriter = (out: (text: string) => void) => Generator<void, void, RunEvent>;

/**
 * What a stream sends when it has had nothing to say for `everyMs` (an SSE comment), so that a
 * proxy or client with an idle timeout keeps the connection while a run waits (its node's link
 * blipped, a model thinks before its next token).
 */
export interface KeepAlive {
  everyMs: number;
  text: string;
}

/**
 * A response body written by `write` as the run's events arrive. Each event is handled as soon
 * as its frame is read, and what one socket read produced leaves as one chunk (flushed after
 * the current task), so a burst of deltas costs one write, not one per delta. When the client
 * goes away the run is cancelled. `onEnd` runs once either way. With `keepAlive`, a body idle
 * for its `everyMs` gets its `text`, unless the client is not reading what it already holds.
 *
 * Flow control: once the body holds {@linkcode STREAM_HIGH_WATER_BYTES} the client has not
 * read, the run is told its reader is paused, and that it reads again when the client takes
 * from it. A run cancelled for a stall (its client read nothing for `runs.stall_timeout_ms`)
 * errors the body, which frees what it holds.
 */
export function streamBody(
  run: StartedRun,
  write: AnswerWriter,
  onEnd: () => void,
  keepAlive?: KeepAlive,
): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  let pending = "";
  let scheduled = false;
  let closed = false;
  let idle: IdleTicker | undefined;
  /** What the run was last told: the body is full and the client does not read. */
  let paused = false;
  /**
   * Settles the pending `pull`. The stream calls `pull` whenever it has room, so after every
   * chunk; held pending, it is called again only once the body was full and has room again.
   */
  let release: (() => void) | undefined;
  let controller: ReadableStreamDefaultController<Uint8Array>;
  const flush = () => {
    scheduled = false;
    if (pending === "" || closed) return;
    controller.enqueue(encoder.encode(pending));
    pending = "";
    idle?.touch();
    if (!paused && controller.desiredSize! <= 0) {
      paused = true;
      run.handle.setReaderPaused(true);
      release?.();
      release = undefined;
    }
  };
  const out = (text: string) => {
    pending += text;
    if (!scheduled) {
      scheduled = true;
      queueMicrotask(flush);
    }
  };
  const finish = (err?: unknown) => {
    if (closed) return;
    flush();
    closed = true;
    idle?.stop();
    release?.();
    onEnd();
    if (err === undefined) controller.close();
    else controller.error(err);
  };
  return new ReadableStream<Uint8Array>({
    start(c) {
      controller = c;
      if (keepAlive && keepAlive.everyMs > 0) {
        const { everyMs, text } = keepAlive;
        idle = idleTicker(everyMs, () => {
          if (!paused) out(text);
        });
      }
      const writer = write(out);
      try {
        writer.next();
      } catch (err) {
        finish(err);
        return;
      }
      run.events.subscribe((event) => {
        if (closed) return;
        if (event.type === "cancelled" && run.handle.stalled) {
          // Nobody reads what the body holds: dropping it frees the memory.
          pending = "";
          finish(errorOf(event));
          return;
        }
        try {
          if (writer.next(event).done) finish();
        } catch (err) {
          finish(err);
        }
      });
    },
    pull() {
      if (paused) {
        paused = false;
        run.handle.setReaderPaused(false);
      }
      if (closed) return;
      return new Promise<void>((resolve) => release = resolve);
    },
    cancel() {
      if (closed) return;
      closed = true;
      idle?.stop();
      release?.();
      run.handle.cancel("client went away");
      onEnd();
    },
  }, { highWaterMark: STREAM_HIGH_WATER_BYTES, size: (chunk) => chunk.byteLength });
}
