/**
 * One run in flight on the Edge: relays the node's events in sequence order to its consumer,
 * settles once with the terminal event, and credits the node's flow-control window
 * (node.proto, "Flow control") as its consumer takes the events.
 *
 * An event counts as taken when the run hands it on (to its subscriber, or to the buffer its
 * `events()` iterator reads), unless the consumer said it is paused; the events handed while
 * paused count from the moment it resumes. Taken events are acknowledged by seq once they add up
 * to a quarter of the window, a terminal event at once; on a link without a window (0) nothing
 * is acknowledged, as its node neither waits for credit nor retains events. A consumer paused
 * for the whole stall timeout gets the run cancelled.
 * @module
 */
import { AsyncQueue } from "../../shared/async_queue.ts";
import { isTerminal, type RunEvent, type TerminalRunEvent } from "../../shared/run.ts";
import { estimatedEventBytes } from "../../shared/run_event_size.ts";
import type { RunHandle } from "./ports.ts";

/** Result of offering an event to a run. */
export type Accepted = "accepted" | "stale" | "terminal";

/**
 * How a run credits its node: the way to ack, and the stall timeout. The window it counts in is
 * its link's, given by {@linkcode ActiveRun.attached} (at dispatch, and again on a resume).
 */
export interface RunFlow {
  /** A consumer paused this long gets the run cancelled (`runs.stall_timeout_ms`). */
  stallTimeoutMs: number;
  /** Acknowledges the run's events up to `seq` to its node (batched per link by the transport). */
  ack: (seq: number, final: boolean) => void;
}

/** What the service knows of a run when it dispatches it. */
export interface RunInit {
  runId: string;
  nodeId: string;
  adapter: string;
  target: string;
  startedAtMs: number;
  /** Dispatched by a provider pool (which may retry it elsewhere when its node is lost). */
  pooled?: boolean;
}

/** The reason a stalled run is cancelled with. */
export function stallReason(stallTimeoutMs: number): string {
  return `client read nothing for ${stallTimeoutMs} ms (runs.stall_timeout_ms)`;
}

/** A dispatched run as the service tracks it. */
export class ActiveRun implements RunHandle {
  readonly runId: string;
  readonly nodeId: string;
  readonly adapter: string;
  readonly target: string;
  readonly startedAtMs: number;
  readonly pooled: boolean;
  /** When the first output arrived at the Edge; 0 before. */
  firstOutputAtMs = 0;
  #lastSeq = 0;
  #produced = false;
  readonly #queue = new AsyncQueue<RunEvent>();
  readonly #done = Promise.withResolvers<TerminalRunEvent>();
  readonly #cancel: (reason: string) => void;
  #finished = false;
  // Flow control (all unused without a flow).
  readonly #flow: RunFlow | undefined;
  /** The window of the run's link (`run_window_bytes`); 0: nothing is acked. */
  #windowBytes = 0;
  /** Taken bytes that trigger an ack: a quarter of the window. */
  #ackEveryBytes = 0;
  /** Bytes taken since the last ack, and the seq of the last event taken. */
  #takenSinceAckBytes = 0;
  #takenSeq = 0;
  #paused = false;
  /** When the consumer last said it is paused (Date.now); meaningful only while paused. */
  #pausedAtMs = 0;
  /** Bytes handed on while paused, and the seq of the last of them. */
  #heldBytes = 0;
  #heldSeq = 0;
  /** One timer per run, armed at a pause and left armed across resumes (see #stallCheck). */
  #stallTimer: ReturnType<typeof setTimeout> | undefined;
  #stalled = false;

  constructor(init: RunInit, cancel: (reason: string) => void, flow?: RunFlow) {
    this.runId = init.runId;
    this.nodeId = init.nodeId;
    this.adapter = init.adapter;
    this.target = init.target;
    this.startedAtMs = init.startedAtMs;
    this.pooled = init.pooled ?? false;
    this.#cancel = cancel;
    this.#flow = flow;
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

  /** The seq of the last event accepted (0 before the first). */
  get lastSeq(): number {
    return this.#lastSeq;
  }

  /** True once the run sent output, a tool call or an embedding: it had an effect. */
  get produced(): boolean {
    return this.#produced;
  }

  /** True once the run was cancelled as its consumer stayed paused for the stall timeout. */
  get stalled(): boolean {
    return this.#stalled;
  }

  /** The flow-control window of the run's link; 0 while it has none (nothing is acked). */
  get windowBytes(): number {
    return this.#windowBytes;
  }

  /** Asks for cancellation. */
  cancel(reason = "cancelled by client"): void {
    if (!this.#finished) this.#cancel(reason);
  }

  /**
   * The consumer is paused (true) or reads again (false); the events handed meanwhile count as
   * taken once it reads again. Paused for the whole stall timeout, the run is cancelled.
   *
   * A slow consumer flips this per chunk it drains, so a flip costs no timer: the first pause
   * arms one, which stays armed across resumes and, when it fires, checks the pause in force.
   */
  setReaderPaused(paused: boolean): void {
    if (this.#finished || paused === this.#paused) return;
    this.#paused = paused;
    const flow = this.#flow;
    if (!flow) return;
    if (paused) {
      this.#pausedAtMs = Date.now();
      this.#stallTimer ??= setTimeout(this.#stallCheck, flow.stallTimeoutMs);
      return;
    }
    if (this.#heldSeq <= this.#takenSeq) return;
    const heldBytes = this.#heldBytes;
    this.#heldBytes = 0;
    this.#take(heldBytes, this.#heldSeq);
  }

  /**
   * The run is bound to a link of its node (at dispatch, and a new one on a resume): from now on
   * it acks in that link's window (0: not at all). On a new link it acks at once what its
   * consumer took so far: the node counts what the Edge received but did not acknowledge
   * against the window, acks sent on the lost link may never have arrived and those due while
   * detached were dropped, so a node whose window filled would otherwise wait for credit that
   * never comes.
   */
  attached(windowBytes: number): void {
    this.#windowBytes = windowBytes;
    this.#ackEveryBytes = windowBytes / 4;
    if (this.#flow && windowBytes > 0 && this.#takenSeq > 0 && !this.#finished) this.#sendAck();
  }

  /** Offers an event from the node; out-of-order duplicates are dropped as stale. */
  offer(event: RunEvent): Accepted {
    return this.#accept(event, true);
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
    // Not the node's event: there is nothing to acknowledge.
    this.#accept(terminal, false);
    return terminal;
  }

  #accept(event: RunEvent, fromNode: boolean): Accepted {
    if (this.#finished || event.seq <= this.#lastSeq) return "stale";
    this.#lastSeq = event.seq;
    const type = event.type;
    if (type === "output" || type === "tool_call" || type === "embedding") {
      this.#produced = true;
      // On the Edge's clock, like startedAtMs: the node's timestamps may be skewed against it.
      if (type === "output" && this.firstOutputAtMs === 0) this.firstOutputAtMs = Date.now();
    }
    this.#queue.push(event);
    if (!isTerminal(event)) {
      if (this.#flow) this.#handedOn(event);
      return "accepted";
    }
    this.#finished = true;
    clearTimeout(this.#stallTimer);
    this.#stallTimer = undefined;
    // A terminal event is acknowledged read or not, so the node may forget the run; nothing
    // waits on that ack, so the transport may send it with the link's next frame.
    if (fromNode && this.#flow && this.#windowBytes > 0) {
      this.#takenSeq = event.seq;
      this.#sendAck(true);
    }
    this.#queue.end();
    this.#done.resolve(event);
    return "terminal";
  }

  /**
   * Counts an event handed on: taken, or held until the paused consumer reads again. Acks come
   * a quarter window apart, so the node never waits for a whole window's round trip.
   */
  #handedOn(event: RunEvent): void {
    if (this.#windowBytes === 0) return;
    const bytes = estimatedEventBytes(event);
    if (this.#paused) {
      this.#heldBytes += bytes;
      this.#heldSeq = event.seq;
      return;
    }
    this.#take(bytes, event.seq);
  }

  /** Counts `bytes` taken, up to `seq`; acks once a quarter window is taken since the last. */
  #take(bytes: number, seq: number): void {
    this.#takenSinceAckBytes += bytes;
    this.#takenSeq = seq;
    // The window may have become 0 (a resume on a link without one) while events were held.
    if (this.#windowBytes > 0 && this.#takenSinceAckBytes >= this.#ackEveryBytes) {
      this.#sendAck();
    }
  }

  #sendAck(final = false): void {
    this.#takenSinceAckBytes = 0;
    this.#flow!.ack(this.#takenSeq, final);
  }

  /**
   * The stall timer fired: cancels the run when its consumer has been paused for the whole
   * timeout; re-arms for the rest of it when the consumer paused again since; disarms when it
   * reads (the next pause arms anew). Bound once per run, so re-arming allocates no closure.
   */
  readonly #stallCheck = (): void => {
    this.#stallTimer = undefined;
    if (this.#finished || !this.#paused) return;
    const timeoutMs = this.#flow!.stallTimeoutMs;
    const leftMs = this.#pausedAtMs + timeoutMs - Date.now();
    if (leftMs > 0) {
      this.#stallTimer = setTimeout(this.#stallCheck, leftMs);
      return;
    }
    this.#stalled = true;
    this.cancel(stallReason(timeoutMs));
  };
}
