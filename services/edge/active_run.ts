/**
 * One run in flight on the Edge: relays the node's events in sequence order to its consumer
 * and settles once with the terminal event.
 * @module
 */
import { AsyncQueue } from "../../shared/async_queue.ts";
import { isTerminal, type RunEvent, type TerminalRunEvent } from "../../shared/run.ts";
import type { RunHandle } from "./ports.ts";

/** Result of offering an event to a run. */
export type Accepted = "accepted" | "stale" | "terminal";

/** A dispatched run as the service tracks it. */
export class ActiveRun implements RunHandle {
  readonly runId: string;
  readonly nodeId: string;
  readonly adapter: string;
  readonly target: string;
  readonly startedAtMs: number;
  /** When the first output arrived at the Edge; 0 before. */
  firstOutputAtMs = 0;
  #lastSeq = 0;
  readonly #queue = new AsyncQueue<RunEvent>();
  readonly #done = Promise.withResolvers<TerminalRunEvent>();
  readonly #cancel: (reason: string) => void;
  #finished = false;

  constructor(
    init: { runId: string; nodeId: string; adapter: string; target: string; startedAtMs: number },
    cancel: (reason: string) => void,
  ) {
    this.runId = init.runId;
    this.nodeId = init.nodeId;
    this.adapter = init.adapter;
    this.target = init.target;
    this.startedAtMs = init.startedAtMs;
    this.#cancel = cancel;
  }

  /** Events in order, ending after the terminal one. */
  events(): AsyncIterable<RunEvent> {
    return this.#queue;
  }

  /** Delivers events to `listener` from now on, starting with those not read yet. */
  subscribe(listener: (event: RunEvent) => void): void {
    this.#queue.subscribe(listener);
  }

  /** Settles with the terminal event. */
  get done(): Promise<TerminalRunEvent> {
    return this.#done.promise;
  }

  /** True once a terminal event was accepted. */
  get finished(): boolean {
    return this.#finished;
  }

  /** Asks for cancellation. */
  cancel(reason = "cancelled by client"): void {
    if (!this.#finished) this.#cancel(reason);
  }

  /** Offers an event from the node; out-of-order duplicates are dropped as stale. */
  offer(event: RunEvent): Accepted {
    if (this.#finished || event.seq <= this.#lastSeq) return "stale";
    this.#lastSeq = event.seq;
    // On the Edge's clock, like startedAtMs: the node's timestamps may be skewed against it.
    if (event.type === "output" && this.firstOutputAtMs === 0) this.firstOutputAtMs = Date.now();
    this.#queue.push(event);
    if (!isTerminal(event)) return "accepted";
    this.#finished = true;
    this.#queue.end();
    this.#done.resolve(event);
    return "terminal";
  }

  /** Ends the run from the Edge side (node lost, cancel unanswered) with a synthetic event. */
  finish(
    event:
      | { type: "failed"; code: string; message: string; retryable: boolean }
      | { type: "cancelled"; reason: string },
    nowMs: number,
  ): TerminalRunEvent | undefined {
    if (this.#finished) return undefined;
    const terminal: TerminalRunEvent = event.type === "failed"
      ? { ...event, exitCode: 0, runId: this.runId, seq: this.#lastSeq + 1, timestampMs: nowMs }
      : { ...event, runId: this.runId, seq: this.#lastSeq + 1, timestampMs: nowMs };
    this.offer(terminal);
    return terminal;
  }
}
