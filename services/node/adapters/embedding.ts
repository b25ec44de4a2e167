/**
 * What every adapter that embeds shares: checking the vectors a backend answered against what
 * the run asked for, and relaying them to the sink in input order without building one huge
 * frame.
 *
 * The Node's outbox sends the events emitted in one task as one wire frame, and a receiver
 * refuses a frame over its limit (4 MiB by default) by closing the link, which would end every
 * run on it. A thousand 3072-value vectors are 12 MiB, so {@linkcode EmbeddingRelay} lets a
 * task pass after each ~1 MiB of values: the batches stay well under the limit and the batching
 * rule itself is unchanged.
 * @module
 */
import { IopError } from "../../../shared/errors.ts";
import type { EmbedInput } from "../../../shared/run.ts";
import type { EventSink } from "../ports.ts";

/** Values relayed in one task before the relay lets the outbox send them (4 bytes each). */
const VALUES_PER_TASK = 256 * 1024;

/** The longest vector relayed: one embedding event must fit in a frame on its own. */
export const MAX_EMBEDDING_VALUES = 512 * 1024;

/**
 * Sends one run's vectors to its sink: at once while the current task has sent less than ~1 MiB
 * of values (so small vectors still share a frame), after a task boundary when it has.
 */
export class EmbeddingRelay {
  readonly #sink: EventSink;
  readonly #signal: AbortSignal;
  #pending = 0;

  constructor(sink: EventSink, signal: AbortSignal) {
    this.#sink = sink;
    this.#signal = signal;
  }

  /**
   * Sends the vector of input `index`, synchronously unless this task's budget is spent (then
   * the returned promise resolves once it is sent); throws the signal's reason once aborted.
   */
  send(index: number, values: number[]): Promise<void> | undefined {
    if (this.#pending > 0 && this.#pending + values.length > VALUES_PER_TASK) {
      return nextTask().then(() => {
        this.#pending = 0;
        this.#emit(index, values);
      });
    }
    this.#emit(index, values);
    return undefined;
  }

  /** Sends every vector in order. */
  async sendAll(vectors: readonly number[][]): Promise<void> {
    for (const [index, values] of vectors.entries()) {
      const later = this.send(index, values);
      if (later) await later;
    }
  }

  #emit(index: number, values: number[]): void {
    if (this.#signal.aborted) throw this.#signal.reason;
    this.#sink.embedding(index, values);
    this.#pending += values.length;
  }
}

function nextTask(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 0));
}

/**
 * The vectors of `raw` (one per input, in input order) once they hold what `embed` asked for:
 * as many as there are inputs, finite numbers, and `dimensions` values each when it was given
 * (a model that cannot shorten its vectors answers its own length, which is refused rather than
 * relayed as if honoured).
 */
export function checkedVectors(raw: unknown, embed: EmbedInput, backend: string): number[][] {
  if (!Array.isArray(raw) || raw.length !== embed.inputs.length) {
    const got = Array.isArray(raw) ? raw.length : "no";
    throw new IopError(
      "BACKEND_ERROR",
      `${backend} answered ${got} embeddings for ${embed.inputs.length} inputs`,
    );
  }
  for (const [index, vector] of raw.entries()) {
    if (!Array.isArray(vector) || !vector.every((v) => typeof v === "number" && isFinite(v))) {
      throw new IopError(
        "BACKEND_ERROR",
        `${backend} answered an embedding that is not a list of numbers for input ${index}`,
      );
    }
    if (vector.length > MAX_EMBEDDING_VALUES) {
      throw new IopError(
        "BACKEND_ERROR",
        `Cannot relay the embedding of input ${index} as it has ${vector.length} values, ` +
          `more than ${MAX_EMBEDDING_VALUES}`,
      );
    }
    if (embed.dimensions !== undefined && vector.length !== embed.dimensions) {
      throw new IopError(
        "INVALID_ARGUMENT",
        `Cannot embed as dimensions: ${backend} answered ${vector.length} values per vector, ` +
          `not the ${embed.dimensions} asked for`,
      );
    }
  }
  return raw as number[][];
}

/** The float32 values of base64 text (little-endian, as OpenAI's `encoding_format: base64`). */
export function float32FromBase64(text: string): number[] {
  let bytes: Uint8Array;
  try {
    bytes = Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
  } catch {
    throw new IopError("BACKEND_ERROR", "Model server sent an embedding that is not base64");
  }
  if (bytes.byteLength % 4 !== 0) {
    throw new IopError(
      "BACKEND_ERROR",
      `Model server sent a base64 embedding of ${bytes.byteLength} bytes, not whole float32s`,
    );
  }
  const view = new DataView(bytes.buffer);
  return Array.from({ length: bytes.byteLength / 4 }, (_, i) => view.getFloat32(i * 4, true));
}
