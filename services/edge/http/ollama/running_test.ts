import assert from "node:assert/strict";
import type { ModelRecord } from "../../config.ts";
import { KEEP_ALIVE_MS, runningModels } from "./running.ts";

function model(name: string): ModelRecord {
  return {
    name,
    aliases: [],
    route: "pool",
    adapter: "",
    target: "",
    queue: { maxLength: 64, maxWaitMs: 30_000, waitForProviderMs: 0 },
    capabilities: ["chat"],
  };
}

const MODELS = [model("chat"), model("idle"), model("embed")];

Deno.test("runningModels lists the given models the counts hold runs for, in the models' order", async () => {
  const counts = new Map([["embed", 1], ["chat", 2], ["not-the-callers", 3]]);
  const entries = await runningModels(MODELS, counts, 0);
  assert.deepEqual(entries.map((e) => e.name), ["chat", "embed"]);
  assert.deepEqual(await runningModels(MODELS, new Map(), 0), []);
});

Deno.test("runningModels answers Ollama's /api/ps entries, expiring a keep-alive from now", async () => {
  const [entry, ...rest] = await runningModels(MODELS, new Map([["chat", 1]]), 1_000);
  assert.deepEqual(rest, []);
  assert.equal(entry!.name, "chat");
  assert.equal(entry!.model, "chat");
  assert.equal(entry!.size, 0);
  assert.equal(entry!.size_vram, 0);
  assert.match(entry!.digest, /^[0-9a-f]{64}$/);
  assert.equal(entry!.expires_at, new Date(1_000 + KEEP_ALIVE_MS).toISOString());
});
