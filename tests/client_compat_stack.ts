/**
 * A real Edge HTTP server and Node whose real adapters drive fake Ollama and OpenAI-compatible
 * servers (which record every request), shared by the API-fidelity and client-compatibility
 * suites, with the unmodified `openai` and `ollama` clients pointed at it.
 * @module
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { Ollama } from "ollama";
import { createLogger } from "../shared/log.ts";
import type { RecordedRequest } from "../shared/testing/fake_model_server.ts";
import { type FakeOllama, startFakeOllama } from "../shared/testing/fake_ollama.ts";
import { type FakeOpenAI, startFakeOpenAI } from "../shared/testing/fake_openai.ts";
import { startEdge, startNode, type TestEdge } from "./stack.ts";

/** A 1×1 PNG, as the clients send images. */
export const PNG_BASE64 =
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

/** What the JSON-answering models reply, and its parsed form. */
export const JSON_REPLY = '{"city":"Oslo","temp_c":21}';
export const PARSED = { city: "Oslo", temp_c: 21 };

export const WEATHER_SCHEMA = {
  type: "object",
  properties: { city: { type: "string" }, temp_c: { type: "number" } },
  required: ["city", "temp_c"],
  additionalProperties: false,
};

export const WEATHER_TOOL = {
  type: "function" as const,
  function: {
    name: "get_weather",
    description: "Weather of a city",
    parameters: { type: "object", properties: { city: { type: "string" } } },
  },
};

/** The running stack; disposing it stops the Edge, the Node and both fakes. */
export interface Fidelity {
  edge: TestEdge;
  ollama: FakeOllama;
  openai: FakeOpenAI;
  oa: OpenAI;
  ol: Ollama;
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * Models: `cloud` (openai_compat), `cloud-json` (openai_compat answering JSON), `local`
 * (ollama), `local-json` (ollama answering JSON), `mocked` (mock), `shell` (cli), and the
 * embedding models `cloud-embed` (openai_compat) and `local-embed` (ollama).
 */
export async function startFidelity(): Promise<Fidelity> {
  const logger = createLogger("test", { level: "error", writer: () => {} });
  const ollama = startFakeOllama({
    models: ["llama3.2", "llama-json", "nomic-embed-text"],
    perModel: { "llama-json": { reply: JSON_REPLY } },
  });
  const openai = startFakeOpenAI({
    models: ["gpt-test", "gpt-json", "text-embed"],
    perModel: {
      "gpt-json": { reply: JSON_REPLY },
      "gpt-test": {
        reply: "ok",
        toolCalls: [{ name: "get_weather", arguments: { city: "Oslo" } }],
      },
    },
  });
  let edge: TestEdge | undefined;
  try {
    edge = await startEdge({
      logger,
      http: true,
      config: {
        nodes: [{
          id: "n1",
          token: "n1-token",
          adapters: [
            { name: "mock", kind: "mock", tokens: 3, token_delay_ms: 0 },
            { name: "ollama", kind: "ollama", base_url: ollama.url, connect_timeout_ms: 2_000 },
            {
              name: "openai",
              kind: "openai_compat",
              base_url: `${openai.url}/v1`,
              connect_timeout_ms: 2_000,
            },
            { name: "sh", kind: "cli", profiles: [{ name: "echo", command: "echo" }] },
          ],
        }],
        models: [
          { name: "cloud", route: "direct", adapter: "openai", target: "gpt-test" },
          { name: "cloud-json", route: "direct", adapter: "openai", target: "gpt-json" },
          { name: "local", route: "direct", adapter: "ollama", target: "llama3.2" },
          { name: "local-json", route: "direct", adapter: "ollama", target: "llama-json" },
          { name: "mocked", route: "direct", adapter: "mock", target: "echo" },
          { name: "shell", route: "direct", adapter: "sh", target: "echo" },
          {
            name: "cloud-embed",
            route: "direct",
            adapter: "openai",
            target: "text-embed",
            capabilities: ["embeddings"],
          },
          {
            name: "cloud-vision",
            route: "direct",
            adapter: "openai",
            target: "gpt-test",
            capabilities: ["chat", "vision"],
          },
          {
            name: "local-vision",
            route: "direct",
            adapter: "ollama",
            target: "llama3.2",
            capabilities: ["chat", "vision"],
          },
          {
            name: "local-embed",
            route: "direct",
            adapter: "ollama",
            target: "nomic-embed-text",
            capabilities: ["embeddings"],
          },
        ],
      },
    });
    await startNode(edge, { readyMs: 5_000 });
  } catch (err) {
    await edge?.close();
    await ollama.close();
    await openai.close();
    throw err;
  }
  const url = edge.url;
  return {
    edge,
    ollama,
    openai,
    oa: new OpenAI({ baseURL: `${url}/v1`, apiKey: "unused", maxRetries: 0 }),
    ol: new Ollama({ host: url }),
    async [Symbol.asyncDispose]() {
      await edge.close();
      ollama.log.stopAll();
      openai.log.stopAll();
      await ollama.close();
      await openai.close();
    },
  };
}

/** The bodies of the completed POSTs the fake received on `path`, in order. */
export function posted(
  fake: { requests: RecordedRequest[] },
  path: string,
): Record<string, unknown>[] {
  return fake.requests
    .filter((r) => r.method === "POST" && r.path === path)
    .map((r) => r.body as Record<string, unknown>);
}

/** The only POST the fake received on `path`. */
export function onlyPost(
  fake: { requests: RecordedRequest[] },
  path: string,
): Record<string, unknown> {
  const bodies = posted(fake, path);
  assert.equal(bodies.length, 1, `expected one POST ${path}, got ${bodies.length}`);
  return bodies[0]!;
}

/** The OpenAI chat path, where both the Edge and the fake OpenAI answer. */
export const CHAT = "/v1/chat/completions";
