/**
 * Flow control of what the Control Plane sends one WebSocket client. While the socket has more
 * than `maxBufferedBytes` unsent (`bufferedAmount`: the client reads too slowly), nothing more is
 * sent: messages are held, and sent in order once it drains below the bound. What is held stays
 * small because state is coalesced: a push with a key (an edge's status, its link, a command
 * share's result) replaces the one held under the same key, so a client that catches up gets the
 * newest state, not every missed one; pushes without a key (relayed events, command progress)
 * keep only the newest {@linkcode MAX_HELD_EVENTS}; answers to the client's own requests are
 * always kept. A client above the bound for longer than `stallTimeoutMs`, or holding more than
 * {@linkcode MAX_HELD_MESSAGES} messages, is cut off (the session closes its socket with
 * {@linkcode CLOSE_SLOW_CLIENT} and the reason).
 * @module
 */

/** Bounds of {@linkcode PushFlow}. */
export interface PushFlowOptions {
  /** Unsent bytes above which nothing more is sent to the client. */
  maxBufferedBytes: number;
  /** How long a client may stay above the bound before it is cut off. */
  stallTimeoutMs: number;
  /** How often a held-back socket is checked for having drained; default 100 ms. */
  pollMs?: number;
}

/** The bounds of every `/client` socket unless the app is given others. */
export const DEFAULT_PUSH_FLOW: PushFlowOptions = {
  maxBufferedBytes: 1024 * 1024,
  stallTimeoutMs: 30_000,
};

/** Pushes without a key held at most for a backed-up client; older ones are dropped. */
export const MAX_HELD_EVENTS = 256;

/** Messages held at most for a backed-up client (keyed, unkeyed and answers together). */
export const MAX_HELD_MESSAGES = 4096;

/** Close code of a client cut off for reading too slowly: 1008, policy violation. */
export const CLOSE_SLOW_CLIENT = 1008;

/** What {@linkcode PushFlow} reads of its socket. */
export interface BufferedSocket {
  readonly bufferedAmount: number;
  readonly readyState: number;
}

/** A held message: sends itself when called (encoded only then). */
type Send = () => void;

/** Holds back, coalesces and releases the messages of one client; see the module doc. */
export class PushFlow {
  readonly #socket: BufferedSocket;
  readonly #options: Required<PushFlowOptions>;
  readonly #onCutOff: (reason: string) => void;
  /** In send order; keys `k:…` coalesce, `e:<n>` are droppable events, `a:<n>` answers. */
  readonly #held = new Map<string, Send>();
  #heldEvents = 0;
  #seq = 0;
  /** When the socket was last seen at or below the bound while messages were held. */
  #drainedAt = 0;
  #timer: ReturnType<typeof setInterval> | undefined;
  #stopped = false;

  constructor(
    socket: BufferedSocket,
    options: PushFlowOptions,
    onCutOff: (reason: string) => void,
  ) {
    this.#socket = socket;
    this.#options = { pollMs: 100, ...options };
    this.#onCutOff = onCutOff;
  }

  /**
   * Sends a push now, or holds it while the client is backed up: under `key`, replacing an
   * older one held under it; without, as one of the newest events.
   */
  push(send: Send, key?: string): void {
    if (this.sendsNow()) return send();
    if (key === undefined) {
      this.#hold(`e:${this.#seq++}`, send);
      if (++this.#heldEvents > MAX_HELD_EVENTS) this.#dropOldestEvent();
    } else {
      const k = `k:${key}`;
      this.#held.delete(k); // re-inserted last: it goes out in the order of its newest value
      this.#hold(k, send);
    }
  }

  /** Sends an answer to the client's request now, or after what is held; never dropped. */
  answer(send: Send): void {
    if (this.sendsNow()) return send();
    this.#hold(`a:${this.#seq++}`, send);
  }

  /** Stops holding and checking; what is held is dropped. */
  stop(): void {
    this.#stopped = true;
    this.#held.clear();
    this.#heldEvents = 0;
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /**
   * True when a push or answer would go out at once: nothing is held and the socket is below
   * the bound. The hot path: a caller that checks this first sends without wrapping the message
   * in a closure for {@linkcode push}.
   */
  sendsNow(): boolean {
    if (this.#stopped) return false;
    return this.#held.size === 0 && this.#socket.bufferedAmount <= this.#options.maxBufferedBytes;
  }

  #hold(key: string, send: Send): void {
    if (this.#stopped) return;
    this.#held.set(key, send);
    if (this.#timer === undefined) {
      this.#drainedAt = Date.now();
      this.#timer = setInterval(() => this.#check(), this.#options.pollMs);
    }
    if (this.#held.size > MAX_HELD_MESSAGES) {
      this.#cutOff(`too slow: over ${MAX_HELD_MESSAGES} messages held back`);
    }
  }

  #dropOldestEvent(): void {
    for (const key of this.#held.keys()) {
      if (!key.startsWith("e:")) continue;
      this.#held.delete(key);
      this.#heldEvents--;
      return;
    }
  }

  /** Sends what is held while the socket stays below the bound; cuts a stalled client off. */
  #check(): void {
    const max = this.#options.maxBufferedBytes;
    if (this.#socket.readyState !== WebSocket.OPEN) return this.stop();
    for (const [key, send] of this.#held) {
      if (this.#socket.bufferedAmount > max) break;
      this.#drainedAt = Date.now();
      this.#held.delete(key);
      if (key.startsWith("e:")) this.#heldEvents--;
      send();
    }
    if (this.#held.size === 0) {
      clearInterval(this.#timer);
      this.#timer = undefined;
      return;
    }
    if (Date.now() - this.#drainedAt >= this.#options.stallTimeoutMs) {
      this.#cutOff(
        `too slow: over ${max} bytes unsent for ${this.#options.stallTimeoutMs} ms`,
      );
    }
  }

  #cutOff(reason: string): void {
    this.stop();
    this.#onCutOff(reason);
  }
}
