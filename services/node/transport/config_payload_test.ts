import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { NodeConfigPayloadSchema } from "../../../proto/gen/iop/v1/node_pb.ts";
import { fromConfigPayload } from "./config_payload.ts";

const payload = (adapters: { name: string; kind: string; settings: unknown }[]) =>
  create(NodeConfigPayloadSchema, {
    nodeId: "n1",
    adapters: adapters.map((a) => ({
      name: a.name,
      kind: a.kind,
      enabled: true,
      settingsJson: JSON.stringify(a.settings),
    })),
  });

Deno.test("pushed settings are read with the kind's rules and defaults", () => {
  const settings = fromConfigPayload(payload([
    { name: "llm", kind: "vllm", settings: { base_url: "http://gpu:8000", models: ["m"] } },
  ]));
  assert.deepEqual(settings.rejected, {});
  assert.deepEqual(settings.adapters, [{
    name: "llm",
    enabled: true,
    kind: "vllm",
    settings: {
      baseUrl: "http://gpu:8000",
      apiKey: "",
      apiKeyEnv: "",
      connectTimeoutMs: 10_000,
      firstTokenTimeoutMs: 120_000,
      idleTimeoutMs: 60_000,
      models: ["m"],
    },
  }]);
});

Deno.test("a pushed adapter whose settings break its kind's rules is refused, naming the key", () => {
  const settings = fromConfigPayload(payload([
    { name: "bad", kind: "mock", settings: { tokens: -3 } },
    { name: "nourl", kind: "ollama", settings: {} },
    { name: "good", kind: "mock", settings: {} },
  ]));
  assert.deepEqual(settings.adapters.map((a) => a.name), ["good"]);
  assert.match(settings.rejected["bad"]!, /adapters\[0\]\.tokens/);
  assert.match(settings.rejected["nourl"]!, /adapters\[1\]\.base_url/);
});

Deno.test("an adapter of a kind this Node does not know reaches the registry to be reported", () => {
  const settings = fromConfigPayload(payload([{ name: "x", kind: "tpu_magic", settings: {} }]));
  assert.deepEqual(settings.adapters.map((a) => [a.name, a.kind]), [["x", "tpu_magic"]]);
  assert.deepEqual(settings.rejected, {});
});
