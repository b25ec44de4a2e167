import assert from "node:assert/strict";
import { IopError } from "../../../shared/errors.ts";
import type { EventSink, MockSettings } from "../ports.ts";
import { recordingSink, specFor } from "./contract_case.ts";
import {
  createMockAdapter,
  mockAdapterFactory,
  mockAnswer,
  mockEmbedding,
  mockImageNote,
  type SleepFn,
} from "./mock.ts";

const settings: MockSettings = {
  tokens: 4,
  tokenDelayMs: 0,
  startDelayMs: 0,
  failWith: "",
  failRetryable: false,
  embeddingDimensions: 8,
};

function recorder(): EventSink & { deltas: string[] } {
  const deltas: string[] = [];
  return {
    deltas,
    output: (t) => deltas.push(t),
    toolCall: () => {},
    log: () => {},
    embedding: () => {},
    ready: () => undefined,
  };
}

/** A fake clock whose sleep advances time at once and records each requested wait. */
function fakeTime() {
  let now = 1_000;
  const waits: number[] = [];
  const sleep: SleepFn = (ms, signal) => {
    if (signal.aborted) return Promise.reject(signal.reason);
    waits.push(ms);
    now += ms;
    return Promise.resolve();
  };
  return { clock: { now: () => now }, sleep, waits };
}

const run = { signal: new AbortController().signal };

Deno.test("mock echoes the prompt's words, then filler tokens, one delta per token", async () => {
  const adapter = createMockAdapter("mock", settings);
  const sink = recorder();
  const result = await adapter.execute(specFor({ prompt: "hello  world" }), sink, run);
  assert.deepEqual(sink.deltas, ["hello", " world", " tok2", " tok3"]);
  assert.equal(sink.deltas.join(""), mockAnswer("hello world", 4));
  assert.deepEqual(result, { finishReason: "stop", usage: { inputTokens: 2, outputTokens: 4 } });
});

Deno.test("mock answers the last user message when the prompt is empty", async () => {
  const adapter = createMockAdapter("mock", { ...settings, tokens: 2 });
  const sink = recorder();
  const spec = specFor({
    messages: [
      { role: "user", content: "first question" },
      { role: "assistant", content: "answer" },
      { role: "user", content: "second one please" },
    ],
  });
  const result = await adapter.execute(spec, sink, run);
  assert.equal(sink.deltas.join(""), "second one");
  assert.deepEqual(result.usage, { inputTokens: 3, outputTokens: 2 });
});

Deno.test("mock.* run metadata overrides the adapter settings for that run only", async () => {
  const adapter = createMockAdapter("mock", settings);
  const overridden = recorder();
  await adapter.execute(specFor({ metadata: { "mock.tokens": "1" } }), overridden, run);
  assert.deepEqual(overridden.deltas, ["tok0"]);
  const plain = recorder();
  await adapter.execute(specFor({}), plain, run);
  assert.equal(plain.deltas.length, 4);
});

Deno.test("mock rejects malformed mock.* metadata with INVALID_ARGUMENT", async () => {
  const adapter = createMockAdapter("mock", settings);
  for (
    const metadata of [
      { "mock.tokens": "-1" },
      { "mock.token_delay_ms": "fast" },
      { "mock.fail_retryable": "yes" },
    ]
  ) {
    const err = await adapter.execute(specFor({ metadata }), recorder(), run).catch((e) => e);
    assert.ok(err instanceof IopError);
    assert.equal(err.code, "INVALID_ARGUMENT");
    assert.match(err.message, /^Cannot run mock as 'mock\.[a-z_]+' must be/);
  }
});

Deno.test("mock fails with the configured code after fail_after tokens", async () => {
  const adapter = createMockAdapter("mock", settings);
  const sink = recorder();
  const metadata = {
    "mock.fail_with": "OVERLOADED",
    "mock.fail_retryable": "false",
    "mock.fail_after": "2",
  };
  const err = await adapter.execute(specFor({ metadata }), sink, run).catch((e) => e);
  assert.ok(err instanceof IopError);
  assert.equal(err.code, "OVERLOADED");
  assert.equal(err.retryable, false);
  assert.match(err.message, /fail_with is 'OVERLOADED' after 2 tokens/);
  assert.deepEqual(sink.deltas, ["tok0", " tok1"]);
});

Deno.test("mock with failWith in its settings fails every run before any output", async () => {
  const adapter = createMockAdapter("mock", {
    ...settings,
    failWith: "UNAVAILABLE",
    failRetryable: true,
  });
  const sink = recorder();
  const err = await adapter.execute(specFor({}), sink, run).catch((e) => e);
  assert.ok(err instanceof IopError);
  assert.equal(err.code, "UNAVAILABLE");
  assert.equal(err.retryable, true);
  assert.deepEqual(sink.deltas, []);
});

Deno.test("mock reports an unknown fail_with code as BACKEND_ERROR naming it", async () => {
  const adapter = createMockAdapter("mock", settings);
  const spec = specFor({ metadata: { "mock.fail_with": "DISK_ON_FIRE" } });
  const err = await adapter.execute(spec, recorder(), run).catch((e) => e);
  assert.ok(err instanceof IopError);
  assert.equal(err.code, "BACKEND_ERROR");
  assert.match(err.message, /DISK_ON_FIRE/);
});

Deno.test("mock stops at sampling.maxTokens with finishReason length", async () => {
  const adapter = createMockAdapter("mock", settings);
  const sink = recorder();
  const result = await adapter.execute(specFor({ sampling: { maxTokens: 2 } }), sink, run);
  assert.equal(sink.deltas.length, 2);
  assert.equal(result.finishReason, "length");
  assert.equal(result.usage?.outputTokens, 2);
});

Deno.test("mock waits startDelayMs before the first token and tokenDelayMs between", async () => {
  const time = fakeTime();
  const adapter = createMockAdapter(
    "mock",
    { ...settings, tokens: 3, startDelayMs: 500, tokenDelayMs: 100 },
    { clock: time.clock, sleep: time.sleep },
  );
  await adapter.execute(specFor({}), recorder(), run);
  assert.deepEqual(time.waits, [500, 100, 100]);
});

Deno.test("mock delays from metadata apply on real timers", async () => {
  const adapter = createMockAdapter("mock", settings);
  const started = performance.now();
  const metadata = { "mock.tokens": "3", "mock.start_delay_ms": "30", "mock.token_delay_ms": "20" };
  await adapter.execute(specFor({ metadata }), recorder(), run);
  assert.ok(performance.now() - started >= 65, "three tokens take at least 30 + 2 * 20 ms");
});

Deno.test({
  name: "mock stops promptly on abort, rejecting with the reason and leaving no timer",
  // Deno 2.9 leaves the op sanitizer off by default; it is what catches a surviving timer.
  sanitizeOps: true,
}, async () => {
  const adapter = createMockAdapter("mock", { ...settings, tokens: 100, tokenDelayMs: 10_000 });
  const controller = new AbortController();
  const first = Promise.withResolvers<void>();
  const sink = { ...recorder(), output: () => first.resolve() };
  const execution = adapter.execute(specFor({}), sink, { signal: controller.signal });
  await first.promise; // the 10 s wait for the second token is now pending
  const reason = new Error("user cancelled");
  const abortedAt = performance.now();
  controller.abort(reason);
  await assert.rejects(execution, (e) => e === reason);
  assert.ok(performance.now() - abortedAt < 100);
  // Deno's timer sanitizer fails this test if the 10 s token timer survived the abort.
});

Deno.test("mock rejects at once with the reason when the signal is already aborted", async () => {
  const adapter = createMockAdapter("mock", settings);
  const controller = new AbortController();
  controller.abort("gone");
  const sink = recorder();
  await assert.rejects(adapter.execute(specFor({}), sink, { signal: controller.signal }), (e) => {
    assert.equal(e, "gone");
    return true;
  });
  assert.deepEqual(sink.deltas, []);
});

Deno.test("mock capabilities advertise 'echo' and say any target works", async () => {
  const caps = await createMockAdapter("mock", settings).capabilities(run);
  assert.deepEqual(caps.targets, ["echo"]);
  assert.equal(caps.streaming, true);
  assert.equal(caps.healthy, true);
  assert.match(caps.detail, /any target/);
});

Deno.test("mockAdapterFactory builds a named mock and refuses other kinds", () => {
  const adapter = mockAdapterFactory({ name: "m1", enabled: true, kind: "mock", settings });
  assert.equal(adapter.name, "m1");
  assert.equal(adapter.kind, "mock");
  assert.throws(
    () => mockAdapterFactory({ name: "c", enabled: true, kind: "cli", settings: { profiles: [] } }),
    TypeError,
  );
});

Deno.test("mock refuses a JSON output format and a forced tool call instead of faking them", async () => {
  const adapter = createMockAdapter("mock", settings);
  const sink = recorder();
  await assert.rejects(
    adapter.execute(specFor({ prompt: "hi", outputFormat: { type: "json_object" } }), sink, run),
    {
      name: "IopError",
      code: "INVALID_ARGUMENT",
      message: "Cannot run as output_format: mock cannot constrain output to JSON",
    },
  );
  await assert.rejects(
    adapter.execute(specFor({ prompt: "hi", toolChoice: "required" }), sink, run),
    {
      code: "INVALID_ARGUMENT",
      message: "Cannot run as tool_choice: mock cannot force a tool call",
    },
  );
  assert.deepEqual(sink.deltas, []);
  // What it can honour still runs: it never calls tools anyway.
  await adapter.execute(
    specFor({ prompt: "hi", toolChoice: "none", parallelToolCalls: false }),
    sink,
    run,
  );
  assert.equal(sink.deltas.join(""), mockAnswer("hi", settings.tokens));
});

Deno.test("mock embeds each input to the same unit vector every time, in input order", async () => {
  const adapter = createMockAdapter("mock", settings);
  const sink = recordingSink();
  const spec = specFor({ embed: { inputs: ["hello world", "bye", "hello world"] } });
  const result = await adapter.execute(spec, sink, run);
  assert.deepEqual(sink.embeddings.map((e) => e.index), [0, 1, 2]);
  assert.deepEqual(sink.embeddings.map((e) => e.values.length), [8, 8, 8]);
  assert.deepEqual(sink.embeddings[0]!.values, mockEmbedding("hello world", 8));
  assert.deepEqual(sink.embeddings[2]!.values, sink.embeddings[0]!.values);
  assert.notDeepEqual(sink.embeddings[1]!.values, sink.embeddings[0]!.values);
  const norm = Math.hypot(...sink.embeddings[1]!.values);
  assert.ok(Math.abs(norm - 1) < 1e-6, `norm ${norm}`);
  // Values are float32 already, so the wire carries them unchanged.
  assert.ok(sink.embeddings[1]!.values.every((v) => Math.fround(v) === v));
  assert.deepEqual(result, { finishReason: "stop", usage: { inputTokens: 5, outputTokens: 0 } });
  assert.deepEqual(sink.deltas, []);
});

Deno.test("mock embeds to the dimensions asked for, else to its embeddingDimensions setting", async () => {
  const sink = recordingSink();
  await createMockAdapter("mock", settings).execute(
    specFor({ embed: { inputs: ["a"], dimensions: 3 } }),
    sink,
    run,
  );
  await createMockAdapter("mock", { ...settings, embeddingDimensions: 5 }).execute(
    specFor({ embed: { inputs: ["a"] } }),
    sink,
    run,
  );
  assert.deepEqual(sink.embeddings.map((e) => e.values.length), [3, 5]);
  await assert.rejects(
    createMockAdapter("mock", settings).execute(
      specFor({ embed: { inputs: ["a"], dimensions: 100_000 } }),
      sink,
      run,
    ),
    { code: "INVALID_ARGUMENT", message: /^Cannot embed as dimensions: mock makes at most 65536/ },
  );
});

Deno.test("mock paces and fails embedding runs like tokens, one vector per slot", async () => {
  const time = fakeTime();
  const adapter = createMockAdapter(
    "mock",
    { ...settings, startDelayMs: 500, tokenDelayMs: 100 },
    { clock: time.clock, sleep: time.sleep },
  );
  const sink = recordingSink();
  await adapter.execute(specFor({ embed: { inputs: ["a", "b", "c"] } }), sink, run);
  assert.deepEqual(time.waits, [500, 100, 100]);
  const failing = recordingSink();
  await assert.rejects(
    adapter.execute(
      specFor({
        embed: { inputs: ["a", "b", "c"] },
        metadata: { "mock.fail_with": "OVERLOADED", "mock.fail_after": "2" },
      }),
      failing,
      run,
    ),
    { code: "OVERLOADED" },
  );
  assert.deepEqual(failing.embeddings.map((e) => e.index), [0, 1]);
});

Deno.test({
  name: "mock cancelled mid-embed rejects with the reason and relays nothing after",
  sanitizeOps: true,
}, async () => {
  const adapter = createMockAdapter("mock", { ...settings, tokenDelayMs: 10_000 });
  const controller = new AbortController();
  const sink = recordingSink();
  const execution = adapter.execute(
    specFor({ embed: { inputs: ["a", "b", "c"] } }),
    sink,
    { signal: controller.signal },
  );
  await sink.firstEmbedding;
  const reason = new Error("user cancelled");
  controller.abort(reason);
  await assert.rejects(execution, (e) => e === reason);
  assert.deepEqual(sink.embeddings.map((e) => e.index), [0]);
});

Deno.test("mock says how many images it was shown before echoing the prompt", async () => {
  const adapter = createMockAdapter("mock", { ...settings, tokens: 6 });
  const sink = recorder();
  const image = { type: "image" as const, url: "data:image/png;base64,iVBORw0KGgo=" };
  await adapter.execute(
    specFor({
      messages: [
        { role: "user", content: "first", parts: [{ type: "text", text: "first" }, image] },
        { role: "assistant", content: "ok" },
        {
          role: "user",
          content: "what now",
          parts: [image, { type: "text", text: "what now" }, { ...image, url: "https://x/y.png" }],
        },
      ],
    }),
    sink,
    run,
  );
  assert.equal(sink.deltas.join(""), "I see 3 images. what now");
  assert.equal(mockImageNote([{ role: "user", content: "", parts: [image] }]), "I see 1 image.");
  assert.equal(mockImageNote([{ role: "user", content: "plain" }]), "");
});
