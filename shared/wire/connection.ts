/**
 * A framed, typed, full-duplex connection over a {@linkcode ByteLink} (plain TCP or TLS).
 *
 * Writes are serialised and coalesced: frames sent while a write is in flight go out together
 * in the next write, and each `send` resolves once its bytes were handed to the socket, so a
 * caller that awaits `send` is paced by the peer (backpressure). A message larger than the
 * peer accepts (`maxSendBytes`) is refused before it is written: the peer would drop the whole
 * link for it, failing everything else in flight on it.
 * @module
 */
import type { DescMessage, MessageShape } from "@bufbuild/protobuf";
import { IopError } from "../errors.ts";
import {
  DEFAULT_MAX_FRAME_BYTES,
  FrameDecoder,
  FrameError,
  varintSize,
  writeVarint,
} from "./frame.ts";
import type { ByteLink } from "./link.ts";
import { codecOf, type MessageCodec } from "./message_codec.ts";

/** Counters a connection reports to; see `wire_metrics.ts`. Absent means not counted. */
export interface WireMetrics {
  frame(direction: "in" | "out"): void;
  bytes(direction: "in" | "out", count: number): void;
  /** A connection was closed because of what its peer sent. */
  rejected(
    reason:
      | "oversize"
      | "malformed"
      | "truncated"
      | "protocol"
      | "heartbeat"
      | "handshake"
      | "crowded",
  ): void;
}

/** Options of {@linkcode FrameConnection}. */
export interface FrameConnectionOptions<In extends DescMessage, Out extends DescMessage> {
  inSchema: In;
  outSchema: Out;
  /** Largest accepted incoming frame; defaults to 4 MiB. */
  maxFrameBytes?: number;
  /** Largest frame body sent (the peer's limit); a larger message is refused. Default: none. */
  maxSendBytes?: number;
  metrics?: WireMetrics;
}

/**
 * A message refused by `send` as its frame is larger than the peer accepts: nothing was written
 * and the connection stays up. INVALID_ARGUMENT, not retryable: the same message never fits.
 */
export class OversizeSendError extends IopError {
  /** The encoded size of the refused message. */
  readonly bytes: number;
  /** The limit it is over. */
  readonly limit: number;

  constructor(bytes: number, limit: number) {
    super(
      "INVALID_ARGUMENT",
      `Cannot send the message as it is ${bytes} bytes, over the peer's frame limit of ${limit} bytes`,
    );
    this.name = "OversizeSendError";
    this.bytes = bytes;
    this.limit = limit;
  }
}

interface Batch {
  /** Encoded message bodies; their length prefixes are written when the batch is joined. */
  bodies: Uint8Array[];
  bytes: number;
  done: PromiseWithResolvers<void>;
}

/** A connection that reads `In` messages and writes `Out` messages as frames. */
export class FrameConnection<In extends DescMessage, Out extends DescMessage> {
  readonly #conn: ByteLink;
  readonly #options: FrameConnectionOptions<In, Out>;
  readonly #out: MessageCodec<Out>;
  readonly #closed = Promise.withResolvers<string>();
  #next: Batch | undefined;
  #writing = false;
  #closeReason: string | undefined;
  #maxFrameBytes: number;
  #maxSendBytes: number;
  #decoder: FrameDecoder<In> | undefined;

  constructor(conn: ByteLink, options: FrameConnectionOptions<In, Out>) {
    this.#conn = conn;
    this.#options = options;
    this.#out = codecOf(options.outSchema);
    this.#maxFrameBytes = options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES;
    this.#maxSendBytes = options.maxSendBytes ?? Infinity;
  }

  /** The largest frame body sent from the next `send` on (the peer's limit, once known). */
  set maxSendBytes(bytes: number) {
    this.#maxSendBytes = bytes;
  }

  /**
   * The largest incoming frame accepted from the next one on: a server keeps it small until the
   * peer has authenticated, so an anonymous peer cannot make it hold a large buffer.
   */
  set maxFrameBytes(bytes: number) {
    this.#maxFrameBytes = bytes;
    if (this.#decoder) this.#decoder.maxFrameBytes = bytes;
  }

  /** The peer's address, as `host:port`. */
  get remote(): string {
    return this.#conn.remote;
  }

  /** The link underneath: encryption and the identities the peer's certificate proved. */
  get link(): ByteLink {
    return this.#conn;
  }

  /** Resolves with the close reason once the connection is closed by either side. */
  get closed(): Promise<string> {
    return this.#closed.promise;
  }

  /** True once `close` was called or the stream ended. */
  get isClosed(): boolean {
    return this.#closeReason !== undefined;
  }

  /**
   * Sends one message; rejects with UNAVAILABLE when the connection is closed, and with
   * {@linkcode OversizeSendError} (sending nothing) when it is larger than `maxSendBytes`.
   */
  send(message: MessageShape<Out>): Promise<void> {
    if (this.#closeReason !== undefined) {
      return Promise.reject(
        new IopError(
          "UNAVAILABLE",
          `Cannot send as the connection is closed: ${this.#closeReason}`,
        ),
      );
    }
    const body = this.#out.encode(message);
    if (body.byteLength > this.#maxSendBytes) {
      return Promise.reject(new OversizeSendError(body.byteLength, this.#maxSendBytes));
    }
    const frameBytes = varintSize(body.byteLength) + body.byteLength;
    const metrics = this.#options.metrics;
    if (metrics) {
      metrics.frame("out");
      metrics.bytes("out", frameBytes);
    }
    const batch = this.#next ??= {
      bodies: [],
      bytes: 0,
      done: Promise.withResolvers<void>(),
    };
    batch.bodies.push(body);
    batch.bytes += frameBytes;
    if (!this.#writing) {
      // Flush after the current task's synchronous work, so frames sent together (e.g. a run's
      // usage and completed events) leave in one write instead of one syscall each.
      this.#writing = true;
      queueMicrotask(() => void this.#flush());
    }
    return batch.done.promise;
  }

  async #flush(): Promise<void> {
    try {
      while (this.#next) {
        const batch = this.#next;
        this.#next = undefined;
        try {
          await this.#conn.write(frames(batch));
          batch.done.resolve();
        } catch (err) {
          const error = new IopError("UNAVAILABLE", "Cannot send as the connection broke", {
            cause: err,
          });
          batch.done.reject(error);
          batch.done.promise.catch(() => {});
          this.close("write failed");
        }
      }
    } finally {
      this.#writing = false;
    }
  }

  /**
   * Yields incoming messages until the peer closes. Throws {@linkcode FrameError} on a bad frame
   * (after closing the connection). Only one reader may iterate.
   *
   * A plain socket is read into one reused buffer (not a fresh 64 KiB chunk per read, as
   * `conn.readable` does), which keeps idle links small; a TLS link's own chunks are decoded as
   * they came, with no buffer at all. Every frame a read completes is decoded at once, without a
   * promise per frame.
   */
  async *messages(): AsyncGenerator<MessageShape<In>> {
    const metrics = this.#options.metrics;
    const decoder = this.#decoder = new FrameDecoder(this.#options.inSchema, {
      maxFrameBytes: this.#maxFrameBytes,
    });
    const next = readerOf(this.#conn);
    try {
      while (true) {
        const bytes = await next();
        if (bytes === null) break;
        metrics?.bytes("in", bytes.byteLength);
        for (const message of decoder.push(bytes)) {
          metrics?.frame("in");
          yield message;
        }
        decoder.check();
      }
      decoder.end();
      this.close(PEER_CLOSED);
    } catch (err) {
      if (err instanceof FrameError) {
        metrics?.rejected(err.kind);
        this.close(`${err.kind} frame`);
        throw err;
      }
      this.close(this.#closeReason ?? (isReset(err) ? PEER_RESET : "read failed"));
    }
  }

  /** Closes the connection; pending sends are dropped. Safe to call more than once. */
  close(reason = "closed"): void {
    if (this.#closeReason !== undefined) return;
    this.#closeReason = reason;
    if (this.#next) {
      const batch = this.#next;
      this.#next = undefined;
      batch.done.reject(new IopError("UNAVAILABLE", `Connection closed: ${reason}`));
      batch.done.promise.catch(() => {});
    }
    this.#conn.close();
    this.#closed.resolve(reason);
  }
}

/** A reset by the peer's host, from a Deno socket or a `node:tls` one. */
function isReset(err: unknown): boolean {
  return err instanceof Deno.errors.ConnectionReset ||
    (err as { code?: unknown } | null)?.code === "ECONNRESET";
}

/** The batch as one buffer of frames: each body behind its varint length. */
function frames(batch: Batch): Uint8Array {
  const out = new Uint8Array(batch.bytes);
  let offset = 0;
  for (const body of batch.bodies) {
    offset = writeVarint(out, offset, body.byteLength);
    out.set(body, offset);
    offset += body.byteLength;
  }
  return out;
}

/** Bytes read per socket read; the decoder copies what it keeps, so one buffer serves a link. */
const READ_CHUNK_BYTES = 8 * 1024;

/** The link's next received bytes, from its own chunks or read into one buffer of the link's. */
function readerOf(link: ByteLink): () => Promise<Uint8Array | null> {
  if (link.readChunk) return () => link.readChunk!();
  const buffer = new Uint8Array(READ_CHUNK_BYTES);
  return async () => {
    const n = await link.read(buffer);
    return n === null ? null : buffer.subarray(0, n);
  };
}

/** The close reason of a connection its peer ended (end of stream). */
export const PEER_CLOSED = "peer closed";
/** The close reason of a connection its peer's host reset (its process died mid-exchange). */
export const PEER_RESET = "peer reset";

/**
 * True for a close the peer's end caused (it closed or reset the socket: its process ended, or
 * it gave up on the link itself), as opposed to one this side decided (missed heartbeats) or a
 * failed read; what that means for the peer's work is the caller's to judge.
 */
export function closedByPeer(reason: string): boolean {
  return reason === PEER_CLOSED || reason === PEER_RESET;
}
