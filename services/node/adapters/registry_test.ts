import assert from "node:assert/strict";
import type { AdapterConfig, MockSettings } from "../ports.ts";
import { cliAdapterFactory } from "./cli.ts";
import { mockAdapterFactory } from "./mock.ts";
import { type AdapterFactories, buildAdapterRegistry } from "./registry.ts";

const mock: MockSettings = {
  tokens: 1,
  tokenDelayMs: 0,
  startDelayMs: 0,
  failWith: "",
  failRetryable: false,
  embeddingDimensions: 8,
};
const factories: AdapterFactories = { mock: mockAdapterFactory, cli: cliAdapterFactory };

function mockConfig(name: string, enabled = true): AdapterConfig {
  return { name, enabled, kind: "mock", settings: mock };
}

Deno.test("the registry builds each enabled adapter, found by name and listed in order", () => {
  const { adapters, rejected } = buildAdapterRegistry([
    mockConfig("m1"),
    { name: "tools", enabled: true, kind: "cli", settings: { profiles: [] } },
    mockConfig("m2"),
  ], factories);
  assert.deepEqual(rejected, {});
  assert.deepEqual(adapters.list().map((a) => [a.name, a.kind]), [
    ["m1", "mock"],
    ["tools", "cli"],
    ["m2", "mock"],
  ]);
  assert.equal(adapters.get("tools")?.kind, "cli");
  assert.equal(adapters.get("nope"), undefined);
  assert.equal(adapters.size, 3);
  assert.deepEqual([...adapters.keys()], ["m1", "tools", "m2"]);
});

Deno.test("the registry skips disabled adapters without rejecting them", () => {
  const { adapters, rejected } = buildAdapterRegistry(
    [mockConfig("on"), mockConfig("off", false)],
    factories,
  );
  assert.deepEqual([...adapters.keys()], ["on"]);
  assert.deepEqual(rejected, {});
});

Deno.test("the registry rejects every enabled adapter sharing a name", () => {
  const { adapters, rejected } = buildAdapterRegistry(
    [mockConfig("twin"), mockConfig("solo"), mockConfig("twin"), mockConfig("solo", false)],
    factories,
  );
  assert.deepEqual([...adapters.keys()], ["solo"]);
  assert.deepEqual(rejected, { twin: "adapter name is used by 2 enabled adapters" });
});

Deno.test("the registry rejects a kind it has no factory for, with the reason", () => {
  const ollama: AdapterConfig = {
    name: "gpu",
    enabled: true,
    kind: "ollama",
    settings: {
      baseUrl: "http://127.0.0.1:11434",
      apiKey: "",
      apiKeyEnv: "",
      connectTimeoutMs: 1_000,
      firstTokenTimeoutMs: 1_000,
      idleTimeoutMs: 1_000,
      models: [],
    },
  };
  // A kind from a newer Edge that this Node's types do not even know.
  const future = { ...mockConfig("quantum"), kind: "quantum" } as unknown as AdapterConfig;
  const proto = { ...mockConfig("sneaky"), kind: "toString" } as unknown as AdapterConfig;
  const { adapters, rejected } = buildAdapterRegistry([ollama, future, proto], factories);
  assert.equal(adapters.size, 0);
  assert.deepEqual(rejected, {
    gpu: "unknown adapter kind 'ollama'",
    quantum: "unknown adapter kind 'quantum'",
    sneaky: "unknown adapter kind 'toString'",
  });
});

Deno.test("the registry rejects an adapter whose factory throws, with its message", () => {
  const { adapters, rejected } = buildAdapterRegistry([mockConfig("bad"), mockConfig("good")], {
    mock: (config) => {
      if (config.name === "bad") throw new Error("settings.tokens must be positive");
      return mockAdapterFactory(config);
    },
  });
  assert.deepEqual([...adapters.keys()], ["good"]);
  assert.deepEqual(rejected, { bad: "settings.tokens must be positive" });
});

Deno.test("the registry rejects an adapter with an empty name", () => {
  const { adapters, rejected } = buildAdapterRegistry([mockConfig("")], factories);
  assert.equal(adapters.size, 0);
  assert.deepEqual(rejected, { "": "adapter name is empty" });
});

Deno.test("the registry offers no way to add adapters", () => {
  const { adapters } = buildAdapterRegistry([mockConfig("m1")], factories);
  assert.equal((adapters as unknown as { set?: unknown }).set, undefined);
  const seen: string[] = [];
  adapters.forEach((adapter, name, map) => {
    seen.push(`${name}:${adapter.kind}`);
    assert.equal(map, adapters);
  });
  assert.deepEqual(seen, ["m1:mock"]);
});
