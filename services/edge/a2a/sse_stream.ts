/**
 * A bounded SSE body for one A2A stream subscriber. Frames are pushed as the task changes; the
 * body is a byte-counted ReadableStream, so what a client has not read yet is measured instead
 * of piling up:
 *
 * - above `highWaterBytes` the stream is *full*: `onFull(true)` (the subscriber that started the
 *   task pauses its run, so the node stops producing) until the client reads again
 *   (`onFull(false)`);
 * - a frame that would take it past `maxBufferedBytes` cuts the subscriber off: a final error
 *   frame says why and the stream closes once drained (the task itself goes on);
 * - full for longer than `stallTimeoutMs` (`runs.stall_timeout_ms`), the stream is errored,
 *   which drops what it holds and ends the client's response;
 * - silent for `keepAliveMs` (`http.sse_keepalive_ms`) while attached and not full, it sends an
 *   SSE comment, `: keep-alive`, which every SSE parser skips, so proxies and clients with idle
 *   timeouts keep a stream whose task is busy without news.
 * @module
 */
import { type IdleTicker, idleTicker, SSE_KEEP_ALIVE } from "../http/idle_ticker.ts";

const KEEP_ALIVE = new TextEncoder().encode(SSE_KEEP_ALIVE);

/** High-water mark of every A2A stream: 64 KiB unread by the client make it full. */
export const SSE_HIGH_WATER_BYTES = 64 * 1024;

/** Default of the bytes a stream holds at most before its subscriber is cut off: 4 MiB. */
export const DEFAULT_STREAM_BUFFER_BYTES = 4 * 1024 * 1024;

/** The bounds of one stream. */
export interface StreamLimits {
  /** Bytes unread by the client beyond which the stream is full. */
  highWaterBytes: number;
  /** Bytes held at most; a subscriber further behind is cut off with an error frame. */
  maxBufferedBytes: number;
  /** How long the stream may stay full before it is errored; 0 = never. */
  stallTimeoutMs: number;
  /** How long it may stay silent before it sends a keep-alive comment; 0 or absent = never. */
  keepAliveMs?: number;
}

/** Why a subscriber stopped receiving frames. */
export type DetachReason =
  /** Its last frame was sent (the task reached a final state). */
  | "ended"
  /** It fell more than `maxBufferedBytes` behind and got the error frame. */
  | "lagged"
  /** It stayed full for longer than `stallTimeoutMs`; the stream was errored. */
  | "stalled"
  /** The client went away. */
  | "gone";

/** What a {@linkcode BoundedSse} tells its owner. */
export interface BoundedSseHooks {
  /** The stream became full (true) or has room again (false); only while attached. */
  onFull?(full: boolean): void;
  /** Called once, when the subscriber stops receiving frames. */
  onDetach(reason: DetachReason): void;
  /** The error frame sent to a subscriber cut off at `maxBufferedBytes`. */
  lagFrame(maxBufferedBytes: number): Uint8Array;
}

/** One subscriber's SSE body; see the module doc. */
export class BoundedSse {
  /** The response body. */
  readonly body: ReadableStream<Uint8Array>;
  readonly #limits: StreamLimits;
  readonly #hooks: BoundedSseHooks;
  #controller!: ReadableStreamDefaultController<Uint8Array>;
  #full = false;
  #attached = true;
  /** Close as soon as the client made room (its last frame is queued). */
  #closing = false;
  #finished = false;
  #stallTimer: ReturnType<typeof setTimeout> | undefined;
  #idle: IdleTicker | undefined;

  constructor(limits: StreamLimits, hooks: BoundedSseHooks) {
    this.#limits = limits;
    this.#hooks = hooks;
    if (limits.keepAliveMs) {
      this.#idle = idleTicker(limits.keepAliveMs, () => {
        if (this.#attached && !this.#full) this.#enqueue(KEEP_ALIVE);
      });
    }
    this.body = new ReadableStream<Uint8Array>({
      start: (controller) => {
        this.#controller = controller;
      },
      pull: () => this.#roomAgain(),
      cancel: () => {
        this.#finished = true;
        this.#stopStallTimer();
        this.#detach("gone");
      },
    }, { highWaterMark: limits.highWaterBytes, size: (chunk) => chunk.byteLength });
  }

  /** Bytes queued and not yet taken by the client's connection. */
  get bufferedBytes(): number {
    return Math.max(0, this.#limits.highWaterBytes - (this.#controller.desiredSize ?? 0));
  }

  /** Queues one frame; ignored once detached. A frame past the bound cuts the subscriber off. */
  send(frame: Uint8Array): void {
    if (!this.#attached) return;
    if (this.bufferedBytes + frame.byteLength > this.#limits.maxBufferedBytes) {
      this.#last(this.#hooks.lagFrame(this.#limits.maxBufferedBytes), "lagged");
      return;
    }
    this.#enqueue(frame);
  }

  /** Queues the last frame (if any) and closes the stream once the client made room. */
  end(frame?: Uint8Array): void {
    if (!this.#attached) return;
    this.#last(frame, "ended");
  }

  #last(frame: Uint8Array | undefined, reason: DetachReason): void {
    if (frame) this.#enqueue(frame);
    this.#detach(reason);
    if (this.#full) this.#closing = true;
    else this.#close();
  }

  #enqueue(frame: Uint8Array): void {
    this.#controller.enqueue(frame);
    this.#idle?.touch();
    if (this.#full || (this.#controller.desiredSize ?? 0) > 0) return;
    this.#full = true;
    if (this.#limits.stallTimeoutMs > 0) {
      this.#stallTimer = setTimeout(() => this.#stalled(), this.#limits.stallTimeoutMs);
    }
    if (this.#attached) this.#hooks.onFull?.(true);
  }

  /** The client read: the stream has room below its high-water mark. */
  #roomAgain(): void {
    if (this.#closing) return this.#close();
    if (!this.#full) return;
    this.#full = false;
    this.#stopStallTimer();
    if (this.#attached) this.#hooks.onFull?.(false);
  }

  #stalled(): void {
    this.#stallTimer = undefined;
    if (this.#finished) return;
    this.#finished = true;
    // Erroring drops what the stream holds and ends the response: the client read nothing.
    this.#controller.error(
      new Error(
        `Cut off an A2A stream as its client read nothing for ${this.#limits.stallTimeoutMs} ms ` +
          "(runs.stall_timeout_ms)",
      ),
    );
    this.#detach("stalled");
  }

  #close(): void {
    this.#closing = false;
    this.#stopStallTimer();
    if (this.#finished) return;
    this.#finished = true;
    this.#controller.close();
  }

  #detach(reason: DetachReason): void {
    if (!this.#attached) return;
    this.#attached = false;
    this.#idle?.stop();
    this.#hooks.onDetach(reason);
  }

  #stopStallTimer(): void {
    if (this.#stallTimer !== undefined) clearTimeout(this.#stallTimer);
    this.#stallTimer = undefined;
  }
}
