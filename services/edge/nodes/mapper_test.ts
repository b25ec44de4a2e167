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
    max_concurrent_runs: 3,
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

Deno.test("the payload carries the node's identity, limits and heartbeat interval", () => {
  const payload = buildNodeConfigPayload(record, { heartbeatIntervalMs: 250 });
  assert.equal(payload.nodeId, "n1");
  assert.equal(payload.alias, "gpu");
  assert.equal(payload.maxConcurrentRuns, 3);
  assert.equal(payload.heartbeatIntervalMs, 250);
  assert.deepEqual(payload.providers.map((p) => [p.id, p.adapter, p.target, p.modelGroup]), [
    ["p1", "llm", "llama3", "chat"],
  ]);
});

Deno.test("every adapter kind survives the wire with its settings", () => {
  const payload = buildNodeConfigPayload(record, { heartbeatIntervalMs: 2000 });
  const wire = fromBinary(NodeConfigPayloadSchema, toBinary(NodeConfigPayloadSchema, payload));
  assert.deepEqual(
    wire.adapters.map((a) => [a.name, a.kind, a.enabled, a.settings.case]),
    [
      ["fast", "mock", true, "mock"],
      ["cli", "cli", true, "cli"],
      ["llm", "ollama", true, "http"],
      ["off", "mock", false, "mock"],
    ],
  );
  const [mock, cli, http] = wire.adapters;
  assert.equal(mock?.settings.case, "mock");
  if (mock?.settings.case === "mock") {
    const m = mock.settings.value;
    assert.deepEqual([m.tokens, m.tokenDelayMs, m.startDelayMs, m.failWith, m.failRetryable], [
      5,
      7,
      0,
      "TIMEOUT",
      false,
    ]);
  }
  assert.equal(cli?.settings.case, "cli");
  if (cli?.settings.case === "cli") {
    const p = cli.settings.value.profiles[0]!;
    assert.deepEqual(
      [p.name, p.command, [...p.args], { ...p.env }, p.cwd, p.timeoutMs],
      ["echo", "sh", ["-c", "echo {prompt}"], { A: "1" }, "/tmp", 900],
    );
  }
  assert.equal(http?.settings.case, "http");
  if (http?.settings.case === "http") {
    const h = http.settings.value;
    assert.deepEqual([h.baseUrl, h.apiKey, h.apiKeyEnv, [...h.models]], [
      "http://127.0.0.1:11434",
      "",
      "OLLAMA_KEY",
      ["llama3"],
    ]);
    assert.equal(h.firstTokenTimeoutMs, 120_000);
  }
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
