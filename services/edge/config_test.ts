import assert from "node:assert/strict";
import { ConfigError } from "../../shared/config.ts";
import { hashSecret } from "../../shared/secrets.ts";
import { loadEdgeConfig, parseEdgeConfig } from "./config.ts";

const FILE = "edge.yaml";

/** A minimal valid node record; `extra` replaces or adds keys. */
function node(id: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    id,
    token: `${id}-token`,
    adapters: [{ name: "mock", kind: "mock" }],
    ...extra,
  };
}

function rejects(raw: unknown, path: string, problem: RegExp): void {
  assert.throws(
    () => parseEdgeConfig(raw, FILE),
    (err: unknown) => {
      assert.ok(err instanceof ConfigError, `expected ConfigError, got ${err}`);
      assert.equal(err.file, FILE);
      assert.equal(err.path, path);
      assert.match(err.message, new RegExp(`^edge\\.yaml: ${path.replace(/[[\].]/g, "\\$&")}: `));
      assert.match(err.message, problem);
      return true;
    },
  );
}

async function withFile(text: string, fn: (path: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "iop_edge_config_" });
  try {
    const path = `${dir}/edge.yaml`;
    await Deno.writeTextFile(path, text);
    await fn(path);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("an empty config file loads with the documented defaults", () => {
  const config = parseEdgeConfig({}, FILE);
  assert.equal(config.edge.id, "edge-local");
  assert.equal(config.http.port, 8080);
  assert.equal(config.wire.port, 7100);
  assert.equal(config.wire.heartbeatIntervalMs, 2000);
  assert.deepEqual(config.nodes, []);
});

Deno.test("the shipped deploy/config/edge.yaml is valid", async () => {
  const config = await loadEdgeConfig(
    new URL("../../deploy/config/edge.yaml", import.meta.url).pathname,
    () => undefined,
  );
  assert.ok(config.nodes.length >= 1);
  assert.ok(config.nodes[0]!.adapters.some((a) => a.kind === "cli"));
});

Deno.test("invalid YAML is reported with the file name and the line", async () => {
  await withFile("edge:\n  id: a\nnodes:\n  - id: x\n   token: [unclosed\n", async (path) => {
    const err = await loadEdgeConfig(path, () => undefined).catch((e) => e);
    assert.ok(err instanceof ConfigError);
    assert.equal(err.file, path);
    assert.match(err.message, new RegExp(`^${path}: line [45], column \\d+: invalid YAML`));
  });
});

Deno.test("a missing config file is reported with its name", async () => {
  const err = await loadEdgeConfig("/nonexistent/iop/edge.yaml", () => undefined).catch((e) => e);
  assert.ok(err instanceof ConfigError);
  assert.match(err.message, /^\/nonexistent\/iop\/edge\.yaml: cannot read file/);
});

Deno.test("a node with an empty id is rejected at its key path", () => {
  rejects({ nodes: [node("a"), node("", { token: "t" })] }, "nodes[1].id", /must not be empty/);
});

Deno.test("a node with a blank token is rejected at its key path", () => {
  rejects({ nodes: [node("a", { token: "   " })] }, "nodes[0].token", /must not be empty/);
});

Deno.test("a node without a token is rejected as required", () => {
  rejects({ nodes: [{ id: "a" }] }, "nodes[0].token", /is required/);
});

Deno.test("an explicitly empty alias is rejected at its key path", () => {
  rejects({ nodes: [node("a", { alias: "" })] }, "nodes[0].alias", /must not be empty/);
});

Deno.test("duplicate node ids are rejected naming both places", () => {
  rejects(
    { nodes: [node("a"), node("a", { token: "other" })] },
    "nodes[1].id",
    /duplicate node id 'a' \(first at nodes\[0\]\.id\)/,
  );
});

Deno.test("duplicate node tokens are rejected without printing the token", () => {
  rejects(
    { nodes: [node("a", { token: "secret-1" }), node("b", { token: "secret-1" })] },
    "nodes[1].token",
    /duplicate node token 'se…' \(first at nodes\[0\]\.token\)/,
  );
  assert.throws(
    () =>
      parseEdgeConfig({ nodes: [node("a", { token: "s3" }), node("b", { token: "s3" })] }, FILE),
    (err: Error) => !err.message.includes("s3'"),
  );
});

Deno.test("duplicate node aliases are rejected naming both places", () => {
  rejects(
    { nodes: [node("a", { alias: "gpu" }), node("b", { alias: "gpu" })] },
    "nodes[1].alias",
    /duplicate node alias 'gpu' \(first at nodes\[0\]\.alias\)/,
  );
});

Deno.test("an alias that is another node's id is rejected", () => {
  rejects(
    { nodes: [node("a"), node("b", { alias: "a" })] },
    "nodes[1].alias",
    /'a' is already another node's id/,
  );
});

Deno.test("a node may use its own id as its alias", () => {
  const config = parseEdgeConfig({ nodes: [node("a", { alias: "a" })] }, FILE);
  assert.equal(config.nodes[0]!.alias, "a");
});

Deno.test("a provider whose adapter is not defined on its node is rejected", () => {
  rejects(
    { nodes: [node("a", { providers: [{ id: "p", adapter: "ollama", target: "m" }] })] },
    "nodes[0].providers[0].adapter",
    /adapter 'ollama' is not defined on this node/,
  );
});

Deno.test("a provider whose adapter is disabled is rejected", () => {
  rejects(
    {
      nodes: [node("a", {
        adapters: [{ name: "mock", kind: "mock", enabled: false }],
        providers: [{ id: "p", adapter: "mock", target: "m" }],
      })],
    },
    "nodes[0].providers[0].adapter",
    /adapter 'mock' is disabled on this node/,
  );
});

Deno.test("duplicate adapter names on one node are rejected", () => {
  rejects(
    {
      nodes: [node("a", {
        adapters: [{ name: "m", kind: "mock" }, { name: "m", kind: "cli" }],
      })],
    },
    "nodes[0].adapters[1].name",
    /duplicate adapter name 'm'/,
  );
});

Deno.test("an unknown adapter kind is rejected listing the allowed kinds", () => {
  rejects(
    { nodes: [node("a", { adapters: [{ name: "x", kind: "tensorrt" }] })] },
    "nodes[0].adapters[0].kind",
    /must be one of mock, cli, ollama, vllm, openai_compat: current value is 'tensorrt'/,
  );
});

Deno.test("a wrongly typed value names its key and current value", () => {
  rejects({ wire: { heartbeat_interval_ms: "fast" } }, "wire.heartbeat_interval_ms", /'fast'/);
  rejects({ http: { port: 70000 } }, "http.port", /at most 65535: current value is 70000/);
});

Deno.test("IOP_EDGE_* variables override the file, typed as declared", () => {
  const env: Record<string, string> = {
    IOP_EDGE_ID: "edge-b",
    IOP_EDGE_HTTP_PORT: "18080",
    IOP_EDGE_WIRE_PORT: "17100",
    IOP_EDGE_HEARTBEAT_INTERVAL_MS: "250",
    IOP_EDGE_API_KEYS: "k1, k2,,",
  };
  return withFile("edge: { id: edge-a }\nhttp: { port: 1 }\n", async (path) => {
    const config = await loadEdgeConfig(path, (name) => env[name]);
    assert.equal(config.edge.id, "edge-b");
    assert.equal(config.http.port, 18080);
    assert.equal(config.wire.port, 17100);
    assert.equal(config.wire.heartbeatIntervalMs, 250);
    assert.deepEqual(config.http.apiKeys, ["k1", "k2"]);
  });
});

Deno.test("a non-numeric IOP_EDGE_HTTP_PORT is rejected naming the variable", async () => {
  await withFile("{}\n", async (path) => {
    const err = await loadEdgeConfig(path, (n) => n === "IOP_EDGE_HTTP_PORT" ? "80a" : undefined)
      .catch((e) => e);
    assert.ok(err instanceof ConfigError);
    assert.equal(err.message, "IOP_EDGE_HTTP_PORT: must be a number: current value is '80a'");
  });
});

Deno.test("a node token and API keys may be stored as sha256: hashes", () => {
  const token = hashSecret("plain-node-token");
  const key = hashSecret("plain-api-key");
  const config = parseEdgeConfig({
    nodes: [node("a", { token })],
    http: { api_keys: [key, "plain-key"] },
  }, FILE);
  assert.equal(config.nodes[0]!.token, token);
  assert.deepEqual(config.http.apiKeys, [key, "plain-key"]);
});

Deno.test("a malformed sha256: node token or API key is rejected at its key path", () => {
  rejects(
    { nodes: [node("a", { token: "sha256:abc" })] },
    "nodes[0].token",
    /must be 'sha256:' followed by 64 hex digits .*current value has 3 characters/,
  );
  rejects(
    { http: { api_keys: ["ok", `sha256:${"x".repeat(64)}`] } },
    "http.api_keys[1]",
    /not all of them hex digits/,
  );
});

Deno.test("a plain node token whose hash another node stores is a duplicate", () => {
  rejects(
    { nodes: [node("a", { token: hashSecret("same") }), node("b", { token: "same" })] },
    "nodes[1].token",
    /duplicate node token 'sa…' \(first at nodes\[0\]\.token\)/,
  );
  rejects(
    { nodes: [node("a", { token: "same" }), node("b", { token: hashSecret("same") })] },
    "nodes[1].token",
    /duplicate node token 'sha256:…' \(first at nodes\[0\]\.token\)/,
  );
});
