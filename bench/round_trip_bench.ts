/**
 * A mock run's round trip through Edge and Node: submitted at an in-process EdgeService, sent over
 * a real TCP socket to an in-process NodeCore (through its Edge client), executed by the mock
 * adapter (8 tokens, no delay), recorded in a real SQLite history file, and relayed back event by
 * event; the time is submit → terminal event. The baseline calls the same mock adapter directly,
 * so the ratio is the cost of the Edge↔Node path.
 *
 * Run: `deno bench -A bench/round_trip_bench.ts`
 * @module
 */
import { runInput } from "../shared/run.ts";
import { createMockAdapter } from "../services/node/adapters/mock.ts";
import type { EventSink } from "../services/node/ports.ts";
import { startStack } from "../tests/stack.ts";

const TOKENS = 8;
const MOCK = {
  tokens: TOKENS,
  tokenDelayMs: 0,
  startDelayMs: 0,
  failWith: "",
  failRetryable: false,
  embeddingDimensions: 8,
};

const stack = await startStack({
  config: {
    nodes: [{
      id: "bench",
      token: "bench-token",
      adapters: [{ name: "mock", kind: "mock", tokens: TOKENS, token_delay_ms: 0 }],
    }],
  },
});
// deno bench has no after-all hook; the sockets die with the process, the temp history must not.
globalThis.addEventListener("unload", () => Deno.removeSync(stack.dir, { recursive: true }));
const input = runInput({ adapter: "mock", target: "demo", prompt: "round trip" });

const adapter = createMockAdapter("mock", MOCK);
let chars = 0;
const sink: EventSink = {
  output: (text) => void (chars += text.length),
  toolCall: () => {},
  embedding: () => {},
  log: () => {},
  ready: () => undefined,
};

Deno.bench({
  name: `mock adapter called directly (${TOKENS} tokens)`,
  group: "round trip",
  baseline: true,
  fn: async () => {
    const result = await adapter.execute(
      { runId: "r", ...input },
      sink,
      { signal: new AbortController().signal },
    );
    if (result.usage?.outputTokens !== TOKENS) throw new Error("short run");
  },
});

Deno.bench({
  name: `mock run submit → terminal event via Edge, TCP, Node (${TOKENS} tokens)`,
  group: "round trip",
  fn: async () => {
    const handle = await stack.service.submitRun(input);
    let outputs = 0;
    for await (const event of handle.events()) if (event.type === "output") outputs++;
    const terminal = await handle.done;
    if (terminal.type !== "completed" || outputs !== TOKENS) {
      throw new Error(`run ended ${terminal.type} after ${outputs} outputs`);
    }
  },
});
