/**
 * The node envelope's own codec against protobuf-es: for every kind of envelope (run events of
 * each type alone and in batches, other messages, unexpected fields, cut bytes) it writes the
 * same bytes and reads the same messages, or fails where the library fails.
 */
import assert from "node:assert/strict";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import {
  type NodeEnvelope,
  NodeEnvelopeSchema,
  RunEventBatchSchema,
} from "../../proto/gen/iop/v1/node_pb.ts";
import type { RunEvent } from "../run.ts";
import { toWireRunEvent } from "../run_codec.ts";
import { codecOf } from "./message_codec.ts";

const codec = codecOf(NodeEnvelopeSchema);
const library = (body: Uint8Array) =>
  fromBinary(NodeEnvelopeSchema, body, { readUnknownFields: false });

const RUN = "run_3f2b8c1d9e4a4b7f8c6d5e4f3a2b1c0d";
const base = (seq: number) => ({ runId: RUN, seq, timestampMs: 1_764_000_000_000 + seq });
const EVENTS: RunEvent[] = [
  { ...base(1), type: "started", nodeId: "n1", adapter: "up", target: "mock-gpt" },
  { ...base(2), type: "output", text: " hello" },
  { ...base(3), type: "output", text: "" },
  { ...base(4), type: "output", text: "ünïcødé ✓ 🎉 ".repeat(40) },
  {
    ...base(5),
    type: "tool_call",
    call: { index: 0, id: "c1", name: "f", arguments: "{}" },
  },
  { ...base(6), type: "usage", usage: { inputTokens: 3, outputTokens: 9 } },
  { ...base(7), type: "completed", finishReason: "stop", exitCode: 0 },
  { runId: "", seq: 0, timestampMs: 0, type: "output", text: "x" },
  { ...base(2 ** 40), type: "output", text: "a big seq" },
];

const envelopes: NodeEnvelope[] = [
  ...EVENTS.map((e) =>
    create(NodeEnvelopeSchema, { msg: { case: "runEvent", value: toWireRunEvent(e) } })
  ),
  create(NodeEnvelopeSchema, {
    msg: {
      case: "runEvents",
      value: create(RunEventBatchSchema, { events: EVENTS.map(toWireRunEvent) }),
    },
  }),
  create(NodeEnvelopeSchema, {
    msg: {
      case: "runEvents",
      value: create(RunEventBatchSchema, { events: EVENTS.slice(1, 3).map(toWireRunEvent) }),
    },
  }),
  create(NodeEnvelopeSchema, { msg: { case: "runEvents", value: create(RunEventBatchSchema) } }),
  // Past 2^53, and negative: numbers this codec leaves to protobuf-es.
  create(NodeEnvelopeSchema, {
    msg: { case: "runEvent", value: { ...toWireRunEvent(EVENTS[1]!), seq: 2n ** 60n } },
  }),
  create(NodeEnvelopeSchema, {
    msg: { case: "runEvent", value: { ...toWireRunEvent(EVENTS[1]!), timestampMs: -1n } },
  }),
  create(NodeEnvelopeSchema, {
    correlationId: 7n,
    msg: { case: "runEvent", value: toWireRunEvent(EVENTS[1]!) },
  }),
  create(NodeEnvelopeSchema, {
    msg: { case: "heartbeat", value: { sentAtMs: 5n, runsInFlight: 2 } },
  }),
  create(NodeEnvelopeSchema, {
    msg: { case: "cancelRequest", value: { runId: RUN, reason: "x" } },
  }),
  create(NodeEnvelopeSchema),
];

Deno.test("every envelope is written byte for byte as protobuf-es writes it", () => {
  for (const envelope of envelopes) {
    assert.deepEqual(codec.encode(envelope), toBinary(NodeEnvelopeSchema, envelope));
  }
});

Deno.test("every envelope reads back as protobuf-es reads it", () => {
  for (const envelope of envelopes) {
    const body = toBinary(NodeEnvelopeSchema, envelope);
    assert.deepEqual(codec.decode(body), library(body));
  }
});

Deno.test("an output delta with a field this codec does not know reads as protobuf-es reads it", () => {
  const writer = new BinaryWriter();
  writer.tag(19, WireType.LengthDelimited).fork();
  writer.tag(1, WireType.LengthDelimited).fork();
  writer.tag(1, WireType.LengthDelimited).string(RUN);
  writer.tag(2, WireType.Varint).uint64(4n);
  writer.tag(11, WireType.LengthDelimited).fork();
  writer.tag(1, WireType.LengthDelimited).string("hi");
  writer.tag(9, WireType.Varint).int32(1); // a field of a later OutputDelta
  writer.join();
  writer.tag(99, WireType.LengthDelimited).string("later"); // and of a later RunEvent
  writer.join().join();
  const body = writer.finish();
  const decoded = codec.decode(body);
  assert.deepEqual(decoded, library(body));
  assert.equal(decoded.msg.case, "runEvents");
});

Deno.test("cut or corrupted bytes fail as they fail in protobuf-es, and never read differently", () => {
  const outcome = (decode: () => unknown) => {
    try {
      return { ok: decode() };
    } catch {
      return { failed: true };
    }
  };
  const same = (body: Uint8Array, what: string) =>
    assert.deepEqual(outcome(() => codec.decode(body)), outcome(() => library(body)), what);
  for (const [n, envelope] of envelopes.entries()) {
    const full = toBinary(NodeEnvelopeSchema, envelope);
    for (let cut = 0; cut < full.byteLength; cut++) {
      same(full.subarray(0, cut), `#${n} cut at ${cut}`);
    }
    // Every byte one higher (a length that runs past its end, among others), and set to 0xff.
    for (let i = 0; i < full.byteLength; i++) {
      for (const change of [(b: number) => (b + 1) & 0xff, () => 0xff]) {
        const body = full.slice();
        body[i] = change(body[i]!);
        same(body, `#${n} byte ${i}`);
      }
    }
  }
});
