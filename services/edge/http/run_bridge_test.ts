import { parseEdgeConfig } from "../config.ts";
import { TenantLimiter } from "../tenants/limiter.ts";
import assert from "node:assert/strict";
import { IopError, OverloadedError } from "../../../shared/errors.ts";
import type { RunEvent } from "../../../shared/run.ts";
import { AsyncQueue } from "../../../shared/async_queue.ts";
import type { RunGateway, RunHandle, RunSubmission } from "../ports.ts";
import { collectAnswer, embedRun, errorOf, startRun, streamBody } from "./run_bridge.ts";

/** A run handle the test feeds by hand: what the service hands a surface, minus the node. */
class FakeRun implements RunHandle {
  readonly runId = "run_1";
  readonly nodeId = "node-1";
  readonly adapter = "mock";
  readonly target = "echo";
  readonly done = new Promise<never>(() => {});
  readonly cancelled: string[] = [];
  stalled = false;
  #seq = 0;
  #listener: ((event: RunEvent) => void) | undefined;
  readonly #early: RunEvent[] = [];

  events() {
    return new AsyncQueue<RunEvent>();
  }
  subscribe(listener: (event: RunEvent) => void): void {
    this.#listener = listener;
    for (const event of this.#early.splice(0)) listener(event);
  }
  cancel(reason = "cancelled"): void {
    this.cancelled.push(reason);
  }
  /** What the consumer said of itself, in order (only changes are recorded). */
  readonly pauses: boolean[] = [];
  setReaderPaused(paused: boolean): void {
    if ((this.pauses.at(-1) ?? false) !== paused) this.pauses.push(paused);
  }
  /** Delivers one event, as the transport does when its frame is read. */
  emit(event: DistributiveOmit<RunEvent, "runId" | "seq" | "timestampMs">): void {
    const full = { ...event, runId: this.runId, seq: ++this.#seq, timestampMs: 0 } as RunEvent;
    if (this.#listener) this.#listener(full);
    else this.#early.push(full);
  }
}
type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

function serviceFor(run: FakeRun): RunGateway {
  return {
    config: undefined as never,
    submitRun: (_s: RunSubmission) => Promise.resolve(run),
    cancelRun: () => false,
    status: () => undefined as never,
    keepsSessions: () => false,
    tenants: new TenantLimiter(),
  };
}

const caller = parseEdgeConfig({}, "edge.yaml").tenants[0]!;

const submission = { adapter: "mock", target: "echo" } as RunSubmission;
const never = new AbortController().signal;
const tick = () => new Promise((resolve) => setTimeout(resolve, 0));

/** A writer that writes each output's text and `|end` at completion. */
function* textWriter(out: (text: string) => void): Generator<void, void, RunEvent> {
  out("[");
  while (true) {
    const event = yield;
    if (event.type === "output") out(event.text);
    if (event.type === "completed") {
      out("]");
      return;
    }
  }
}

/** Starts `run` with a first output "a" and streams its body to `onEnd`. */
async function streamedBody(
  run: FakeRun,
  onEnd: () => void = () => {},
): Promise<ReadableStream<Uint8Array>> {
  const starting = startRun(serviceFor(run), submission, never, caller);
  run.emit({ type: "output", text: "a" });
  return streamBody(await starting, textWriter, onEnd);
}

async function chunksOf(body: ReadableStream<Uint8Array>): Promise<string[]> {
  const out: string[] = [];
  const decoder = new TextDecoder();
  for await (const chunk of body) out.push(decoder.decode(chunk));
  return out;
}

Deno.test("startRun waits for the first output and throws a failure that came before it", async () => {
  const failing = new FakeRun();
  failing.emit({ type: "started", nodeId: "node-1", adapter: "mock", target: "echo" });
  failing.emit({
    type: "failed",
    code: "OVERLOADED",
    message: "backend full",
    retryable: true,
    exitCode: 0,
  });
  await assert.rejects(startRun(serviceFor(failing), submission, never, caller), (err: unknown) => {
    assert.ok(err instanceof IopError);
    assert.deepEqual([err.code, err.message, err.retryable], ["OVERLOADED", "backend full", true]);
    return true;
  });

  const ok = new FakeRun();
  let started = false;
  const starting = startRun(serviceFor(ok), submission, never, caller).then((
    r,
  ) => (started = true, r));
  ok.emit({ type: "started", nodeId: "node-1", adapter: "mock", target: "echo" });
  await tick();
  assert.equal(started, false, "no answer before the first output");
  ok.emit({ type: "output", text: "hi" });
  ok.emit({ type: "completed", finishReason: "stop", exitCode: 0 });
  const answer = await collectAnswer((await starting).events);
  assert.equal(answer.text, "hi");
});

Deno.test("streamBody writes what arrived together as one chunk, later arrivals as their own", async () => {
  const run = new FakeRun();
  // Not streamedBody: its extra await would flush "[a" before the deltas below arrive.
  const starting = startRun(serviceFor(run), submission, never, caller);
  run.emit({ type: "output", text: "a" });
  const body = streamBody(await starting, textWriter, () => {});
  const reading = chunksOf(body);
  // Three deltas read from one socket read, then two more in later reads.
  run.emit({ type: "output", text: "b" });
  run.emit({ type: "output", text: "c" });
  run.emit({ type: "output", text: "d" });
  await tick();
  run.emit({ type: "output", text: "e" });
  await tick();
  run.emit({ type: "output", text: "f" });
  run.emit({ type: "completed", finishReason: "stop", exitCode: 0 });
  assert.deepEqual(await reading, ["[abcd", "e", "f]"]);
});

Deno.test("streamBody cancels the run when the client goes away and ends once", async () => {
  const run = new FakeRun();
  let ends = 0;
  const body = await streamedBody(run, () => ends++);
  const reader = body.getReader();
  assert.equal(new TextDecoder().decode((await reader.read()).value), "[a");
  await reader.cancel();
  run.emit({ type: "output", text: "late" });
  run.emit({ type: "completed", finishReason: "stop", exitCode: 0 });
  assert.deepEqual(run.cancelled, ["client went away"]);
  assert.equal(ends, 1);
});

const embedding = { ...submission, embed: { inputs: ["a", "b"] } };

Deno.test("embedRun answers the vectors in input order and the input tokens, whatever order they came in", async () => {
  const run = new FakeRun();
  const answering = embedRun(serviceFor(run), embedding, never, caller);
  run.emit({ type: "started", nodeId: "node-1", adapter: "mock", target: "echo" });
  run.emit({ type: "embedding", index: 1, values: [0.5, -1] });
  run.emit({ type: "embedding", index: 0, values: [0.25, 2] });
  run.emit({
    type: "completed",
    finishReason: "stop",
    usage: { inputTokens: 2, outputTokens: 0 },
    exitCode: 0,
  });
  assert.deepEqual(await answering, { vectors: [[0.25, 2], [0.5, -1]], inputTokens: 2 });
  assert.deepEqual(run.cancelled, []);
});

Deno.test("embedRun refuses an answer missing a vector, or with one twice, and cancels the run", async () => {
  const short = new FakeRun();
  const answeringShort = embedRun(serviceFor(short), embedding, never, caller);
  short.emit({ type: "embedding", index: 0, values: [1] });
  short.emit({ type: "completed", finishReason: "stop", exitCode: 0 });
  await assert.rejects(answeringShort, (err: unknown) => {
    assert.ok(err instanceof IopError);
    assert.equal(err.code, "INTERNAL");
    assert.match(err.message, /sent 1 vectors for 2 inputs/);
    return true;
  });

  const twice = new FakeRun();
  const answeringTwice = embedRun(serviceFor(twice), embedding, never, caller);
  twice.emit({ type: "embedding", index: 0, values: [1] });
  twice.emit({ type: "embedding", index: 0, values: [1] });
  await assert.rejects(answeringTwice, /vector 0 twice/);
  assert.deepEqual(twice.cancelled, ["the embedding answer was refused"]);
});

Deno.test("embedRun throws the run's failure", async () => {
  const run = new FakeRun();
  const answering = embedRun(serviceFor(run), embedding, never, caller);
  run.emit({ type: "embedding", index: 0, values: [1] });
  run.emit({
    type: "failed",
    code: "BACKEND_ERROR",
    message: "model cannot embed",
    retryable: false,
    exitCode: 0,
  });
  await assert.rejects(answering, (err: unknown) => {
    assert.ok(err instanceof IopError);
    assert.deepEqual([err.code, err.message], ["BACKEND_ERROR", "model cannot embed"]);
    return true;
  });
});

Deno.test("startRun cancels a run whose client went away while it was being sent", async () => {
  const run = new FakeRun();
  const abort = new AbortController();
  const service = serviceFor(run);
  // The service listens for the abort only once the run is sent; this one came before.
  service.submitRun = () => (abort.abort(), Promise.resolve(run));
  const starting = startRun(service, submission, abort.signal, caller);
  run.emit({ type: "cancelled", reason: "client went away" });
  await assert.rejects(starting, /cancelled/);
  assert.deepEqual(run.cancelled, ["client went away"]);
});

Deno.test("streamBody tells the run its reader paused once the unread body is full, and reads again on a read", async () => {
  const run = new FakeRun();
  const response = new Response(await streamedBody(run));
  const reader = response.body!.getReader();
  assert.equal(new TextDecoder().decode((await reader.read()).value), "[a");
  // The client reads no more: 8 KiB deltas, one per socket read, fill the body.
  const delta = "x".repeat(8 * 1024);
  for (let i = 0; i < 7; i++) {
    run.emit({ type: "output", text: delta });
    await tick();
  }
  assert.deepEqual(run.pauses, [], "below the high-water mark the reader is not paused");
  run.emit({ type: "output", text: delta });
  await tick();
  assert.deepEqual(run.pauses, [true]);
  // Reading frees room: the run hears its reader reads again.
  await reader.read();
  assert.deepEqual(run.pauses, [true, false]);
  await reader.cancel();
});

Deno.test("streamBody errors its body, dropping what it holds, when the run is cancelled for a stall", async () => {
  const run = new FakeRun();
  let ends = 0;
  const body = await streamedBody(run, () => ends++);
  const reader = body.getReader();
  await reader.read();
  for (let i = 0; i < 9; i++) {
    run.emit({ type: "output", text: "x".repeat(8 * 1024) });
    await tick();
  }
  assert.deepEqual(run.pauses, [true]);
  run.stalled = true;
  run.emit({
    type: "cancelled",
    reason: "client read nothing for 30000 ms (runs.stall_timeout_ms)",
  });
  await assert.rejects(reader.read(), /The run was cancelled: client read nothing for 30000 ms/);
  assert.equal(ends, 1);
});

Deno.test("a whole answer never pauses its run, however much it holds", async () => {
  const run = new FakeRun();
  const starting = startRun(serviceFor(run), submission, never, caller);
  run.emit({ type: "output", text: "a" });
  const started = await starting;
  for (let i = 0; i < 200; i++) run.emit({ type: "output", text: "x".repeat(1024) });
  run.emit({ type: "completed", finishReason: "stop", exitCode: 0 });
  const answer = await collectAnswer(started.events);
  assert.equal(answer.text.length, 1 + 200 * 1024);
  assert.deepEqual(run.pauses, []);
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

Deno.test("streamBody sends its keep-alive while the run sends nothing, not while it streams", async () => {
  const run = new FakeRun();
  const starting = startRun(serviceFor(run), submission, never, caller);
  run.emit({ type: "output", text: "a" });
  const body = streamBody(await starting, textWriter, () => {}, { everyMs: 300, text: "." });
  const reading = chunksOf(body);
  await sleep(1_000); // a run waiting for its node: keep-alives at about 300, 600 and 900 ms
  for (let i = 0; i < 60; i++) { // then a delta every 10 ms for 600 ms: none
    run.emit({ type: "output", text: "b" });
    await sleep(10);
  }
  run.emit({ type: "completed", finishReason: "stop", exitCode: 0 });
  const text = (await reading).join("");
  const [idle, streaming] = [text.slice(0, text.indexOf("b")), text.slice(text.indexOf("b"))];
  assert.ok(idle.startsWith("[a") && /^\[a\.{2,3}$/.test(idle), `while idle: ${idle}`);
  assert.equal(streaming, "b".repeat(60) + "]");
});

Deno.test("streamBody adds no keep-alive to a body its client is not reading", async () => {
  const run = new FakeRun();
  const starting = startRun(serviceFor(run), submission, never, caller);
  run.emit({ type: "output", text: "a" });
  const body = streamBody(await starting, textWriter, () => {}, { everyMs: 50, text: "." });
  const reader = body.getReader();
  run.emit({ type: "output", text: "x".repeat(64 * 1024) }); // fills the body: paused
  await sleep(300);
  assert.deepEqual(run.pauses, [true]);
  run.emit({ type: "completed", finishReason: "stop", exitCode: 0 });
  let text = "";
  for (let r = await reader.read(); !r.done; r = await reader.read()) {
    text += new TextDecoder().decode(r.value);
  }
  assert.equal(text.replaceAll("x", ""), "[a]");
});

Deno.test("an OVERLOADED failure keeps the Retry-After the Edge's refusal gave, 1 s when it gave none", () => {
  const failed = (retryAfterSeconds?: number): RunEvent => ({
    runId: "r",
    seq: 2,
    timestampMs: 0,
    type: "failed",
    code: "OVERLOADED",
    message: "full",
    retryable: true,
    exitCode: 0,
    ...(retryAfterSeconds === undefined ? {} : { retryAfterSeconds }),
  });
  const fromPool = errorOf(failed(12));
  assert.ok(fromPool instanceof OverloadedError);
  assert.equal(fromPool.retryAfterSeconds, 12);
  const fromNode = errorOf(failed());
  assert.ok(fromNode instanceof OverloadedError);
  assert.equal(fromNode.retryAfterSeconds, 1);
});
