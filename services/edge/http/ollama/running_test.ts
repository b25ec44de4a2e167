import assert from "node:assert/strict";
import type { ModelRecord } from "../../config.ts";
import type { ResourceStatus, StatusSnapshot } from "../../ports.ts";
import { KEEP_ALIVE_MS, modelsInFlight, runningModels } from "./running.ts";

function model(name: string, route: Partial<ModelRecord> = {}): ModelRecord {
  return {
    name,
    aliases: [],
    route: "pool",
    adapter: "",
    target: "",
    queue: { maxLength: 64, maxWaitMs: 30_000 },
    capabilities: ["chat"],
    ...route,
  };
}

function resource(
  kind: ResourceStatus["kind"],
  fields: Partial<ResourceStatus> & { inFlight: number },
): ResourceStatus {
  return {
    kind,
    id: fields.id ?? `${kind}-${fields.adapter ?? ""}-${fields.target ?? ""}`,
    adapter: "",
    adapterKind: "mock",
    target: "",
    modelGroup: "",
    maxConcurrency: 0,
    queued: 0,
    enabled: true,
    refused: "",
    ...fields,
  };
}

function status(resources: ResourceStatus[]): StatusSnapshot {
  return {
    edgeId: "e1",
    version: "test",
    startedAtMs: 0,
    runsInFlight: 0,
    nodes: [{
      id: "n1",
      alias: "",
      connected: true,
      draining: false,
      version: "test",
      hostname: "box",
      connectedAtMs: 0,
      lastSeenMs: 0,
      inFlight: 0,
      configVersion: 1,
      wantedConfigVersion: 1,
      resources,
    }],
  };
}

const MODELS = [
  model("chat"),
  model("idle-pool"),
  model("on-profile", { route: "direct", adapter: "cli", target: "claude" }),
  model("other-profile", { route: "direct", adapter: "cli", target: "codex" }),
  model("on-adapter", { route: "direct", adapter: "llm", target: "big" }),
  model("beside", { route: "direct", adapter: "llm", target: "small" }),
  model("on-provider", { route: "direct", adapter: "mock", target: "demo" }),
];

Deno.test("modelsInFlight maps busy providers to their pool, busy profiles and adapters to direct models", () => {
  const snapshot = status([
    resource("provider", { adapter: "mock", target: "demo", modelGroup: "chat", inFlight: 1 }),
    resource("provider", { adapter: "mock", target: "x", modelGroup: "idle-pool", inFlight: 0 }),
    resource("profile", { adapter: "cli", target: "claude", inFlight: 2 }),
    resource("profile", { adapter: "cli", target: "codex", inFlight: 0 }),
    resource("adapter", { adapter: "llm", inFlight: 1 }),
  ]);
  assert.deepEqual(modelsInFlight(MODELS, snapshot), [
    "chat",
    "on-profile",
    // An adapter row counts every target, so both direct models on it show.
    "on-adapter",
    "beside",
    // A direct model on a provider's adapter and target shares that provider's runs.
    "on-provider",
  ]);
});

Deno.test("modelsInFlight is empty while nothing runs, and only lists the models it is given", () => {
  const idle = status([resource("provider", { modelGroup: "chat", inFlight: 0 })]);
  assert.deepEqual(modelsInFlight(MODELS, idle), []);
  const busy = status([resource("provider", { modelGroup: "chat", inFlight: 3 })]);
  assert.deepEqual(modelsInFlight([model("other")], busy), []);
});

Deno.test("runningModels answers Ollama's /api/ps entries, expiring a keep-alive from now", async () => {
  const busy = status([resource("provider", { modelGroup: "chat", inFlight: 1 })]);
  const [entry, ...rest] = await runningModels(MODELS, busy, 1_000);
  assert.deepEqual(rest, []);
  assert.equal(entry!.name, "chat");
  assert.equal(entry!.model, "chat");
  assert.equal(entry!.size, 0);
  assert.equal(entry!.size_vram, 0);
  assert.match(entry!.digest, /^[0-9a-f]{64}$/);
  assert.equal(entry!.expires_at, new Date(1_000 + KEEP_ALIVE_MS).toISOString());
});
