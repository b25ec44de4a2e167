/**
 * A pool run as its caller sees it: the events of the dispatched run, except that a run that
 * never ran — its node was lost, or the node refused it as retryable UNAVAILABLE (a draining
 * node that got the run before its Edge heard it drains) — before its first output is
 * replaced, once, by a run on another provider. The caller never sees that attempt's failure,
 * unless no provider can take the replacement: then the run ends with the first attempt's
 * failure, or with the pool's refusal (OVERLOADED, and when to come back) when its queue is full.
 * @module
 */
import { AsyncQueue } from "../../../shared/async_queue.ts";
import { OverloadedError } from "../../../shared/errors.ts";
import { isTerminal, type RunEvent, type TerminalRunEvent } from "../../../shared/run.ts";
import type { RunHandle } from "../ports.ts";

/**
 * Starts the replacement of the `failed` attempt (which ended with `reason`) on another node;
 * undefined when none can take it. `signal` aborts when the run is cancelled while the
 * replacement still waits for a provider.
 */
export type Retry = (
  failed: RunHandle,
  reason: TerminalRunEvent,
  signal: AbortSignal,
) => Promise<RunHandle | undefined>;

/**
 * True when an attempt that ended with `event` may be replaced on another provider: it sent
 * the caller no output and failed in a way that says it never ran to any effect — its node was
 * lost (NODE_LOST), or its node refused it as retryable UNAVAILABLE (stopping, no config yet,
 * model server unreachable before any byte).
 */
export function replaceable(event: TerminalRunEvent, produced: boolean): boolean {
  if (event.type !== "failed" || produced) return false;
  return event.code === "NODE_LOST" || (event.code === "UNAVAILABLE" && event.retryable);
}

/** A run handle that may switch to a retry attempt; ids follow the current attempt. */
export class PooledRun implements RunHandle {
  #current: RunHandle;
  readonly #queue = new AsyncQueue<RunEvent>();
  readonly #done = Promise.withResolvers<TerminalRunEvent>();
  #cancelReason: string | undefined;
  /** Aborts a retry still waiting in the pool's queue. */
  #retryAbort: AbortController | undefined;
  /** What the consumer last said of itself; a retry attempt starts with it. */
  #readerPaused = false;
  /** The replacement being dispatched, while one is. */
  #replacing: Promise<void> | undefined;

  constructor(first: RunHandle, retry: Retry) {
    this.#current = first;
    this.#follow(first, retry, false);
  }

  /** Id of the current attempt. */
  get runId(): string {
    return this.#current.runId;
  }

  /** Node of the current attempt. */
  get nodeId(): string {
    return this.#current.nodeId;
  }

  /** Adapter of the current attempt. */
  get adapter(): string {
    return this.#current.adapter;
  }

  /** Target of the current attempt. */
  get target(): string {
    return this.#current.target;
  }

  /** True once the current attempt was cancelled for a stalled reader. */
  get stalled(): boolean {
    return this.#current.stalled;
  }

  /** Events of every attempt, minus the failure that triggered a retry. */
  events(): AsyncIterable<RunEvent> {
    return this.#queue;
  }

  /** Settles with the terminal event of the last attempt. */
  get done(): Promise<TerminalRunEvent> {
    return this.#done.promise;
  }

  /**
   * Resolves once no replacement is being dispatched: at once, unless the current attempt
   * already failed replaceably (a first attempt its link could not take), so that a caller
   * handed the run sees the ids of the attempt that runs, not of one that never did.
   */
  get settled(): Promise<void> {
    return this.#replacing ?? Promise.resolve();
  }

  /** Cancels the current attempt and prevents a retry. */
  cancel(reason = "cancelled by client"): void {
    this.#cancelReason ??= reason;
    this.#current.cancel(reason);
    this.#retryAbort?.abort();
  }

  /** Tells the current attempt (and any retry) whether the consumer is paused. */
  setReaderPaused(paused: boolean): void {
    this.#readerPaused = paused;
    this.#current.setReaderPaused(paused);
  }

  /** Delivers events to `listener` from now on, starting with those not read yet. */
  subscribe(listener: (event: RunEvent) => void): void {
    this.#queue.subscribe(listener);
  }

  /** Follows `attempt` synchronously; its terminal event either ends this run or retries it. */
  #follow(attempt: RunHandle, retry: Retry, retried: boolean): void {
    let produced = false;
    attempt.subscribe((event) => {
      if (!isTerminal(event)) {
        if (event.type === "output" || event.type === "tool_call") produced = true;
        this.#queue.push(event);
        return;
      }
      if (replaceable(event, produced) && !retried && this.#cancelReason === undefined) {
        this.#replacing = this.#retry(event, retry).finally(() => this.#replacing = undefined);
        return;
      }
      this.#end(event);
    });
  }

  async #retry(lost: TerminalRunEvent, retry: Retry): Promise<void> {
    this.#retryAbort = new AbortController();
    let end = lost;
    const next = await retry(this.#current, lost, this.#retryAbort.signal).catch((err) => {
      // A caller told its run was lost would retry at once, into the queue that just refused it.
      if (err instanceof OverloadedError) end = overloaded(lost, err);
      return undefined;
    });
    this.#retryAbort = undefined;
    if (!next) {
      this.#end(end);
      return;
    }
    this.#current = next;
    if (this.#readerPaused) next.setReaderPaused(true);
    // A cancel that arrived while the retry was being dispatched still applies.
    if (this.#cancelReason !== undefined) next.cancel(this.#cancelReason);
    this.#follow(next, retry, true);
  }

  #end(terminal: TerminalRunEvent): void {
    this.#queue.push(terminal);
    this.#queue.end();
    this.#done.resolve(terminal);
  }
}

/** The end of a run whose replacement the pool refused as `err`, in place of `lost`. */
function overloaded(lost: TerminalRunEvent, err: OverloadedError): TerminalRunEvent {
  return {
    runId: lost.runId,
    seq: lost.seq,
    timestampMs: lost.timestampMs,
    type: "failed",
    code: "OVERLOADED",
    message: err.message,
    retryable: err.retryable,
    exitCode: 0,
    retryAfterSeconds: err.retryAfterSeconds,
  };
}
