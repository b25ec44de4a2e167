/**
 * Test cases every model-server adapter must pass against its fake server: error mapping,
 * a backend dying mid-stream, cancellation seen by the server as a closed connection (while
 * streaming, before the first token, and without streaming), and each time limit; and the
 * embedding cases of `http_embedding_cases.ts`. Test files call {@linkcode httpAdapterCases}
 * once per adapter.
 * @module
 */
import assert from "node:assert/strict";
import { IopError } from "../../../shared/errors.ts";
import type { FakeBehavior, FakeServer } from "../../../shared/testing/fake_model_server.ts";
import type { Adapter, ExecutionSpec, HttpModelSettings } from "../ports.ts";
import { recordingSink, specFor } from "./contract_case.ts";
import { embeddingCases } from "./http_embedding_cases.ts";
import type { ModelAdapterOptions } from "./model_run.ts";

/** A fake server plus how to change one model's behaviour. */
export interface FakeHandle extends FakeServer {
  setBehavior(model: string, behavior: FakeBehavior): void;
}

/** How the cases reach one adapter and its fake. */
export interface HttpAdapterSubject {
  /** A served model name. */
  model: string;
  /** Where the backend embeds (`/api/embed`, `/v1/embeddings`). */
  embedPath: string;
  startFake(): FakeHandle;
  /** The base URL to give the adapter for a fake at `url`. */
  baseUrl?(url: string): string;
  create(settings: HttpModelSettings, options?: ModelAdapterOptions): Adapter;
}

/** Runs one case: a fresh fake with `behavior`, an adapter on it, and a spec for its model. */
export type CaseRunner = (
  behavior: FakeBehavior,
  limits: Partial<HttpModelSettings>,
  body: (ctx: { fake: FakeHandle; adapter: Adapter; spec: ExecutionSpec }) => Promise<void>,
  spec?: Partial<ExecutionSpec>,
  options?: ModelAdapterOptions,
) => () => Promise<void>;

/** Settings with every limit off, pointed at `baseUrl`. */
export function settingsFor(
  baseUrl: string,
  partial: Partial<HttpModelSettings> = {},
): HttpModelSettings {
  return {
    baseUrl,
    apiKey: "",
    apiKeyEnv: "",
    connectTimeoutMs: 0,
    firstTokenTimeoutMs: 0,
    idleTimeoutMs: 0,
    models: [],
    ...partial,
  };
}

/** A signal that never aborts. */
export function never(): AbortSignal {
  return new AbortController().signal;
}

/** Awaits `promise`'s rejection and checks it is an IopError with `code`. */
export async function rejectsWith(promise: Promise<unknown>, code: string): Promise<IopError> {
  const err = await promise.then(() => assert.fail(`expected ${code}, run completed`), (e) => e);
  assert.ok(err instanceof IopError, `expected IopError ${code}, got ${String(err)}`);
  assert.equal(err.code, code, `${err.code}: ${err.message}`);
  return err;
}

/** Resolves with `promise`, or fails the test when it takes longer than `ms`. */
export async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} took longer than ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** A free local port nothing listens on. */
export function closedPort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

/** Registers the shared cases for one adapter, each named `${name}: <behaviour>`. */
export function httpAdapterCases(name: string, subject: HttpAdapterSubject): void {
  const run: CaseRunner = (behavior, limits, body, spec = {}, options = {}) => async () => {
    await using fake = subject.startFake();
    fake.setBehavior(subject.model, behavior);
    const base = subject.baseUrl?.(fake.url) ?? fake.url;
    const adapter = subject.create(settingsFor(base, limits), options);
    const full = specFor({
      adapter: name,
      target: subject.model,
      messages: [{ role: "user", content: "hello there" }],
      ...spec,
    });
    await body({ fake, adapter, spec: full });
  };

  const errorCases: [string, FakeBehavior, string, boolean][] = [
    [
      "429 as OVERLOADED, retryable",
      { errorStatus: 429, errorMessage: "slow down" },
      "OVERLOADED",
      true,
    ],
    ["503 as OVERLOADED, retryable", { overloaded: true }, "OVERLOADED", true],
    [
      "400 as INVALID_ARGUMENT",
      { errorStatus: 400, errorMessage: "bad temperature" },
      "INVALID_ARGUMENT",
      false,
    ],
    [
      "401 as UNAUTHENTICATED",
      { errorStatus: 401, errorMessage: "who are you" },
      "UNAUTHENTICATED",
      false,
    ],
    [
      "500 as BACKEND_ERROR, retryable",
      { errorStatus: 500, errorMessage: "kaput" },
      "BACKEND_ERROR",
      true,
    ],
  ];
  for (const [label, behavior, code, retryable] of errorCases) {
    Deno.test(
      `${name}: maps HTTP ${label}`,
      run(behavior, {}, async ({ adapter, spec }) => {
        const err = await rejectsWith(
          adapter.execute(spec, recordingSink(), { signal: never() }),
          code,
        );
        assert.equal(err.retryable, retryable);
        if (behavior.errorMessage) assert.equal(err.message, behavior.errorMessage);
      }),
    );
  }

  Deno.test(
    `${name}: maps an unknown model to NOT_FOUND with the backend's message`,
    run({}, {}, async ({ adapter, spec }) => {
      const err = await rejectsWith(
        adapter.execute({ ...spec, target: "no-such-model" }, recordingSink(), { signal: never() }),
        "NOT_FOUND",
      );
      assert.match(err.message, /no-such-model/);
      assert.equal(err.retryable, false);
    }),
  );

  Deno.test(`${name}: an unreachable server fails with UNAVAILABLE, retryable`, async () => {
    const adapter = subject.create(settingsFor(`http://127.0.0.1:${closedPort()}`));
    const spec = specFor({ target: subject.model, messages: [{ role: "user", content: "x" }] });
    const err = await rejectsWith(
      adapter.execute(spec, recordingSink(), { signal: never() }),
      "UNAVAILABLE",
    );
    assert.equal(err.retryable, true);
    const caps = await adapter.capabilities({ signal: never() });
    assert.equal(caps.healthy, false);
  });

  Deno.test(
    `${name}: an error in the stream fails the run with the backend's message`,
    run(
      { tokens: 5, failAfterChunks: 2, failMessage: "CUDA out of memory" },
      {},
      async ({ adapter, spec }) => {
        const sink = recordingSink();
        const err = await rejectsWith(
          adapter.execute(spec, sink, { signal: never() }),
          "BACKEND_ERROR",
        );
        assert.equal(err.message, "CUDA out of memory");
        assert.deepEqual(sink.deltas, ["tok0", " tok1"]);
      },
    ),
  );

  Deno.test(
    `${name}: a backend dying mid-stream fails the run at once instead of hanging`,
    run(
      { tokens: 5, disconnectAfterChunks: 2 },
      {},
      async ({ adapter, spec }) => {
        const sink = recordingSink();
        const err = await within(
          rejectsWith(adapter.execute(spec, sink, { signal: never() }), "BACKEND_ERROR"),
          1000,
          "failing after the disconnect",
        );
        assert.match(err.message, /mid-stream/);
        assert.deepEqual(sink.deltas, ["tok0", " tok1"]);
      },
    ),
  );

  const cancelCases: [string, FakeBehavior, Partial<ExecutionSpec>, boolean][] = [
    ["while streaming", { tokens: 200, chunkDelayMs: 20 }, {}, true],
    ["before the first token", { firstTokenDelayMs: 10_000 }, {}, false],
    ["before the response headers", { headersDelayMs: 10_000 }, {}, false],
    [
      "of a non-streaming request",
      { firstTokenDelayMs: 10_000 },
      { wholeAnswer: true },
      false,
    ],
  ];
  for (const [moment, behavior, spec, waitForOutput] of cancelCases) {
    Deno.test(
      `${name}: cancel ${moment} closes the server's connection within 1 s`,
      run(
        behavior,
        {},
        async ({ fake, adapter, spec: full }) => {
          const sink = recordingSink();
          const controller = new AbortController();
          const execution = adapter.execute(full, sink, { signal: controller.signal });
          const received = await fake.log.waitForRequest(1);
          if (waitForOutput) await sink.firstDelta;
          const reason = new DOMException("user pressed stop", "AbortError");
          controller.abort(reason);
          const err = await within(
            execution.then(() => undefined, (e) => e),
            1000,
            "execute after abort",
          );
          assert.equal(err, reason, "execute rejects with the signal's reason");
          assert.equal(await within(received.ended, 1000, "the server noticing"), "client_closed");
          assert.equal(fake.log.openRequests, 0);
        },
        spec,
      ),
    );
  }

  const timeoutCases: [
    string,
    FakeBehavior,
    Partial<HttpModelSettings>,
    Partial<ExecutionSpec>,
    RegExp,
  ][] = [
    [
      "connectTimeoutMs",
      { headersDelayMs: 5_000 },
      { connectTimeoutMs: 150 },
      {},
      /connectTimeoutMs=150/,
    ],
    [
      "firstTokenTimeoutMs",
      { firstTokenDelayMs: 5_000 },
      { firstTokenTimeoutMs: 150 },
      {},
      /firstTokenTimeoutMs=150/,
    ],
    [
      "idleTimeoutMs",
      { tokens: 3, chunkDelayMs: 5_000 },
      { idleTimeoutMs: 150 },
      {},
      /idleTimeoutMs=150/,
    ],
    [
      "spec.timeoutMs",
      { tokens: 100, chunkDelayMs: 50 },
      {},
      { timeoutMs: 200 },
      /totalTimeoutMs=200/,
    ],
  ];
  for (const [limit, behavior, limits, spec, pattern] of timeoutCases) {
    Deno.test(
      `${name}: ${limit} ends the run with TIMEOUT and closes the connection`,
      run(
        behavior,
        limits,
        async ({ fake, adapter, spec: full }) => {
          const started = performance.now();
          const err = await rejectsWith(
            adapter.execute(full, recordingSink(), { signal: never() }),
            "TIMEOUT",
          );
          assert.match(err.message, pattern);
          assert.ok(performance.now() - started < 2000, "the limit fired late");
          assert.equal(
            await within(fake.requests[0]!.ended, 1000, "the server noticing"),
            "client_closed",
          );
        },
        spec,
      ),
    );
  }

  embeddingCases(name, subject, run);

  Deno.test(
    `${name}: a slow but steady stream within every limit completes`,
    run(
      { tokens: 4, firstTokenDelayMs: 50, chunkDelayMs: 50 },
      { connectTimeoutMs: 1000, firstTokenTimeoutMs: 1000, idleTimeoutMs: 200 },
      async ({ adapter, spec }) => {
        const sink = recordingSink();
        const result = await adapter.execute(spec, sink, { signal: never() });
        assert.equal(sink.deltas.join(""), "tok0 tok1 tok2 tok3");
        assert.equal(result.finishReason, "stop");
      },
    ),
  );
}
