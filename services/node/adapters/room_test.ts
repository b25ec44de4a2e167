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
import { until } from "../../../tests/util.ts";
import type { CliProfile, EventSink } from "../ports.ts";
import { createCliAdapter } from "./cli.ts";
import { specFor } from "./contract_case.ts";
import { never, settingsFor } from "./http_adapter_cases.ts";
import { createMockAdapter, mockDeltas } from "./mock.ts";
import { createOpenAICompatAdapter } from "./openai_compat.ts";

/** True when `path` exists. */
function exists(path: string): boolean {
  try {
    Deno.statSync(path);
    return true;
  } catch {
    return false;
  }
}

/** Every test here spawns processes or sockets; the sanitizers prove none leak. */
function test(name: string, fn: () => Promise<void>): void {
  Deno.test({ name, sanitizeOps: true, sanitizeResources: true, fn });
}

/**
 * A sink whose consumer can stop taking: paused, `ready()` hands out a promise that `release`
 * resolves; `waiting` resolves once an adapter was handed that promise.
 */
function gatedSink(pauseAfterOutputs: number) {
  const pieces: string[] = [];
  let bytes = 0;
  let gate: PromiseWithResolvers<void> | undefined;
  /** Times `ready()` handed out the pending promise. */
  let handedOut = 0;
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
      handedOut++;
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
    get handedOut() {
      return handedOut;
    },
    /** True while the consumer takes nothing: a `ready()` promise handed out is still pending. */
    get paused() {
      return gate !== undefined;
    },
    /** Resolves once the adapter waits for room. */
    waiting: waiting.promise,
    release() {
      gate?.resolve();
      gate = undefined;
    },
  };
}

/** True when `promise` has settled already (its reaction runs before a fresh one's). */
function hasSettled(promise: Promise<unknown>): Promise<boolean> {
  const settled = promise.then(() => true, () => true);
  return Promise.race([settled, Promise.resolve(false)]);
}

/**
 * Asserts the run stalled on its sink: the adapter was handed the pending `ready()` promise,
 * once (it awaits it rather than reading on), the run has not ended, and its backend has
 * produced less than its whole answer (`produced` of `total`, in the backend's unit). Returns
 * the bytes read before the stall.
 */
async function assertStalled(
  gated: ReturnType<typeof gatedSink>,
  run: Promise<unknown>,
  what: string,
  backend: () => { produced: number; total: number },
): Promise<number> {
  await gated.waiting;
  assert.ok(gated.paused);
  assert.equal(gated.handedOut, 1, `${what}: asked again instead of waiting for room`);
  assert.equal(await hasSettled(run), false, `${what}: ended while its sink had no room`);
  const { produced, total } = backend();
  assert.ok(produced < total, `${what}: its backend produced all ${total} while paused`);
  return gated.bytes;
}

/** A mock adapter answering 60 tokens, `tokenDelayMs` apart. */
function sixtyTokenMock(tokenDelayMs: number) {
  return createMockAdapter("mock", {
    tokens: 60,
    tokenDelayMs,
    startDelayMs: 0,
    failWith: "",
    failRetryable: false,
    embeddingDimensions: 8,
  });
}

test("the mock stops between tokens while its sink has no room and goes on once it has", async () => {
  const adapter = sixtyTokenMock(1);
  const gated = gatedSink(10);
  const run = adapter.execute(
    specFor({ adapter: "mock", target: "echo", prompt: "flow" }),
    gated.sink,
    { signal: never() },
  );
  await assertStalled(gated, run, "mock", () => ({ produced: gated.pieces.length, total: 60 }));
  assert.equal(gated.pieces.length, 10, "it stops right after the token that filled the sink");
  gated.release();
  const result = await run;
  assert.deepEqual(gated.pieces, mockDeltas("flow", 60));
  assert.equal(result.finishReason, "stop");
});

test("a cancel ends a mock run that waits for room", async () => {
  const adapter = sixtyTokenMock(0);
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
    await assertStalled(gated, run, "openai_compat", () => ({
      produced: gated.pieces.length,
      total: LONG_ANSWER_TOKENS,
    }));
    assert.equal(await hasSettled(request.ended), false, "the server got its whole answer out");
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
    await assertStalled(gated, run, "cli", () => ({ produced: gated.bytes, total: CHATTY_BYTES }));
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
  // 40 KB fit the pipe: the command writes them and exits while its sink has no room.
  const dir = await Deno.makeTempDir({ prefix: "iop_room_" });
  const done = `${dir}/done`;
  const adapter = createCliAdapter("cli", {
    profiles: [
      shell("quick", `printf x; sleep 0.2; head -c 40000 /dev/zero | tr '\\0' x; : > ${done}`),
    ],
  }, { killGraceMs: 50 });
  const gated = gatedSink(1);
  try {
    const run = adapter.execute(specFor({ adapter: "cli", target: "quick" }), gated.sink, {
      signal: never(),
    });
    await assertStalled(gated, run, "cli", () => ({ produced: gated.bytes, total: 40_001 }));
    await until("the command to write all and end", () => exists(done));
    // This test is about time passing: longer than the kill grace and the pipe drain (500 ms)
    // together, the output left in the pipe is still not cut.
    await new Promise((resolve) => setTimeout(resolve, 700));
    assert.equal(await hasSettled(run), false, "the run ended with its output unread");
    gated.release();
    const result = await run;
    assert.equal(result.exitCode, 0);
    assert.equal(gated.pieces.join(""), "x".repeat(40_001));
  } finally {
    await adapter.close?.();
    await Deno.remove(dir, { recursive: true });
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
