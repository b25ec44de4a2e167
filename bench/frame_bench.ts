/**
 * Frame encode/decode cost on the Edge↔Node link: a typical streamed output event (the hottest
 * frame) and a run request (a chat with a system prompt and a few turns). Decoding runs through
 * `decodeFrames` over a byte stream cut into 1,460-byte chunks (one TCP segment each), so frames
 * are split and coalesced across reads as they are on a real socket.
 *
 * Run: `deno bench -A bench/frame_bench.ts`
 * @module
 */
import { create } from "@bufbuild/protobuf";
import { NodeEnvelopeSchema } from "../proto/gen/iop/v1/node_pb.ts";
import { runInput } from "../shared/run.ts";
import { toRunRequest, toWireRunEvent } from "../shared/run_codec.ts";
import { decodeFrames, encodeFrame } from "../shared/wire/frame.ts";

/** Frames decoded per iteration of the decode benchmarks. */
const BATCH = 100;
const SEGMENT = 1_460;
const RUN_ID = "run_3f2b8c1d9e4a4b7f8c6d5e4f3a2b1c0d";

const outputFrame = create(NodeEnvelopeSchema, {
  msg: {
    case: "runEvent",
    value: toWireRunEvent({
      type: "output",
      text: " streaming",
      runId: RUN_ID,
      seq: 42,
      timestampMs: Date.now(),
    }),
  },
});

const requestFrame = create(NodeEnvelopeSchema, {
  msg: {
    case: "runRequest",
    value: toRunRequest(
      RUN_ID,
      runInput({
        adapter: "ollama",
        target: "llama3.2",
        messages: [
          {
            role: "system",
            content: "You are a concise assistant for an operations team. ".repeat(4),
          },
          { role: "user", content: "Summarise the deployment log of service api-gateway." },
          { role: "assistant", content: "The rollout finished in 3 minutes with no errors." },
          { role: "user", content: "Which nodes restarted, and why?" },
        ],
        sampling: { temperature: 0.2, maxTokens: 512 },
        metadata: { client: "openai", request_id: "req_0123456789" },
      }),
    ),
  },
});

const outputBytes = encodeFrame(NodeEnvelopeSchema, outputFrame);
const requestBytes = encodeFrame(NodeEnvelopeSchema, requestFrame);

function segments(frame: Uint8Array): Uint8Array[] {
  const all = new Uint8Array(frame.byteLength * BATCH);
  for (let i = 0; i < BATCH; i++) all.set(frame, i * frame.byteLength);
  const out: Uint8Array[] = [];
  for (let i = 0; i < all.byteLength; i += SEGMENT) out.push(all.subarray(i, i + SEGMENT));
  return out;
}

async function* replay(chunks: Uint8Array[]): AsyncGenerator<Uint8Array> {
  yield* chunks;
}

async function decodeAll(chunks: Uint8Array[]): Promise<void> {
  let n = 0;
  for await (const _ of decodeFrames(NodeEnvelopeSchema, replay(chunks))) n++;
  if (n !== BATCH) throw new Error(`decoded ${n} frames, expected ${BATCH}`);
}

const outputSegments = segments(outputBytes);
const requestSegments = segments(requestBytes);

Deno.bench({
  name: `encode RunEvent output frame (${outputBytes.byteLength} B)`,
  group: "encode",
  baseline: true,
  fn: () => void encodeFrame(NodeEnvelopeSchema, outputFrame),
});
Deno.bench({
  name: `encode RunRequest frame (${requestBytes.byteLength} B)`,
  group: "encode",
  fn: () => void encodeFrame(NodeEnvelopeSchema, requestFrame),
});
Deno.bench({
  name: `decode ${BATCH} RunEvent output frames from ${SEGMENT} B chunks`,
  group: "decode",
  baseline: true,
  fn: async () => await decodeAll(outputSegments),
});
Deno.bench({
  name: `decode ${BATCH} RunRequest frames from ${SEGMENT} B chunks`,
  group: "decode",
  fn: async () => await decodeAll(requestSegments),
});
