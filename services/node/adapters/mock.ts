/**
 * The deterministic mock adapter: answers any target by echoing the prompt's words, then filler
 * words `tok<i>`, one delta per token, with configurable latency and fault knobs.
 *
 * The answer for a prompt and a token count is {@linkcode mockAnswer}: token `i` is the prompt's
 * word `i` when there is one, else `tok<i>`; every delta after the first starts with a space, so
 * the concatenated deltas read `"hello world tok2 tok3"`. Run metadata overrides the settings per
 * run: `mock.tokens`, `mock.token_delay_ms`, `mock.start_delay_ms`, `mock.fail_with` (an error
 * code; empty = succeed), `mock.fail_retryable` (`true`/`false`) and `mock.fail_after` (fail after
 * emitting that many tokens; default 0, i.e. before the first).
 *
 * A run with images answers as if it saw them: its answer's words begin with "I see 2 images."
 * (the count of image parts in all its messages) before the prompt's. An embedding run answers
 * {@linkcode mockEmbedding} of each input, one vector per token slot (the same delays and
 * `fail_after`, counted in vectors), `dimensions` long or `embedding_dimensions` by default,
 * with the inputs' word count as its input tokens.
 *
 * Between tokens (and vectors) it waits while its sink has no room (`EventSink.ready`), as a
 * backend does whose reader stalled.
 * @module
 */
import { IopError, isErrorCode } from "../../../shared/errors.ts";
import { MAX_MOCK_EMBEDDING_DIMENSIONS, mockFeatures } from "../../../shared/adapter_kinds/mock.ts";
import type { ChatMessage, EmbedInput } from "../../../shared/run.ts";
import { deterministicEmbedding } from "../../../shared/deterministic_embedding.ts";
import { probeMock } from "./health.ts";
import { refuseUnhonoured } from "./model_run.ts";
import { effectivePrompt } from "./prompt.ts";
import { roomIn } from "./room.ts";
import type {
  Adapter,
  AdapterConfig,
  Capabilities,
  Clock,
  EventSink,
  ExecuteOptions,
  ExecutionResult,
  ExecutionSpec,
  MockSettings,
} from "../ports.ts";

/** Waits `ms` milliseconds, rejecting with `signal.reason` when aborted and leaving no timer. */
export type SleepFn = (ms: number, signal: AbortSignal) => Promise<void>;

/** Options of {@linkcode createMockAdapter}; both default to real time. */
export interface MockAdapterOptions {
  /** Source of "now" used to schedule tokens against absolute deadlines (so delays never drift). */
  clock?: Clock;
  /** How the adapter waits; replaced in tests to run on fake time. */
  sleep?: SleepFn;
}

/** Settings after applying one run's `mock.*` metadata. */
interface RunKnobs {
  tokens: number;
  tokenDelayMs: number;
  startDelayMs: number;
  failWith: string;
  failRetryable: boolean;
  failAfter: number;
}

const systemClock: Clock = { now: () => Date.now() };

/** Waits on a real timer; the timer is cleared on abort so nothing outlives the run. */
export const realSleep: SleepFn = (ms, signal) =>
  new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });

function words(text: string): string[] {
  return text.split(/\s+/).filter((w) => w !== "");
}

/** The deltas the mock emits for `prompt` and `tokens` (see the module doc). */
export function mockDeltas(prompt: string, tokens: number): string[] {
  const echo = words(prompt);
  return Array.from({ length: tokens }, (_, i) => (i === 0 ? "" : " ") + (echo[i] ?? `tok${i}`));
}

/** What the mock says first when a run's messages hold images: "I see 2 images." */
export function mockImageNote(messages: readonly ChatMessage[]): string {
  const n = messages.reduce(
    (sum, m) => sum + (m.parts?.filter((p) => p.type === "image").length ?? 0),
    0,
  );
  return n === 0 ? "" : `I see ${n} image${n === 1 ? "" : "s"}.`;
}

/**
 * The mock's vector for `text`, `dimensions` long: the same text always embeds to the same unit
 * vector of float32 values (what the wire carries), and different texts almost never do; the
 * fake model servers answer the same ({@linkcode deterministicEmbedding}).
 */
export const mockEmbedding: (text: string, dimensions: number) => number[] = deterministicEmbedding;

/** The full answer of the mock: its deltas concatenated. */
export function mockAnswer(prompt: string, tokens: number): string {
  return mockDeltas(prompt, tokens).join("");
}

function intKnob(metadata: Record<string, string>, key: string, fallback: number): number {
  const raw = metadata[key];
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (raw.trim() === "" || !Number.isSafeInteger(value) || value < 0) {
    throw new IopError(
      "INVALID_ARGUMENT",
      `Cannot run mock as '${key}' must be a non-negative integer: current value is '${raw}'`,
    );
  }
  return value;
}

function boolKnob(metadata: Record<string, string>, key: string, fallback: boolean): boolean {
  const raw = metadata[key];
  if (raw === undefined) return fallback;
  if (raw === "true") return true;
  if (raw === "false") return false;
  throw new IopError(
    "INVALID_ARGUMENT",
    `Cannot run mock as '${key}' must be 'true' or 'false': current value is '${raw}'`,
  );
}

function knobs(settings: MockSettings, metadata: Record<string, string>): RunKnobs {
  return {
    tokens: intKnob(metadata, "mock.tokens", settings.tokens),
    tokenDelayMs: intKnob(metadata, "mock.token_delay_ms", settings.tokenDelayMs),
    startDelayMs: intKnob(metadata, "mock.start_delay_ms", settings.startDelayMs),
    failWith: metadata["mock.fail_with"] ?? settings.failWith,
    failRetryable: boolKnob(metadata, "mock.fail_retryable", settings.failRetryable),
    failAfter: intKnob(metadata, "mock.fail_after", 0),
  };
}

function configuredFailure(k: RunKnobs, emitted: number): IopError {
  // An unknown code still fails the run, as a backend error that names what was asked for.
  const code = isErrorCode(k.failWith) ? k.failWith : "BACKEND_ERROR";
  return new IopError(
    code,
    `Mock run failed as configured: fail_with is '${k.failWith}' after ${emitted} tokens`,
    { retryable: k.failRetryable },
  );
}

/** Creates a mock adapter named `name`; it accepts any target (the advertised one is "echo"). */
export function createMockAdapter(
  name: string,
  settings: MockSettings,
  options: MockAdapterOptions = {},
): Adapter {
  const clock = options.clock ?? systemClock;
  const sleep = options.sleep ?? realSleep;

  const waitUntil = async (deadline: number, signal: AbortSignal) => {
    const ms = deadline - clock.now();
    if (ms > 0) await sleep(ms, signal);
    // A zero wait still yields, so an abort between tokens is seen before the next delta.
    else if (signal.aborted) throw signal.reason;
  };

  /** An embedding run: one vector per input, paced and failing like tokens. */
  const embed = async (
    input: EmbedInput,
    k: RunKnobs,
    sink: EventSink,
    signal: AbortSignal,
  ): Promise<ExecutionResult> => {
    const dimensions = input.dimensions ?? settings.embeddingDimensions;
    if (dimensions > MAX_MOCK_EMBEDDING_DIMENSIONS) {
      throw new IopError(
        "INVALID_ARGUMENT",
        `Cannot embed as dimensions: mock makes at most ${MAX_MOCK_EMBEDDING_DIMENSIONS} ` +
          `values per vector: asked for ${dimensions}`,
      );
    }
    const failing = k.failWith !== "";
    const start = clock.now();
    for (const [index, text] of input.inputs.entries()) {
      const room = roomIn(sink, signal);
      if (room) await room;
      await waitUntil(start + k.startDelayMs + index * k.tokenDelayMs, signal);
      if (failing && index >= k.failAfter) throw configuredFailure(k, index);
      sink.embedding(index, mockEmbedding(text, dimensions));
    }
    if (failing) throw configuredFailure(k, input.inputs.length);
    const inputTokens = input.inputs.reduce((sum, text) => sum + words(text).length, 0);
    return { finishReason: "stop", usage: { inputTokens, outputTokens: 0 } };
  };

  return {
    name,
    kind: "mock",
    probe: ({ signal }) => probeMock(signal),
    capabilities({ signal }): Promise<Capabilities> {
      if (signal.aborted) return Promise.reject(signal.reason);
      return Promise.resolve({
        targets: ["echo"],
        streaming: true,
        tools: mockFeatures.tools,
        sessions: false,
        healthy: true,
        detail: "deterministic mock; any target works and echoes the prompt's words",
      });
    },
    async execute(
      spec: ExecutionSpec,
      sink: EventSink,
      { signal }: ExecuteOptions,
    ): Promise<ExecutionResult> {
      if (signal.aborted) throw signal.reason;
      // Echoed words are not JSON and the mock calls no tools: refuse rather than fake it.
      refuseUnhonoured("mock", mockFeatures, spec);
      const k = knobs(settings, spec.metadata);
      if (spec.embed) return await embed(spec.embed, k, sink, signal);
      const prompt = effectivePrompt(spec);
      const maxTokens = spec.sampling.maxTokens;
      const limited = maxTokens !== undefined && maxTokens < k.tokens;
      const note = mockImageNote(spec.messages);
      const deltas = mockDeltas(
        note ? `${note} ${prompt}` : prompt,
        limited ? maxTokens : k.tokens,
      );
      const failing = k.failWith !== "";

      const start = clock.now();
      let emitted = 0;
      for (const delta of deltas) {
        // A consumer without room stops the mock as it stops a backend; its schedule does not
        // move, so tokens overdue after a long wait come at once, as from a server's buffer.
        const room = roomIn(sink, signal);
        if (room) await room;
        // The failure comes when the next token would, so a failing run keeps its latency.
        await waitUntil(start + k.startDelayMs + emitted * k.tokenDelayMs, signal);
        if (failing && emitted >= k.failAfter) throw configuredFailure(k, emitted);
        sink.output(delta);
        emitted++;
      }
      if (failing) throw configuredFailure(k, emitted);
      return {
        finishReason: limited ? "length" : "stop",
        usage: { inputTokens: words(prompt).length, outputTokens: emitted },
      };
    },
  };
}

/** Builds a mock adapter from its configuration, for the adapter registry. */
export function mockAdapterFactory(config: AdapterConfig): Adapter {
  if (config.kind !== "mock") {
    throw new TypeError(`Cannot build a mock adapter from kind '${config.kind}'`);
  }
  return createMockAdapter(config.name, config.settings);
}
