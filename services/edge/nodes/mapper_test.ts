import assert from "node:assert/strict";
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import { NodeConfigPayloadSchema } from "../../../proto/gen/iop/v1/node_pb.ts";
import { parseEdgeConfig } from "../config.ts";
import { buildNodeConfigPayload } from "./mapper.ts";

const config = parseEdgeConfig({
  nodes: [{
    id: "n1",
    alias: "gpu",
    token: "t1",
    adapters: [
      { name: "fast", kind: "mock", tokens: 5, token_delay_ms: 7, fail_with: "TIMEOUT" },
      {
        name: "cli",
        kind: "cli",
        profiles: [{
          name: "echo",
          command: "sh",
          args: ["-c", "echo {prompt}"],
          env: { A: "1" },
          cwd: "/tmp",
          timeout_ms: 900,
        }],
      },
      {
        name: "llm",
        kind: "ollama",
        base_url: "http://127.0.0.1:11434",
        api_key_env: "OLLAMA_KEY",
        models: ["llama3"],
      },
      { name: "off", kind: "mock", enabled: false },
    ],
    providers: [{ id: "p1", adapter: "llm", target: "llama3", model_group: "chat" }],
  }],
}, "edge.yaml");
const record = config.nodes[0]!;

Deno.test("the payload carries the node's identity, providers and heartbeat interval, no run cap", () => {
  const payload = buildNodeConfigPayload(record, { heartbeatIntervalMs: 250 });
  assert.equal(payload.nodeId, "n1");
  assert.equal(payload.alias, "gpu");
  // Field 6 (max_concurrent_runs) is retired: nothing in the payload caps the node's runs.
  assert.ok(!("maxConcurrentRuns" in payload));
  assert.equal(payload.heartbeatIntervalMs, 250);
  assert.deepEqual(payload.providers.map((p) => [p.id, p.adapter, p.target, p.modelGroup]), [
    ["p1", "llm", "llama3", "chat"],
  ]);
});

Deno.test("every adapter kind survives the wire with its settings, in the config file's keys", () => {
  const payload = buildNodeConfigPayload(record, { heartbeatIntervalMs: 2000 });
  const wire = fromBinary(NodeConfigPayloadSchema, toBinary(NodeConfigPayloadSchema, payload));
  assert.deepEqual(wire.adapters.map((a) => [a.name, a.kind, a.enabled]), [
    ["fast", "mock", true],
    ["cli", "cli", true],
    ["llm", "ollama", true],
    ["off", "mock", false],
  ]);
  const [mock, cli, http] = wire.adapters.map((a) => JSON.parse(a.settingsJson));
  assert.deepEqual(mock, {
    tokens: 5,
    token_delay_ms: 7,
    start_delay_ms: 0,
    fail_with: "TIMEOUT",
    fail_retryable: false,
  });
  assert.deepEqual(cli.profiles[0], {
    name: "echo",
    command: "sh",
    args: ["-c", "echo {prompt}"],
    resume_args: [],
    env: { A: "1" },
    cwd: "/tmp",
    timeout_ms: 900,
    description: "",
    max_concurrency: 2,
  });
  assert.deepEqual(http, {
    base_url: "http://127.0.0.1:11434",
    api_key: "",
    api_key_env: "OLLAMA_KEY",
    connect_timeout_ms: 10_000,
    first_token_timeout_ms: 120_000,
    idle_timeout_ms: 60_000,
    models: ["llama3"],
  });
});

Deno.test("the payload never carries the node's token", () => {
  const payload = buildNodeConfigPayload(record, { heartbeatIntervalMs: 2000 });
  const bytes = toBinary(NodeConfigPayloadSchema, payload);
  assert.ok(!new TextDecoder().decode(bytes).includes("t1\u0012"));
  assert.ok(
    !JSON.stringify(payload, (_k, v) => typeof v === "bigint" ? String(v) : v)
      .includes('"t1"'),
  );
});
