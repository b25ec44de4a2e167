/**
 * Length-delimited protobuf frames: a varint byte length, then one encoded message. Oversize
 * frames are rejected from their length prefix, before their body is buffered.
 * @module
 */
import { type DescMessage, fromBinary, type MessageShape } from "@bufbuild/protobuf";
import { sizeDelimitedDecodeStream, sizeDelimitedEncode } from "@bufbuild/protobuf/wire";

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
  return sizeDelimitedEncode(schema, message);
}

/** Options of {@linkcode decodeFrames}. */
export interface DecodeFramesOptions {
  /** Largest accepted frame body in bytes; defaults to {@linkcode DEFAULT_MAX_FRAME_BYTES}. */
  maxFrameBytes?: number;
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
  const maxFrameBytes = options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES;
  const frames = sizeDelimitedDecodeStream(schema, source, {
    readMaxBytes: maxFrameBytes,
    readUnknownFields: false,
  });
  while (true) {
    let next: IteratorResult<MessageShape<Desc>>;
    try {
      next = await frames.next();
    } catch (err) {
      throw classify(err, maxFrameBytes);
    }
    if (next.done) return;
    yield next.value;
  }
}

function classify(err: unknown, maxFrameBytes: number): Error {
  if (!(err instanceof Error)) return new FrameError("malformed", String(err));
  if (err.message.includes("readMaxBytes")) {
    return new FrameError(
      "oversize",
      `Cannot accept frame as it exceeds the limit: ${
        err.message.match(/size (\d+)/)?.[1]
      } bytes > ${maxFrameBytes}`,
      { cause: err },
    );
  }
  if (err.message === "incomplete data") {
    return new FrameError("truncated", "Cannot decode frame as the stream ended inside it", {
      cause: err,
    });
  }
  if (isStreamError(err)) return err;
  return new FrameError("malformed", `Cannot decode frame: ${err.message}`, { cause: err });
}

function isStreamError(err: Error): boolean {
  return err instanceof Deno.errors.ConnectionReset ||
    err instanceof Deno.errors.BrokenPipe ||
    err instanceof Deno.errors.Interrupted ||
    err instanceof Deno.errors.BadResource ||
    err.name === "AbortError";
}

/** Decodes a single frame body (no length prefix); used by tests and tools. */
export function decodeFrameBody<Desc extends DescMessage>(
  schema: Desc,
  body: Uint8Array,
): MessageShape<Desc> {
  try {
    return fromBinary(schema, body, { readUnknownFields: false });
  } catch (err) {
    throw new FrameError("malformed", `Cannot decode frame: ${(err as Error).message}`, {
      cause: err,
    });
  }
}
