/**
 * Length-delimited protobuf frames: a varint byte length, then one encoded message. Oversize
 * frames are rejected from their length prefix, before their body is buffered.
 *
 * Decoding is synchronous ({@linkcode FrameDecoder}): one socket read yields every frame it
 * completes, with no promise per frame and no copy unless a frame straddles two reads.
 * @module
 */
import type { DescMessage, MessageShape } from "@bufbuild/protobuf";
import { codecOf, type MessageCodec } from "./message_codec.ts";

/** Default largest frame a peer may send: 4 MiB. */
export const DEFAULT_MAX_FRAME_BYTES = 4 * 1024 * 1024;

/** Why a byte stream could not be read as frames. */
export type FrameErrorKind = "oversize" | "malformed" | "truncated";

/** A peer sent bytes that are not a valid frame; the connection must be closed. */
export class FrameError extends Error {
  readonly kind: FrameErrorKind;
  constructor(kind: FrameErrorKind, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "FrameError";
    this.kind = kind;
  }
}

/** Encodes one message as a frame. */
export function encodeFrame<Desc extends DescMessage>(
  schema: Desc,
  message: MessageShape<Desc>,
): Uint8Array {
  const body = codecOf(schema).encode(message);
  const frame = new Uint8Array(varintSize(body.byteLength) + body.byteLength);
  frame.set(body, writeVarint(frame, 0, body.byteLength));
  return frame;
}

/** Bytes of the varint encoding of `n` (a non-negative 32-bit integer). */
export function varintSize(n: number): number {
  let size = 1;
  while (n > 0x7f) {
    n >>>= 7;
    size++;
  }
  return size;
}

/** Writes `n` as a varint at `offset`; returns the offset after it. */
export function writeVarint(into: Uint8Array, offset: number, n: number): number {
  while (n > 0x7f) {
    into[offset++] = (n & 0x7f) | 0x80;
    n >>>= 7;
  }
  into[offset++] = n;
  return offset;
}

/** Options of {@linkcode FrameDecoder} and {@linkcode decodeFrames}. */
export interface DecodeFramesOptions {
  /** Largest accepted frame body in bytes; defaults to {@linkcode DEFAULT_MAX_FRAME_BYTES}. */
  maxFrameBytes?: number;
}

/** Longest varint length prefix accepted: 5 bytes hold any 32-bit length. */
const MAX_PREFIX_BYTES = 5;

/** First allocation for a frame body that spans chunks; it doubles as bytes arrive. */
const INITIAL_BODY_BYTES = 16 * 1024;

/**
 * Splits a byte stream into frames and decodes them, however the stream is cut into chunks.
 * Strings are copied out of the chunk, so the caller may reuse its read buffer at once; the
 * messages must have no `bytes` fields, which would alias it (a test guards the schemas).
 */
export class FrameDecoder<Desc extends DescMessage> {
  readonly #codec: MessageCodec<Desc>;
  #maxFrameBytes: number;
  /** Bytes of a length prefix cut by the end of a chunk (at most 4). */
  #prefixPart: Uint8Array | undefined;
  /**
   * The body of a frame whose prefix was read but whose bytes are still arriving. It grows by
   * doubling as bytes come, so a large frame is copied a bounded number of times (not once per
   * chunk) and a peer that announces a large frame but sends little holds little memory.
   */
  #body: { bytes: Uint8Array; filled: number; size: number } | undefined;
  /** A bad frame met after good ones, thrown by the next call once those were delivered. */
  #failure: FrameError | undefined;

  constructor(schema: Desc, options: DecodeFramesOptions = {}) {
    this.#codec = codecOf(schema);
    this.#maxFrameBytes = options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES;
  }

  /** True while part of a frame is buffered. */
  get pending(): boolean {
    return this.#prefixPart !== undefined || this.#body !== undefined;
  }

  /** The largest frame body accepted from the next prefix on (e.g. raised after a login). */
  set maxFrameBytes(bytes: number) {
    this.#maxFrameBytes = bytes;
  }

  /**
   * Decodes every frame that `chunk` completes, in order. Throws {@linkcode FrameError} on an
   * oversize length (from the prefix alone), a bad prefix, or an undecodable body; when good
   * frames came before the bad one, they are returned first and the error is thrown by the
   * next call (see {@linkcode FrameDecoder.check}).
   */
  push(chunk: Uint8Array): MessageShape<Desc>[] {
    this.check();
    const out: MessageShape<Desc>[] = [];
    try {
      let bytes = chunk;
      let offset = 0;
      if (this.#body) {
        offset = this.#fill(chunk);
        if (this.#body.filled < this.#body.size) return out;
        const body = this.#body.bytes.subarray(0, this.#body.size);
        this.#body = undefined;
        out.push(this.#decode(body));
      } else if (this.#prefixPart) {
        bytes = new Uint8Array(this.#prefixPart.byteLength + chunk.byteLength);
        bytes.set(this.#prefixPart);
        bytes.set(chunk, this.#prefixPart.byteLength);
        this.#prefixPart = undefined;
      }
      while (offset < bytes.byteLength) {
        const head = this.#prefix(bytes, offset);
        if (head === undefined) {
          this.#prefixPart = bytes.slice(offset);
          break;
        }
        const start = offset + head.prefixBytes;
        const end = start + head.size;
        if (end > bytes.byteLength) {
          const initial = Math.min(
            head.size,
            Math.max(INITIAL_BODY_BYTES, 2 * (bytes.byteLength - start)),
          );
          this.#body = { bytes: new Uint8Array(initial), filled: 0, size: head.size };
          this.#fill(bytes.subarray(start));
          break;
        }
        out.push(this.#decode(bytes.subarray(start, end)));
        offset = end;
      }
    } catch (err) {
      if (out.length === 0) throw err;
      this.#failure = err as FrameError;
      return out;
    }
    return out;
  }

  /** Copies the start of `chunk` into the frame body being collected; returns the bytes used. */
  #fill(chunk: Uint8Array): number {
    const body = this.#body!;
    const take = Math.min(body.size - body.filled, chunk.byteLength);
    if (body.filled + take > body.bytes.byteLength) {
      const grown = new Uint8Array(
        Math.min(body.size, Math.max(2 * body.bytes.byteLength, body.filled + take)),
      );
      grown.set(body.bytes.subarray(0, body.filled));
      body.bytes = grown;
    }
    body.bytes.set(chunk.subarray(0, take), body.filled);
    body.filled += take;
    return take;
  }

  /** Throws the bad frame that followed the good frames of the last push, if there was one. */
  check(): void {
    const failure = this.#failure;
    if (failure) throw failure;
  }

  /** Ends the stream; throws a truncated {@linkcode FrameError} when it ended inside a frame. */
  end(): void {
    this.check();
    if (this.pending) {
      this.#prefixPart = undefined;
      this.#body = undefined;
      throw new FrameError("truncated", "Cannot decode frame as the stream ended inside it");
    }
  }

  /** The length prefix at `offset`, or undefined while it is incomplete. */
  #prefix(bytes: Uint8Array, offset: number): { size: number; prefixBytes: number } | undefined {
    let size = 0;
    for (let i = 0; i < MAX_PREFIX_BYTES; i++) {
      if (offset + i >= bytes.byteLength) return undefined;
      const b = bytes[offset + i]!;
      size += (b & 0x7f) * 2 ** (7 * i);
      if (b < 0x80) {
        if (size > this.#maxFrameBytes) {
          throw new FrameError(
            "oversize",
            `Cannot accept frame as it exceeds the limit: ${size} bytes > ${this.#maxFrameBytes}`,
          );
        }
        return { size, prefixBytes: i + 1 };
      }
    }
    throw new FrameError(
      "malformed",
      `Cannot decode frame as its length prefix is longer than ${MAX_PREFIX_BYTES} bytes`,
    );
  }

  #decode(body: Uint8Array): MessageShape<Desc> {
    return decodeWith(this.#codec, body);
  }
}

/**
 * Yields the messages of a byte stream, however its frames are split or coalesced across chunks.
 * Throws {@linkcode FrameError} on an oversize length, undecodable bytes, or a stream that ends
 * inside a frame.
 */
export async function* decodeFrames<Desc extends DescMessage>(
  schema: Desc,
  source: AsyncIterable<Uint8Array>,
  options: DecodeFramesOptions = {},
): AsyncGenerator<MessageShape<Desc>> {
  const decoder = new FrameDecoder(schema, options);
  for await (const chunk of source) {
    yield* decoder.push(chunk);
    decoder.check();
  }
  decoder.end();
}

/** Decodes a single frame body (no length prefix); undecodable bytes are a malformed frame. */
export function decodeFrameBody<Desc extends DescMessage>(
  schema: Desc,
  body: Uint8Array,
): MessageShape<Desc> {
  return decodeWith(codecOf(schema), body);
}

function decodeWith<Desc extends DescMessage>(
  codec: MessageCodec<Desc>,
  body: Uint8Array,
): MessageShape<Desc> {
  try {
    return codec.decode(body);
  } catch (err) {
    throw new FrameError("malformed", `Cannot decode frame: ${(err as Error).message}`, {
      cause: err,
    });
  }
}
