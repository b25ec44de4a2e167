/**
 * The event outbox on real protobuf encoding: every frame it sends fits the link's frame limit,
 * whatever many runs emit at once; events keep their order; small events still share frames.
 */
import assert from "node:assert/strict";
import { setImmediate } from "node:timers";
import { create, toBinary } from "@bufbuild/protobuf";
import {
  type NodeEnvelope,
  NodeEnvelopeSchema,
  RunEventSchema,
} from "../../../proto/gen/iop/v1/node_pb.ts";
import { IopError } from "../../../shared/errors.ts";
import type { RunEvent } from "../../../shared/run.ts";
import { toWireRunEvent } from "../../../shared/run_codec.ts";
import { DEFAULT_MAX_FRAME_BYTES } from "../../../shared/wire/frame.ts";
import { eventOutbox, refuseOversized } from "./event_outbox.ts";
import { estimatedEventBytes } from "../../../shared/run_event_size.ts";

/** An outbox whose frames are encoded as the link would, with their sizes and events. */
function recordingOutbox(maxFrameBytes: number, batches = true) {
  const sizes: number[] = [];
  const events: { runId: string; seq: bigint; case: string; index?: number }[] = [];
  const send = (msg: NodeEnvelope["msg"]) => {
    sizes.push(toBinary(NodeEnvelopeSchema, create(NodeEnvelopeSchema, { msg })).length);
    const wire = msg.case === "runEvents"
      ? msg.value.events
      : msg.case === "runEvent"
      ? [msg.value]
      : [];
    for (const e of wire) {
      events.push({
        runId: e.runId,
        seq: e.seq,
        case: e.event.case ?? "",
        ...(e.event.case === "embedding" ? { index: e.event.value.index } : {}),
      });
    }
  };
  return { emit: eventOutbox(send, { batches, maxFrameBytes }).emit, sizes, events };
}

/**
 * Lets the outbox's end-of-turn flush run: immediates run in order, so this one comes after the
 * flush the outbox queued when it was given events (a 0 ms timer may fire before it).
 */
const settle = () => new Promise((resolve) => setImmediate(resolve));

/** `length` float32 values (all alike: only the size matters here). */
function vector(length: number, seed: number): number[] {
  return new Array(length).fill(Math.fround(1 / (seed + 3)));
}

const embedding = (runId: string, seq: number, index: number, values: number[]): RunEvent => ({
  runId,
  seq,
  timestampMs: 1,
  type: "embedding",
  index,
  values,
});

Deno.test("a 1000 × 3072 embedding answer leaves in frames under the limit, in order", async () => {
  const out = recordingOutbox(DEFAULT_MAX_FRAME_BYTES);
  // Emitted in one task, as an adapter relays a parsed answer.
  for (let i = 0; i < 1000; i++) out.emit(embedding("r1", i + 1, i, vector(3072, i)));
  await settle();
  assert.equal(out.events.length, 1000);
  assert.deepEqual(out.events.map((e) => e.index), Array.from({ length: 1000 }, (_, i) => i));
  assert.ok(out.sizes.length >= 3, `${out.sizes.length} frames for 12 MB`);
  for (const size of out.sizes) assert.ok(size <= DEFAULT_MAX_FRAME_BYTES, `a frame of ${size}`);
});

Deno.test("several runs' big vectors emitted in one task still leave in frames under the limit", async () => {
  const out = recordingOutbox(DEFAULT_MAX_FRAME_BYTES);
  // 8 runs × 2 vectors of 250,000 values: 16 MB pushed before any flush.
  for (let v = 0; v < 2; v++) {
    for (let r = 0; r < 8; r++) out.emit(embedding(`run-${r}`, v + 1, v, vector(250_000, r)));
  }
  await settle();
  assert.equal(out.events.length, 16);
  for (let r = 0; r < 8; r++) {
    const mine = out.events.filter((e) => e.runId === `run-${r}`);
    assert.deepEqual(mine.map((e) => e.index), [0, 1]);
  }
  for (const size of out.sizes) assert.ok(size <= DEFAULT_MAX_FRAME_BYTES, `a frame of ${size}`);
});

Deno.test("a smaller configured frame limit bounds the frames, batched or not", async () => {
  for (const batches of [true, false]) {
    const out = recordingOutbox(64 * 1024, batches);
    for (let i = 0; i < 100; i++) out.emit(embedding("r1", i + 1, i, vector(3072, i)));
    await settle();
    assert.equal(out.events.length, 100);
    for (const size of out.sizes) assert.ok(size <= 64 * 1024, `a frame of ${size}`);
  }
});

Deno.test("an event no frame can hold is refused with its size and the link's limit", () => {
  assert.doesNotThrow(() => refuseOversized(embedding("r1", 1, 0, vector(10, 1)), 100, 64 * 1024));
  const big = embedding("r1", 2, 0, vector(20_000, 1));
  assert.throws(
    () => refuseOversized(big, estimatedEventBytes(big), 64 * 1024),
    (err: unknown) => {
      assert.ok(err instanceof IopError);
      assert.equal(err.code, "BACKEND_ERROR");
      assert.equal(
        err.message,
        "Cannot send the embedding event of run 'r1' as it takes about 80070 bytes, more " +
          "than the link's frame limit of 65536 bytes (edge.max_frame_bytes)",
      );
      return true;
    },
  );
});

Deno.test("small events of one task share one frame; without batches each is its own", async () => {
  const deltas = (emit: (e: RunEvent) => void) => {
    for (let i = 1; i <= 3; i++) {
      emit({ runId: "r1", seq: i, timestampMs: 1, type: "output", text: ` tok${i}` });
    }
  };
  const batched = recordingOutbox(DEFAULT_MAX_FRAME_BYTES);
  deltas(batched.emit);
  await settle();
  assert.equal(batched.sizes.length, 1);
  assert.equal(batched.events.length, 3);
  const single = recordingOutbox(DEFAULT_MAX_FRAME_BYTES, false);
  deltas(single.emit);
  assert.equal(single.sizes.length, 3);
});

Deno.test("an answer's output and its completion a few promise hops later share one frame", async () => {
  const out = recordingOutbox(DEFAULT_MAX_FRAME_BYTES);
  out.emit({ runId: "r1", seq: 1, timestampMs: 1, type: "output", text: "whole answer" });
  // As the adapter's promise settles and the node turns its result into the terminal event.
  for (let hop = 0; hop < 5; hop++) await Promise.resolve();
  out.emit({
    runId: "r1",
    seq: 2,
    timestampMs: 1,
    type: "completed",
    finishReason: "stop",
    exitCode: 0,
  });
  await settle();
  assert.equal(out.sizes.length, 1);
  assert.deepEqual(out.events.map((e) => e.case), ["output", "completed"]);
});

Deno.test("the size estimate is never below an event's encoded size", () => {
  const long = "ünïcødé ✓ 🎉 ".repeat(500);
  const events: RunEvent[] = [
    { type: "started", nodeId: "n1", adapter: "a", target: "t" },
    { type: "output", text: "hi" },
    { type: "output", text: long },
    { type: "output", text: "🎉".repeat(400) },
    { type: "tool_call", call: { index: 3, id: "call_1", name: "f", arguments: long } },
    { type: "log", stream: "stderr", text: long },
    { type: "usage", usage: { inputTokens: 2 ** 31, outputTokens: 2 ** 31 } },
    { type: "embedding", index: 2 ** 31, values: vector(3072, 1) },
    {
      type: "completed",
      finishReason: "tool_calls",
      exitCode: -1,
      usage: { inputTokens: 2 ** 31, outputTokens: 2 ** 31 },
    },
    { type: "failed", code: "BACKEND_ERROR", message: long, retryable: true, exitCode: -1 },
    { type: "cancelled", reason: long },
  ].map((e) =>
    ({ ...e, runId: "run_0123456789abcdef", seq: 2 ** 40, timestampMs: 2 ** 42 }) as RunEvent
  );
  for (const event of events) {
    const encoded = toBinary(RunEventSchema, toWireRunEvent(event)).length;
    // Inside a batch an event also takes its field tag and length (at most 6 bytes).
    assert.ok(estimatedEventBytes(event) >= encoded + 6, `${event.type}: ${encoded}`);
  }
});
