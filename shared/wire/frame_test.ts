import assert from "node:assert/strict";
import { create, type DescMessage, ScalarType, toBinary } from "@bufbuild/protobuf";
import { EdgeEnvelopeSchema } from "../../proto/gen/iop/v1/control_pb.ts";
import { type NodeEnvelope, NodeEnvelopeSchema } from "../../proto/gen/iop/v1/node_pb.ts";
import { decodeFrames, encodeFrame, FrameDecoder, FrameError } from "./frame.ts";

function envelope(i: number, text = `delta ${i}`) {
  return create(NodeEnvelopeSchema, {
    msg: {
      case: "runEvent",
      value: { runId: "run_1", seq: BigInt(i), event: { case: "output", value: { text } } },
    },
  });
}

async function* chunksOf(bytes: Uint8Array, size: number): AsyncGenerator<Uint8Array> {
  for (let i = 0; i < bytes.length; i += size) yield bytes.slice(i, i + size);
}

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

async function collect<T>(gen: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of gen) out.push(item);
  return out;
}

function seqs(messages: NodeEnvelope[]): number[] {
  return messages.map((m) => (m.msg.case === "runEvent" ? Number(m.msg.value.seq) : -1));
}

Deno.test("decodeFrames() reassembles frames fed one byte at a time", async () => {
  const stream = concat([1, 2, 3].map((i) => encodeFrame(NodeEnvelopeSchema, envelope(i))));
  const messages = await collect(decodeFrames(NodeEnvelopeSchema, chunksOf(stream, 1)));
  assert.deepEqual(seqs(messages), [1, 2, 3]);
});

Deno.test("decodeFrames() splits many frames coalesced into one chunk", async () => {
  const frames = Array.from(
    { length: 100 },
    (_, i) => encodeFrame(NodeEnvelopeSchema, envelope(i + 1)),
  );
  const messages = await collect(
    decodeFrames(NodeEnvelopeSchema, chunksOf(concat(frames), 1 << 20)),
  );
  assert.equal(messages.length, 100);
  assert.deepEqual(seqs(messages), Array.from({ length: 100 }, (_, i) => i + 1));
});

Deno.test("decodeFrames() handles frames straddling odd chunk boundaries", async () => {
  const stream = concat(
    Array.from(
      { length: 20 },
      (_, i) => encodeFrame(NodeEnvelopeSchema, envelope(i + 1, "x".repeat(i * 37))),
    ),
  );
  for (const size of [2, 3, 7, 64, 129]) {
    const messages = await collect(decodeFrames(NodeEnvelopeSchema, chunksOf(stream, size)));
    assert.equal(messages.length, 20, `chunk size ${size}`);
  }
});

Deno.test("decodeFrames() accepts a frame exactly at the limit and rejects one byte over", async () => {
  const frame = encodeFrame(NodeEnvelopeSchema, envelope(1, "y".repeat(500)));
  const bodyBytes = toBinary(NodeEnvelopeSchema, envelope(1, "y".repeat(500))).length;
  const ok = await collect(
    decodeFrames(NodeEnvelopeSchema, chunksOf(frame, 16), { maxFrameBytes: bodyBytes }),
  );
  assert.equal(ok.length, 1);
  await assert.rejects(
    collect(
      decodeFrames(NodeEnvelopeSchema, chunksOf(frame, 16), { maxFrameBytes: bodyBytes - 1 }),
    ),
    (err: unknown) =>
      err instanceof FrameError && err.kind === "oversize" && /exceeds the limit/.test(err.message),
  );
});

Deno.test("decodeFrames() rejects an oversize length prefix before the body arrives", async () => {
  // A varint announcing 1 GiB, followed by nothing: must fail without waiting for the body.
  const prefix = new Uint8Array([0x80, 0x80, 0x80, 0x80, 0x04]);
  async function* onlyPrefix() {
    yield prefix;
    await new Promise(() => {}); // never sends the body
  }
  await assert.rejects(
    collect(decodeFrames(NodeEnvelopeSchema, onlyPrefix(), { maxFrameBytes: 1024 })),
    (err: unknown) => err instanceof FrameError && err.kind === "oversize",
  );
});

Deno.test("decodeFrames() reports a stream that ends inside a frame as truncated", async () => {
  const frame = encodeFrame(NodeEnvelopeSchema, envelope(1));
  await assert.rejects(
    collect(decodeFrames(NodeEnvelopeSchema, chunksOf(frame.slice(0, frame.length - 2), 4))),
    (err: unknown) => err instanceof FrameError && err.kind === "truncated",
  );
});

Deno.test("decodeFrames() reports undecodable bodies as malformed", async () => {
  // Length 3, then a field tag with wire type 7 (invalid).
  const bad = new Uint8Array([3, 0x0f, 0x01, 0x02]);
  await assert.rejects(
    collect(decodeFrames(NodeEnvelopeSchema, chunksOf(bad, 4))),
    (err: unknown) => err instanceof FrameError && err.kind === "malformed",
  );
});

Deno.test("decodeFrames() rejects a varint length longer than ten bytes as malformed", async () => {
  const bad = new Uint8Array(12).fill(0xff);
  await assert.rejects(
    collect(decodeFrames(NodeEnvelopeSchema, chunksOf(bad, 12))),
    (err: unknown) => err instanceof FrameError && err.kind === "malformed",
  );
});

Deno.test("FrameDecoder keeps messages intact when the caller reuses its read buffer", () => {
  const stream = concat(
    Array.from({ length: 30 }, (_, i) => encodeFrame(NodeEnvelopeSchema, envelope(i + 1))),
  );
  const decoder = new FrameDecoder(NodeEnvelopeSchema);
  const buffer = new Uint8Array(7);
  const messages: NodeEnvelope[] = [];
  for (let i = 0; i < stream.length; i += buffer.length) {
    const n = Math.min(buffer.length, stream.length - i);
    buffer.set(stream.subarray(i, i + n));
    messages.push(...decoder.push(buffer.subarray(0, n)));
    buffer.fill(0xee); // what the next socket read would do to the bytes
  }
  decoder.end();
  assert.deepEqual(seqs(messages), Array.from({ length: 30 }, (_, i) => i + 1));
  assert.deepEqual(
    messages.map((m) =>
      m.msg.case === "runEvent" && m.msg.value.event.case === "output"
        ? m.msg.value.event.value.text
        : ""
    ),
    Array.from({ length: 30 }, (_, i) => `delta ${i + 1}`),
  );
});

Deno.test("FrameDecoder returns the good frames before a bad one, then throws", () => {
  const good = encodeFrame(NodeEnvelopeSchema, envelope(1));
  const decoder = new FrameDecoder(NodeEnvelopeSchema, { maxFrameBytes: 64 });
  const messages = decoder.push(concat([good, new Uint8Array([0x80, 0x01])]));
  assert.deepEqual(seqs(messages), [1]);
  assert.throws(
    () => decoder.check(),
    (err: unknown) => err instanceof FrameError && err.kind === "oversize",
  );
});

Deno.test("wire messages have no bytes fields, which would alias the reused read buffer", () => {
  const seen = new Set<string>();
  const walk = (desc: DescMessage) => {
    if (seen.has(desc.typeName)) return;
    seen.add(desc.typeName);
    for (const field of desc.fields) {
      const scalar = field.fieldKind === "scalar" || field.fieldKind === "list" ||
          field.fieldKind === "map"
        ? (field as { scalar?: ScalarType }).scalar
        : undefined;
      assert.notEqual(scalar, ScalarType.BYTES, `${desc.typeName}.${field.name} is bytes`);
      if (field.fieldKind === "message") walk(field.message);
      if (field.fieldKind === "list" && field.listKind === "message") walk(field.message);
      if (field.fieldKind === "map" && field.mapKind === "message") walk(field.message);
    }
  };
  walk(NodeEnvelopeSchema);
  walk(EdgeEnvelopeSchema);
  assert.ok(seen.size > 20, `walked ${seen.size} message types`);
});

Deno.test("a frame split over many small chunks decodes whole, and the limit can be raised", () => {
  const big = create(NodeEnvelopeSchema, {
    msg: {
      case: "runEvent",
      value: {
        runId: "r",
        seq: 1n,
        event: { case: "output", value: { text: "x".repeat(300_000) } },
      },
    },
  });
  const bytes = encodeFrame(NodeEnvelopeSchema, big);
  const small = new FrameDecoder(NodeEnvelopeSchema, { maxFrameBytes: 16 * 1024 });
  assert.throws(() => small.push(bytes.subarray(0, 10)), /exceeds the limit/);

  const decoder = new FrameDecoder(NodeEnvelopeSchema, { maxFrameBytes: 16 * 1024 });
  decoder.maxFrameBytes = 1024 * 1024;
  const out = [];
  for (let i = 0; i < bytes.byteLength; i += 997) {
    out.push(...decoder.push(bytes.subarray(i, i + 997)));
  }
  assert.equal(out.length, 1);
  const msg = out[0]!.msg;
  assert.equal(
    msg.case === "runEvent" && msg.value.event.case === "output"
      ? msg.value.event.value.text.length
      : 0,
    300_000,
  );
  assert.equal(decoder.pending, false);
});
