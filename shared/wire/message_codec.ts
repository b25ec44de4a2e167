/**
 * How a link's messages become frame bodies and back.
 *
 * protobuf-es encodes and decodes by reflection over the schema, about 1.5 µs per run event each
 * way, and a streamed answer is mostly run events: output deltas, by the thousand per second on
 * a busy link. So the node wire's envelope has a codec of its own for exactly those: an
 * envelope that carries run events, whose output deltas it reads field by field with the
 * library's `BinaryReader` and writes sized in one pass, two to three times faster. Everything
 * else (other envelopes, other events, any field it does not expect) goes through protobuf-es
 * as before, and a test holds both paths to the same bytes and messages.
 * @module
 */
import { type DescMessage, fromBinary, type MessageShape, toBinary } from "@bufbuild/protobuf";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";
import {
  type NodeEnvelope,
  NodeEnvelopeSchema,
  type RunEvent,
  RunEventSchema,
} from "../../proto/gen/iop/v1/node_pb.ts";

/** Encodes and decodes one schema's messages (frame bodies, without the length prefix). */
export interface MessageCodec<Desc extends DescMessage> {
  encode(message: MessageShape<Desc>): Uint8Array;
  /** Throws on bytes that are not a message of the schema. */
  decode(body: Uint8Array): MessageShape<Desc>;
}

/** The codec of `schema`: the node envelope's own, or protobuf-es. */
export function codecOf<Desc extends DescMessage>(schema: Desc): MessageCodec<Desc> {
  if ((schema as DescMessage) === NodeEnvelopeSchema) {
    return nodeEnvelopeCodec as unknown as MessageCodec<Desc>;
  }
  return {
    encode: (message) => toBinary(schema, message),
    decode: (body) => fromBinary(schema, body, { readUnknownFields: false }),
  };
}

// Field numbers, from proto/iop/v1/node.proto. Strings are read strictly, as protobuf-es reads
// proto3 strings: bytes that are not UTF-8 are refused, not replaced.
const ENVELOPE_CORRELATION_ID = 1;
const ENVELOPE_RUN_EVENT = 15;
const ENVELOPE_RUN_EVENTS = 19;
const BATCH_EVENTS = 1;
const EVENT_RUN_ID = 1;
const EVENT_SEQ = 2;
const EVENT_TIMESTAMP_MS = 3;
const EVENT_OUTPUT = 11;
const OUTPUT_TEXT = 1;

const genericEnvelope = {
  encode: (message: NodeEnvelope) => toBinary(NodeEnvelopeSchema, message),
  decode: (body: Uint8Array) => fromBinary(NodeEnvelopeSchema, body, { readUnknownFields: false }),
};

const nodeEnvelopeCodec: MessageCodec<typeof NodeEnvelopeSchema> = {
  encode(message) {
    const msg = message.msg;
    if (message.correlationId !== 0n) return genericEnvelope.encode(message);
    if (msg.case === "runEvent") {
      const event = eventBody(msg.value);
      if (!event) return genericEnvelope.encode(message);
      const out = new Uint8Array(1 + varintSize(event.size) + event.size);
      out[0] = ENVELOPE_RUN_EVENT << 3 | WireType.LengthDelimited;
      event.write(out, writeVarint(out, 1, event.size));
      return out;
    }
    if (msg.case === "runEvents") {
      const events: Sized[] = [];
      let batchSize = 0;
      for (const wire of msg.value.events) {
        const event = eventBody(wire);
        if (!event) return genericEnvelope.encode(message);
        events.push(event);
        batchSize += 1 + varintSize(event.size) + event.size;
      }
      const tag = ENVELOPE_RUN_EVENTS << 3 | WireType.LengthDelimited;
      const out = new Uint8Array(varintSize(tag) + varintSize(batchSize) + batchSize);
      let pos = writeVarint(out, writeVarint(out, 0, tag), batchSize);
      for (const event of events) {
        out[pos++] = BATCH_EVENTS << 3 | WireType.LengthDelimited;
        pos = event.write(out, writeVarint(out, pos, event.size));
      }
      return out;
    }
    return genericEnvelope.encode(message);
  },
  decode(body) {
    // Bytes the fast path does not take as they are, well-formed or not, are protobuf-es's to
    // read or refuse: the two never disagree.
    let envelope: NodeEnvelope | undefined;
    try {
      envelope = readEnvelope(body);
    } catch {
      envelope = undefined;
    }
    return envelope ?? genericEnvelope.decode(body);
  },
};

/** Bytes of known size, and how to write them at `pos` (returning the position after). */
interface Sized {
  size: number;
  write(out: Uint8Array, pos: number): number;
}

const textEncoder = new TextEncoder();

/** Copies `bytes` as they are. */
function sizedBytes(bytes: Uint8Array): Sized {
  return {
    size: bytes.byteLength,
    write: (out, pos) => {
      out.set(bytes, pos);
      return pos + bytes.byteLength;
    },
  };
}

/**
 * The body of `event` (without its tag and length) as protobuf-es writes it: fields in order,
 * defaults left out. An output delta is sized and written here in one pass, any other event by
 * protobuf-es; undefined for a seq or timestamp this writer does not take (negative, or past
 * 2^53), which the caller leaves to protobuf-es too.
 */
function eventBody(event: RunEvent): Sized | undefined {
  if (event.event.case !== "output") return sizedBytes(toBinary(RunEventSchema, event));
  const seq = safeInteger(event.seq);
  const timestampMs = safeInteger(event.timestampMs);
  if (seq === undefined || timestampMs === undefined) return undefined;
  const runId = utf8(event.runId);
  const text = utf8(event.event.value.text);
  const output = text.size === 0 ? 0 : 1 + varintSize(text.size) + text.size;
  const size = (runId.size === 0 ? 0 : 1 + varintSize(runId.size) + runId.size) +
    (seq === 0 ? 0 : 1 + varintSize(seq)) +
    (timestampMs === 0 ? 0 : 1 + varintSize(timestampMs)) +
    1 + varintSize(output) + output;
  return {
    size,
    write: (out, start) => {
      let pos = start;
      if (runId.size > 0) {
        out[pos++] = EVENT_RUN_ID << 3 | WireType.LengthDelimited;
        pos = runId.write(out, writeVarint(out, pos, runId.size));
      }
      if (seq !== 0) {
        out[pos++] = EVENT_SEQ << 3 | WireType.Varint;
        pos = writeVarint(out, pos, seq);
      }
      if (timestampMs !== 0) {
        out[pos++] = EVENT_TIMESTAMP_MS << 3 | WireType.Varint;
        pos = writeVarint(out, pos, timestampMs);
      }
      out[pos++] = EVENT_OUTPUT << 3 | WireType.LengthDelimited;
      pos = writeVarint(out, pos, output);
      if (text.size > 0) {
        out[pos++] = OUTPUT_TEXT << 3 | WireType.LengthDelimited;
        pos = text.write(out, writeVarint(out, pos, text.size));
      }
      return pos;
    },
  };
}

/** `value` as a number when it is an integer from 0 to 2^53 - 1, else undefined. */
function safeInteger(value: bigint): number | undefined {
  return value >= 0n && value <= MAX_SAFE ? Number(value) : undefined;
}

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/** A string as UTF-8: ASCII copied char by char, anything else encoded once. */
function utf8(text: string): Sized {
  for (let i = 0; i < text.length; i++) {
    if (text.charCodeAt(i) > 0x7f) return sizedBytes(textEncoder.encode(text));
  }
  return {
    size: text.length,
    write: (out, pos) => {
      for (let i = 0; i < text.length; i++) out[pos + i] = text.charCodeAt(i);
      return pos + text.length;
    },
  };
}

/** Bytes of the varint of `n`, an integer from 0 to 2^53 - 1. */
function varintSize(n: number): number {
  let size = 1;
  while (n >= 0x80) {
    n = Math.floor(n / 128);
    size++;
  }
  return size;
}

/** Writes the varint of `n` (an integer from 0 to 2^53 - 1) at `pos`; returns the end. */
function writeVarint(out: Uint8Array, pos: number, n: number): number {
  while (n >= 0x80) {
    out[pos++] = (n % 128) | 0x80;
    n = Math.floor(n / 128);
  }
  out[pos++] = n;
  return pos;
}

/**
 * The envelope of one run event or a batch, or undefined when `body` holds anything else (then
 * protobuf-es decodes it, and judges it).
 */
function readEnvelope(body: Uint8Array): NodeEnvelope | undefined {
  const reader = new BinaryReader(body);
  let correlationId = 0n;
  let msg: NodeEnvelope["msg"] | undefined;
  while (reader.pos < reader.len) {
    const [field, wireType] = reader.tag();
    if (field === ENVELOPE_CORRELATION_ID && wireType === WireType.Varint) {
      correlationId = BigInt(reader.uint64());
      continue;
    }
    // A oneof seen twice is merged by protobuf-es; that rare case is left to it.
    if (msg !== undefined || wireType !== WireType.LengthDelimited) return undefined;
    if (field === ENVELOPE_RUN_EVENT) {
      const event = readRunEvent(reader, body, reader.uint32() + reader.pos);
      msg = { case: "runEvent", value: event };
    } else if (field === ENVELOPE_RUN_EVENTS) {
      const end = reader.uint32() + reader.pos;
      if (end > body.byteLength) return undefined;
      const events: RunEvent[] = [];
      while (reader.pos < end) {
        const [batchField, batchWireType] = reader.tag();
        if (batchField !== BATCH_EVENTS || batchWireType !== WireType.LengthDelimited) {
          return undefined;
        }
        events.push(readRunEvent(reader, body, reader.uint32() + reader.pos));
      }
      if (reader.pos !== end) return undefined;
      msg = { case: "runEvents", value: { $typeName: "iop.v1.RunEventBatch", events } };
    } else {
      return undefined;
    }
  }
  if (msg === undefined) return undefined;
  return { $typeName: "iop.v1.NodeEnvelope", correlationId, msg };
}

/**
 * The run event in `body` from `reader.pos` to `end`: an output delta read here, any other by
 * protobuf-es.
 */
function readRunEvent(reader: BinaryReader, body: Uint8Array, end: number): RunEvent {
  // A length past the body's end: protobuf-es refuses the whole envelope.
  if (end > body.byteLength) throw new RangeError("run event past the end of the frame");
  const start = reader.pos;
  let runId = "";
  let seq = 0n;
  let timestampMs = 0n;
  let text: string | undefined;
  while (reader.pos < end) {
    const [field, wireType] = reader.tag();
    if (field === EVENT_RUN_ID && wireType === WireType.LengthDelimited) {
      runId = reader.string(true);
    } else if (field === EVENT_SEQ && wireType === WireType.Varint) seq = BigInt(reader.uint64());
    else if (field === EVENT_TIMESTAMP_MS && wireType === WireType.Varint) {
      timestampMs = BigInt(reader.int64());
    } else if (
      field === EVENT_OUTPUT && wireType === WireType.LengthDelimited && text === undefined
    ) {
      text = readOutputText(reader, reader.uint32() + reader.pos);
      if (text === undefined) break;
    } else {
      text = undefined;
      break;
    }
  }
  if (text === undefined || reader.pos !== end) {
    reader.pos = end;
    return fromBinary(RunEventSchema, body.subarray(start, end), {
      readUnknownFields: false,
    });
  }
  return {
    $typeName: "iop.v1.RunEvent",
    runId,
    seq,
    timestampMs,
    event: { case: "output", value: { $typeName: "iop.v1.OutputDelta", text } },
  };
}

/** The text of an OutputDelta ending at `end`, or undefined when it holds any other field. */
function readOutputText(reader: BinaryReader, end: number): string | undefined {
  let text = "";
  while (reader.pos < end) {
    const [field, wireType] = reader.tag();
    if (field !== OUTPUT_TEXT || wireType !== WireType.LengthDelimited) return undefined;
    text = reader.string(true);
  }
  return reader.pos === end ? text : undefined;
}
