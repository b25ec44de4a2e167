import { parseEdgeConfig } from "../config.ts";
import { TenantLimiter } from "../tenants/limiter.ts";
import assert from "node:assert/strict";
import { IopError } from "../../../shared/errors.ts";
import type { RunEvent } from "../../../shared/run.ts";
import { AsyncQueue } from "../../../shared/async_queue.ts";
import type { RunGateway, RunHandle, RunSubmission } from "../ports.ts";
import { collectAnswer, startRun, streamBody } from "./run_bridge.ts";

/** A run handle the test feeds by hand: what the service hands a surface, minus the node. */
class FakeRun implements RunHandle {
  readonly runId = "run_1";
  readonly nodeId = "node-1";
  readonly adapter = "mock";
  readonly target = "echo";
  readonly done = new Promise<never>(() => {});
  readonly cancelled: string[] = [];
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
  const starting = startRun(serviceFor(run), submission, never, caller);
  run.emit({ type: "output", text: "a" });
  let ends = 0;
  const body = streamBody(await starting, textWriter, () => ends++);
  const reader = body.getReader();
  assert.equal(new TextDecoder().decode((await reader.read()).value), "[a");
  await reader.cancel();
  run.emit({ type: "output", text: "late" });
  run.emit({ type: "completed", finishReason: "stop", exitCode: 0 });
  assert.deepEqual(run.cancelled, ["client went away"]);
  assert.equal(ends, 1);
});
