/**
 * An Edge and a Node (the shared fixture of tests/stack.ts) whose Node drives three fake model
 * servers (Ollama, vLLM, an OpenAI-compatible provider with an API key) through the real
 * adapters, with a real SQLite history: what `model_path_test.ts` proves the model path on.
 * @module
 */
import { Registry } from "prom-client";
import { createLogger } from "../shared/log.ts";
import { isTerminal, type RunEvent, type TerminalRunEvent } from "../shared/run.ts";
import type { FakeBehavior, RecordedRequest } from "../shared/testing/fake_model_server.ts";
import { type FakeOllama, startFakeOllama } from "../shared/testing/fake_ollama.ts";
import { type FakeOpenAI, startFakeOpenAI } from "../shared/testing/fake_openai.ts";
import type { RunHandle } from "../services/edge/ports.ts";
import type { EdgeService } from "../services/edge/service.ts";
import { createAdapterMetrics } from "../services/node/adapters/adapter_metrics.ts";
import { adapterFactories, startEdge, startNode, type TestEdge, type TestNode } from "./stack.ts";

/** The node's id in the Edge config. */
export const NODE_ID = "gpu-1";

/** The answer of every fake's default model, and the pieces it streams it in. */
export const REPLY = "The answer is 42.";

/** Pieces {@linkcode REPLY} streams in, as the fakes split it. */
export const REPLY_PIECES = ["The", " answer", " is", " 42."];

/**
 * Models every fake serves besides its default one, each with a behaviour a test relies on.
 * The long delays are far beyond any test's time: a run on them ends only by a cancel.
 */
export const MODEL_BEHAVIOR: Record<string, FakeBehavior> = {
  /** Streams headers at once, then stays silent (the model's prefill) for a minute. */
  "slow-first": { firstTokenDelayMs: 60_000 },
  /** Streams many pieces slowly, so that a cancel lands mid-stream. */
  "slow-stream": { tokens: 2_000, chunkDelayMs: 25 },
  /** Without streaming, takes a minute to answer. */
  "slow-answer": { firstTokenDelayMs: 60_000 },
  /** Sends two pieces, then drops the connection like a crashed server. */
  "dies": { reply: "one two three four five", disconnectAfterChunks: 2 },
  /** Sends two pieces, then the backend's in-stream error frame. */
  "fails": {
    reply: "one two three four five",
    failAfterChunks: 2,
    failMessage: "CUDA error: out of memory",
  },
};

/** What the three adapters are named on the node, with each fake's default model. */
export const ADAPTERS = {
  ollama: { model: "llama3.2" },
  vllm: { model: "test-model" },
  openai: { model: "test-model" },
} as const;

/** An adapter name of the node. */
export type AdapterName = keyof typeof ADAPTERS;

/** A running Edge + Node pair and the three fakes behind the node. */
export interface ModelPathStack {
  edge: TestEdge;
  node: TestNode;
  service: EdgeService;
  fakes: { ollama: FakeOllama; vllm: FakeOpenAI; openai: FakeOpenAI };
  /** The API key the openai adapter reads from the environment. */
  apiKey: string;
  /** Where the adapters record their metrics. */
  metrics: Registry;
  /** Stops everything in reverse order and removes the temp directory. */
  close(): Promise<void>;
}

const KEY_ENV = "IOP_TEST_MODEL_PATH_OPENAI_KEY";

/** Starts the fakes, the Edge with its node wire on port 0, and a Node that registers with it. */
export async function startModelPathStack(): Promise<ModelPathStack> {
  const logger = createLogger("test", { level: "error", writer: () => {} });
  const cleanups: (() => Promise<void> | void)[] = [];
  const close = async () => {
    // Reverse order: the node stops before the fakes it talks to.
    for (const fn of cleanups.splice(0).reverse()) await fn();
  };
  try {
    const extra = Object.keys(MODEL_BEHAVIOR);
    const ollama = startFakeOllama({
      models: [ADAPTERS.ollama.model, ...extra],
      perModel: { ...MODEL_BEHAVIOR, [ADAPTERS.ollama.model]: { reply: REPLY } },
    });
    cleanups.push(() => ollama.close());
    const vllm = startFakeOpenAI({
      flavor: "vllm",
      models: [ADAPTERS.vllm.model, ...extra],
      perModel: { ...MODEL_BEHAVIOR, [ADAPTERS.vllm.model]: { reply: REPLY } },
    });
    cleanups.push(() => vllm.close());
    const apiKey = `sk-test-${crypto.randomUUID()}`;
    const openai = startFakeOpenAI({
      flavor: "openai",
      models: [ADAPTERS.openai.model, ...extra],
      apiKey,
      perModel: { ...MODEL_BEHAVIOR, [ADAPTERS.openai.model]: { reply: REPLY } },
    });
    cleanups.push(() => openai.close());
    Deno.env.set(KEY_ENV, apiKey);
    cleanups.push(() => Deno.env.delete(KEY_ENV));

    const edge = await startEdge({
      logger,
      config: {
        edge: { id: "edge-model-path" },
        nodes: [{
          id: NODE_ID,
          token: `${NODE_ID}-token`,
          adapters: [
            { name: "ollama", kind: "ollama", base_url: ollama.url, connect_timeout_ms: 2_000 },
            { name: "vllm", kind: "vllm", base_url: vllm.url, connect_timeout_ms: 2_000 },
            {
              name: "openai",
              kind: "openai_compat",
              base_url: `${openai.url}/v1`,
              api_key_env: KEY_ENV,
              connect_timeout_ms: 2_000,
            },
          ],
        }],
      },
    });
    cleanups.push(() => edge.close());
    // Runs first: ends answers the fakes are still stalling, so that a run whose cancel never
    // reached its backend fails at once instead of holding the node's shutdown for a minute.
    cleanups.push(() => [ollama, vllm, openai].forEach((f) => f.log.stopAll()));
    const metrics = new Registry();
    const factories = adapterFactories({ metrics: createAdapterMetrics(metrics), logger });
    const node = await startNode(edge, { factories, readyMs: 5_000 });
    if (node.adapters.join(",") !== "ollama,vllm,openai") {
      throw new Error(`node registered adapters ${node.adapters.join(",")}`);
    }
    return {
      edge,
      node,
      service: edge.service,
      fakes: { ollama, vllm, openai },
      apiKey,
      metrics,
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}

/** Resolves with `promise`, or rejects when it takes longer than `ms`. */
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

/**
 * Reads every event of a run until its terminal one; `onEvent` sees each as it arrives.
 * Fails when the run does not end within `ms` (a hang is a failure, not a slow test).
 */
export function collect(
  handle: RunHandle,
  onEvent: (event: RunEvent) => void = () => {},
  ms = 5_000,
): Promise<{ events: RunEvent[]; terminal: TerminalRunEvent }> {
  const read = async () => {
    const events: RunEvent[] = [];
    for await (const event of handle.events()) {
      events.push(event);
      onEvent(event);
      if (isTerminal(event)) return { events, terminal: event };
    }
    throw new Error(`run ${handle.runId} ended without a terminal event`);
  };
  return within(read(), ms, `run ${handle.runId} reaching its end`);
}

/** Resolves with the first request the fake receives on `path` (e.g. "/api/chat"). */
export async function requestOn(
  fake: { log: { waitForRequest(n: number): Promise<RecordedRequest> } },
  path: string,
): Promise<RecordedRequest> {
  for (let n = 1;; n++) {
    const request = await within(fake.log.waitForRequest(n), 5_000, `a request on ${path}`);
    if (request.method === "POST" && request.path === path) return request;
  }
}

/** The chat endpoint each adapter posts to. */
export function chatPath(adapter: AdapterName): string {
  return adapter === "ollama" ? "/api/chat" : "/v1/chat/completions";
}
