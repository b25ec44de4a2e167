/**
 * What every model-server adapter that embeds shares: one request to the backend's embeddings
 * endpoint, its answer read under a byte cap ({@linkcode MAX_EMBEDDINGS_ANSWER_BYTES}), the
 * vectors checked against what the run asked for, and handed to the sink in input order.
 *
 * How those events become wire frames is the transport's business: the Node's event outbox
 * (`transport/event_outbox.ts`) splits them into frames under the link's limit, and fails a run
 * whose single vector cannot fit one.
 * @module
 */
import { IopError } from "../../../shared/errors.ts";
import type { EmbedInput } from "../../../shared/run.ts";
import type { EventSink, ExecutionResult } from "../ports.ts";
import { postJson, type PostOptions, readJson, type RequestGuard } from "./http_stream.ts";

/**
 * The largest embeddings answer read from a backend: 64 MiB, about 1,000 vectors of 3,072
 * values as JSON floats, or 4,000 as base64. A larger one fails the run rather than hold the
 * Node's memory.
 */
export const MAX_EMBEDDINGS_ANSWER_BYTES = 64 * 1024 * 1024;

/** One backend's embeddings request and how to read its answer. */
export interface EmbeddingsCall {
  url: string;
  body: unknown;
  post: PostOptions;
  /** Who answers, as messages name it ("Ollama", "the model server"). */
  backend: string;
  /** The answer's vectors (one per input, in input order, not yet checked) and input tokens. */
  read(answer: unknown): { vectors: unknown; inputTokens: number };
  /** Defaults to {@linkcode MAX_EMBEDDINGS_ANSWER_BYTES}. */
  maxAnswerBytes?: number;
}

/**
 * Runs `call` under `guard` and relays the checked vectors of `embed`'s inputs to `sink`. The
 * answer counts as the run's first token (TTFT; the first-token limit bounds the whole answer).
 */
export async function relayEmbeddings(
  call: EmbeddingsCall,
  embed: EmbedInput,
  guard: RequestGuard,
  sink: EventSink,
): Promise<ExecutionResult> {
  const res = await postJson(call.url, call.body, guard, call.post);
  const answer = await readJson(res, guard, call.url, {
    maxBytes: call.maxAnswerBytes ?? MAX_EMBEDDINGS_ANSWER_BYTES,
    what: "the embeddings answer",
  });
  const { vectors, inputTokens } = call.read(answer ?? {});
  const checked = checkedVectors(vectors, embed, call.backend);
  guard.token();
  for (const [index, values] of checked.entries()) {
    // Vectors are large: each one waits for room in the sink, as streamed deltas do.
    const wait = sink.ready();
    if (wait) await guard.roomFrom(wait);
    // A limit may have passed while the answer was parsed.
    if (guard.signal.aborted) throw guard.signal.reason;
    sink.embedding(index, values);
  }
  return { finishReason: "stop", usage: { inputTokens, outputTokens: 0 } };
}

/** "Cannot relay the embeddings as `backend` answered `what`", a BACKEND_ERROR. */
export function relayError(backend: string, what: string): IopError {
  return new IopError(
    "BACKEND_ERROR",
    `Cannot relay the embeddings as ${backend} answered ${what}`,
  );
}

function count(n: number, noun: string): string {
  return `${n} ${noun}${n === 1 ? "" : "s"}`;
}

/**
 * The vectors of `raw` (one per input, in input order) once they hold what `embed` asked for:
 * as many as there are inputs, non-empty lists of finite numbers, all as long as the first, and
 * `dimensions` values each when it was given (a model that cannot shorten its vectors answers
 * its own length, which is refused rather than relayed as if honoured).
 */
export function checkedVectors(raw: unknown, embed: EmbedInput, backend: string): number[][] {
  const inputs = embed.inputs.length;
  if (!Array.isArray(raw) || raw.length !== inputs) {
    const got = Array.isArray(raw) ? count(raw.length, "vector") : "no vectors";
    throw relayError(backend, `${got} for ${count(inputs, "input")}`);
  }
  const length = Array.isArray(raw[0]) ? raw[0].length : 0;
  for (const [index, vector] of raw.entries()) {
    if (
      !Array.isArray(vector) || vector.length === 0 ||
      !vector.every((v) => typeof v === "number" && isFinite(v))
    ) {
      throw relayError(backend, `a vector that is not a list of numbers for input ${index}`);
    }
    if (vector.length !== length) {
      throw relayError(
        backend,
        `vectors of different lengths: ${length} values for input 0, ${vector.length} for ` +
          `input ${index}`,
      );
    }
  }
  if (embed.dimensions !== undefined && length !== embed.dimensions) {
    throw new IopError(
      "INVALID_ARGUMENT",
      `Cannot embed as dimensions: ${backend} answered ${length} values per vector, ` +
        `not the ${embed.dimensions} asked for`,
    );
  }
  return raw as number[][];
}

/** True on a little-endian host, where float32 bytes can be read in place. */
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/**
 * The float32 values of base64 text (little-endian, as OpenAI's `encoding_format: base64`) that
 * `backend` answered for input `index`.
 */
export function float32FromBase64(text: string, backend: string, index: number): number[] {
  let binary: string;
  try {
    binary = atob(text);
  } catch {
    throw relayError(backend, `a vector that is not base64 for input ${index}`);
  }
  if (binary.length % 4 !== 0) {
    throw relayError(
      backend,
      `a base64 vector of ${binary.length} bytes for input ${index}, not whole float32 values`,
    );
  }
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  if (LITTLE_ENDIAN) return Array.from(new Float32Array(bytes.buffer));
  const view = new DataView(bytes.buffer);
  return Array.from({ length: bytes.byteLength / 4 }, (_, i) => view.getFloat32(i * 4, true));
}
