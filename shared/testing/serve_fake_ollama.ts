/**
 * Runs the fake Ollama as a standalone server, so a container fleet has a real model path
 * without a GPU: `deno run --cached-only -A shared/testing/serve_fake_ollama.ts`. It listens on
 * `IOP_FAKE_OLLAMA_HOST:IOP_FAKE_OLLAMA_PORT` (default 0.0.0.0:11434, Ollama's port) and
 * serves `IOP_FAKE_OLLAMA_MODELS` (comma separated, default `llama3.2,qwen2.5:0.5b`) with
 * token delays of a small model on a modest GPU (`IOP_FAKE_OLLAMA_FIRST_TOKEN_MS`, default
 * 150; `IOP_FAKE_OLLAMA_TOKEN_MS`, default 40). Each answer is `IOP_FAKE_OLLAMA_TOKENS` pieces
 * (default 24). A request may still override any of it with the `x-fake-behavior` header.
 * @module
 */
import { createLogger } from "../log.ts";
import { startFakeOllama } from "./fake_ollama.ts";

const logger = createLogger("fake_ollama");

function intEnv(name: string, fallback: number): number {
  const raw = Deno.env.get(name);
  if (raw === undefined || raw === "") return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 0) {
    logger.error("invalid environment value", { name, value: raw });
    Deno.exit(2);
  }
  return value;
}

const models = (Deno.env.get("IOP_FAKE_OLLAMA_MODELS") ?? "llama3.2,qwen2.5:0.5b")
  .split(",").map((m) => m.trim()).filter((m) => m !== "");
const listen = {
  hostname: Deno.env.get("IOP_FAKE_OLLAMA_HOST") ?? "0.0.0.0",
  port: intEnv("IOP_FAKE_OLLAMA_PORT", 11434),
};
const fake = startFakeOllama({
  models,
  listen,
  defaults: {
    tokens: intEnv("IOP_FAKE_OLLAMA_TOKENS", 24),
    firstTokenDelayMs: intEnv("IOP_FAKE_OLLAMA_FIRST_TOKEN_MS", 150),
    chunkDelayMs: intEnv("IOP_FAKE_OLLAMA_TOKEN_MS", 40),
  },
});
logger.info("fake ollama listening", { url: fake.url, models: models.join(",") });

// The request log only matters to in-process tests; trim it so a long-lived fleet stays small.
const trim = setInterval(() => {
  if (fake.requests.length > 200) fake.requests.splice(0, fake.requests.length - 100);
}, 10_000);

for (const signal of ["SIGINT", "SIGTERM"] as const) {
  Deno.addSignalListener(signal, () => {
    clearInterval(trim);
    logger.info("fake ollama stopping", { signal });
    void fake.close().then(() => Deno.exit(0));
  });
}
