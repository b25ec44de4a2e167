/**
 * Adapters stop reading while their sink has no room (flow control, `EventSink.ready`): the mock
 * stops producing, the OpenAI-compatible adapter leaves the model server's stream unread so the
 * server's writes stall on a full socket, and the CLI adapter leaves a chatty command's pipe
 * full so the command blocks. Once the sink makes room each run ends with every piece exactly
 * once; a cancel ends a run that waits for room.
 */
import assert from "node:assert/strict";
import { IopError } from "../../../shared/errors.ts";
import { startFakeOpenAI } from "../../../shared/testing/fake_openai.ts";
import type { CliProfile, EventSink } from "../ports.ts";
import { createCliAdapter } from "./cli.ts";
import { specFor } from "./contract_case.ts";
import { never, settingsFor } from "./http_adapter_cases.ts";
import { createMockAdapter, mockDeltas } from "./mock.ts";
import { createOpenAICompatAdapter } from "./openai_compat.ts";

/** Every test here spawns processes or sockets; the sanitizers prove none leak. */
function test(name: string, fn: () => Promise<void>): void {
  Deno.test({ name, sanitizeOps: true, sanitizeResources: true, fn });
}

/** How long a paused run is watched for reads it should not make. */
const WATCH_MS = 300;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A sink whose consumer can stop taking: paused, `ready()` hands out a promise that `release`
 * resolves; `waiting` resolves once an adapter was handed that promise.
 */
function gatedSink(pauseAfterOutputs: number) {
  const pieces: string[] = [];
  let bytes = 0;
  let gate: PromiseWithResolvers<void> | undefined;
  const waiting = Promise.withResolvers<void>();
  const sink: EventSink = {
    output(text) {
      pieces.push(text);
      bytes += text.length;
      if (pieces.length === pauseAfterOutputs) gate = Promise.withResolvers();
    },
    toolCall: () => {},
    log: () => {},
    embedding: () => {},
    ready() {
      if (gate === undefined) return undefined;
      waiting.resolve();
      return gate.promise;
    },
  };
  return {
    sink,
    pieces,
    get bytes() {
      return bytes;
    },
    /** Resolves once the adapter waits for room. */
    waiting: waiting.promise,
    release() {
      gate?.resolve();
      gate = undefined;
    },
  };
}

/** Tracks whether `promise` settled, without consuming its outcome. */
function settledFlag(promise: Promise<unknown>): { readonly settled: boolean } {
  const flag = { settled: false };
  promise.then(() => (flag.settled = true), () => (flag.settled = true));
  return flag;
}

/** Waits while the run is paused and asserts it read nothing more and did not end. */
async function assertStalled(
  gated: ReturnType<typeof gatedSink>,
  run: Promise<unknown>,
  what: string,
  watchMs = WATCH_MS,
): Promise<number> {
  await gated.waiting;
  const run_ = settledFlag(run);
  const before = gated.bytes;
  await sleep(watchMs);
  assert.equal(gated.bytes, before, `${what}: read on while its sink had no room`);
  assert.equal(run_.settled, false, `${what}: ended while its sink had no room`);
  return before;
}

test("the mock stops between tokens while its sink has no room and goes on once it has", async () => {
  const adapter = createMockAdapter("mock", {
    tokens: 60,
    tokenDelayMs: 1,
    startDelayMs: 0,
    failWith: "",
    failRetryable: false,
    embeddingDimensions: 8,
  });
  const gated = gatedSink(10);
  const run = adapter.execute(
    specFor({ adapter: "mock", target: "echo", prompt: "flow" }),
    gated.sink,
    { signal: never() },
  );
  await assertStalled(gated, run, "mock");
  assert.equal(gated.pieces.length, 10, "it stops right after the token that filled the sink");
  gated.release();
  const result = await run;
  assert.deepEqual(gated.pieces, mockDeltas("flow", 60));
  assert.equal(result.finishReason, "stop");
});

test("a cancel ends a mock run that waits for room", async () => {
  const adapter = createMockAdapter("mock", {
    tokens: 60,
    tokenDelayMs: 0,
    startDelayMs: 0,
    failWith: "",
    failRetryable: false,
    embeddingDimensions: 8,
  });
  const gated = gatedSink(5);
  const abort = new AbortController();
  const run = adapter.execute(specFor({ adapter: "mock", target: "echo" }), gated.sink, {
    signal: abort.signal,
  });
  await gated.waiting;
  abort.abort(new IopError("CANCELLED", "client went away"));
  await assert.rejects(run, { code: "CANCELLED", message: "client went away" });
  assert.equal(gated.pieces.length, 5);
});

/** Far more SSE than the loopback socket buffers hold (tens of MB), so a pause must stall it. */
const LONG_ANSWER_TOKENS = 200_000;

test("openai_compat leaves the model server's stream unread while its sink has no room", async () => {
  await using fake = startFakeOpenAI({ defaults: { tokens: LONG_ANSWER_TOKENS } });
  const adapter = createOpenAICompatAdapter("openai", settingsFor(fake.url));
  const gated = gatedSink(1);
  try {
    const run = adapter.execute(
      specFor({ adapter: "openai", target: "test-model", prompt: "go on" }),
      gated.sink,
      { signal: never() },
    );
    const request = await fake.log.waitForRequest(1);
    const answered = settledFlag(request.ended);
    await assertStalled(gated, run, "openai_compat");
    assert.equal(answered.settled, false, "the server got its whole answer out");
    assert.ok(gated.pieces.length < LONG_ANSWER_TOKENS);
    gated.release();
    const result = await run;
    assert.equal(result.finishReason, "stop");
    assert.equal(gated.pieces.length, LONG_ANSWER_TOKENS, "every delta once");
    assert.equal(gated.pieces.at(-1), ` tok${LONG_ANSWER_TOKENS - 1}`);
    assert.ok(gated.pieces.every((p, i) => p === `${i === 0 ? "" : " "}tok${i}`), "in order");
    assert.equal(await request.ended, "completed");
  } finally {
    await adapter.close?.();
  }
});

test("a cancel ends an openai_compat run that waits for room and closes its request", async () => {
  await using fake = startFakeOpenAI({ defaults: { tokens: LONG_ANSWER_TOKENS } });
  const adapter = createOpenAICompatAdapter("openai", settingsFor(fake.url));
  const gated = gatedSink(1);
  const abort = new AbortController();
  try {
    const run = adapter.execute(
      specFor({ adapter: "openai", target: "test-model" }),
      gated.sink,
      { signal: abort.signal },
    );
    await gated.waiting;
    abort.abort(new IopError("CANCELLED", "client went away"));
    await assert.rejects(run, { code: "CANCELLED" });
    assert.equal(await fake.requests[0]!.ended, "client_closed");
  } finally {
    await adapter.close?.();
  }
});

function shell(name: string, script: string): CliProfile {
  return {
    name,
    command: "sh",
    args: ["-c", script],
    resumeArgs: [],
    env: {},
    cwd: "",
    timeoutMs: 0,
    description: "",
  };
}

/** Far more than a pipe (64 KiB) and the reader's buffers hold. */
const CHATTY_BYTES = 20_000_000;

test("the CLI adapter leaves a chatty command's stdout unread while its sink has no room", async () => {
  const adapter = createCliAdapter("cli", {
    profiles: [shell("chatty", `yes | head -c ${CHATTY_BYTES}`)],
  });
  const gated = gatedSink(1);
  try {
    const run = adapter.execute(specFor({ adapter: "cli", target: "chatty" }), gated.sink, {
      signal: never(),
    });
    const before = await assertStalled(gated, run, "cli");
    assert.ok(before < CHATTY_BYTES, "the command could not write all it had");
    gated.release();
    const result = await run;
    assert.equal(result.exitCode, 0);
    assert.equal(gated.bytes, CHATTY_BYTES, "every byte once");
    const text = gated.pieces.join("");
    assert.equal(text, "y\n".repeat(CHATTY_BYTES / 2));
  } finally {
    await adapter.close?.();
  }
});

test("output a CLI left in its pipe when it exited waits for room, however long, and is not lost", async () => {
  // 40 KB fit the pipe: the command exits at once while its sink has no room.
  const adapter = createCliAdapter("cli", {
    profiles: [shell("quick", "printf x; sleep 0.2; head -c 40000 /dev/zero | tr '\\0' x")],
  }, { killGraceMs: 50 });
  const gated = gatedSink(1);
  try {
    const run = adapter.execute(specFor({ adapter: "cli", target: "quick" }), gated.sink, {
      signal: never(),
    });
    // Longer than the kill grace and the pipe drain (500 ms) together: still nothing is cut.
    await assertStalled(gated, run, "cli", 1_000);
    gated.release();
    const result = await run;
    assert.equal(result.exitCode, 0);
    assert.equal(gated.pieces.join(""), "x".repeat(40_001));
  } finally {
    await adapter.close?.();
  }
});

test("a cancel ends a CLI run that waits for room, and its process group", async () => {
  const adapter = createCliAdapter("cli", {
    profiles: [shell("chatty", `yes | head -c ${CHATTY_BYTES}`)],
  }, { killGraceMs: 200 });
  const gated = gatedSink(1);
  const abort = new AbortController();
  try {
    const run = adapter.execute(specFor({ adapter: "cli", target: "chatty" }), gated.sink, {
      signal: abort.signal,
    });
    await gated.waiting;
    abort.abort(new IopError("CANCELLED", "client went away"));
    await assert.rejects(run, { code: "CANCELLED", message: "client went away" });
    assert.ok(gated.bytes < CHATTY_BYTES);
  } finally {
    await adapter.close?.();
  }
});
