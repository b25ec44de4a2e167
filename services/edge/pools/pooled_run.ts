/**
 * A pool run as its caller sees it: the events of the dispatched run, except that a run whose
 * node is lost before its first output is replaced, once, by a run on another provider. The
 * caller never sees the lost attempt's failure.
 * @module
 */
import { AsyncQueue } from "../../../shared/async_queue.ts";
import { isTerminal, type RunEvent, type TerminalRunEvent } from "../../../shared/run.ts";
import type { RunHandle } from "../ports.ts";

/**
 * Starts the replacement run on another node; undefined when none can take it. `signal` aborts
 * when the run is cancelled while the replacement still waits for a provider.
 */
export type Retry = (lostNodeId: string, signal: AbortSignal) => Promise<RunHandle | undefined>;

/** A run handle that may switch to a retry attempt; ids follow the current attempt. */
export class PooledRun implements RunHandle {
  #current: RunHandle;
  readonly #queue = new AsyncQueue<RunEvent>();
  readonly #done = Promise.withResolvers<TerminalRunEvent>();
  #cancelReason: string | undefined;
  /** Aborts a retry still waiting in the pool's queue. */
  #retryAbort: AbortController | undefined;

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

  /** Events of every attempt, minus the failure that triggered a retry. */
  events(): AsyncIterable<RunEvent> {
    return this.#queue;
  }

  /** Settles with the terminal event of the last attempt. */
  get done(): Promise<TerminalRunEvent> {
    return this.#done.promise;
  }

  /** Cancels the current attempt and prevents a retry. */
  cancel(reason = "cancelled by client"): void {
    this.#cancelReason ??= reason;
    this.#current.cancel(reason);
    this.#retryAbort?.abort();
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
      const lostEarly = event.type === "failed" && event.code === "NODE_LOST" && !produced;
      if (lostEarly && !retried && this.#cancelReason === undefined) {
        void this.#retry(event, retry);
        return;
      }
      this.#end(event);
    });
  }

  async #retry(lost: TerminalRunEvent, retry: Retry): Promise<void> {
    this.#retryAbort = new AbortController();
    const next = await retry(this.#current.nodeId, this.#retryAbort.signal).catch(() => undefined);
    this.#retryAbort = undefined;
    if (!next) {
      this.#end(lost);
      return;
    }
    this.#current = next;
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
