import assert from "node:assert/strict";
import { ConfigError } from "../../shared/config.ts";
import { hashSecret } from "../../shared/secrets.ts";
import { loadEdgeConfig, parseEdgeConfig } from "./config.ts";
import { enrolledRecord } from "./nodes/enrollment_config.ts";

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

Deno.test("the shipped compose edge configs are valid and queue no CLI profile", async () => {
  for (const name of ["edge-a", "edge-b"]) {
    const config = await loadEdgeConfig(
      new URL(`../../compose/config/${name}.yaml`, import.meta.url).pathname,
      () => undefined,
    );
    const whoami = config.models.find((m) => m.name === "whoami");
    assert.deepEqual([whoami?.route, whoami?.adapter, whoami?.target], ["direct", "cli", "whoami"]);
    for (const n of config.nodes) {
      const cli = new Set(n.adapters.filter((a) => a.kind === "cli").map((a) => a.name));
      assert.ok(n.providers.every((p) => !cli.has(p.adapter)), `${name}: ${n.id} pools a CLI`);
    }
  }
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

Deno.test("a cli adapter as a pool provider is rejected: CLI profiles are never queued", () => {
  const raw = {
    nodes: [node("a", {
      adapters: [
        { name: "mock", kind: "mock" },
        { name: "shell", kind: "cli", profiles: [{ name: "whoami", command: "sh" }] },
      ],
      providers: [
        { id: "p-mock", adapter: "mock", target: "demo", model_group: "demo" },
        { id: "p-cli", adapter: "shell", target: "whoami", model_group: "whoami" },
      ],
    })],
  };
  assert.throws(() => parseEdgeConfig(raw, FILE), {
    name: "ConfigError",
    message: "edge.yaml: nodes[0].providers[1].adapter: 'shell' is a cli adapter; CLI profiles " +
      "are never queued: expose them with a direct model route",
  });
});

Deno.test("max_concurrent_runs on a node is rejected as removed, naming what limits now", () => {
  assert.throws(() => parseEdgeConfig({ nodes: [node("a", { max_concurrent_runs: 4 })] }, FILE), {
    name: "ConfigError",
    message: "edge.yaml: nodes[0].max_concurrent_runs: was removed: a node no longer caps its " +
      "runs; concurrency is limited per provider by providers[].max_concurrency (pool models " +
      "queue on it), and direct routes run at once",
  });
  // Even 0 (the old "unlimited") is refused: the key itself is gone.
  rejects(
    { nodes: [node("a", { max_concurrent_runs: 0 })] },
    "nodes[0].max_concurrent_runs",
    /was removed/,
  );
});

Deno.test("a pool model with no provider of its model group on any node is rejected", () => {
  const providers = [{ id: "p", adapter: "mock", target: "demo", model_group: "demo" }];
  assert.throws(
    () =>
      parseEdgeConfig({
        nodes: [node("a", { providers })],
        models: [{ name: "demo", route: "pool" }, { name: "llama" }],
      }, FILE),
    {
      name: "ConfigError",
      message: "edge.yaml: models[1].name: pool model 'llama' has no provider: no node declares " +
        "a provider with model_group 'llama'",
    },
  );
  const ok = parseEdgeConfig(
    { nodes: [node("a", { providers })], models: [{ name: "demo" }] },
    FILE,
  );
  assert.deepEqual(ok.models.map((m) => [m.name, m.route]), [["demo", "pool"]]);
});

Deno.test("a direct model no node can run is rejected; one some node runs loads", () => {
  const cli = { name: "cli", kind: "cli", profiles: [{ name: "echo", command: "sh" }] };
  const nodes = [
    node("a"),
    node("b", { adapters: [cli, { name: "off", kind: "mock", enabled: false }] }),
  ];
  for (const [adapter, target] of [["cli", "nope"], ["shell", "echo"], ["off", "x"]]) {
    assert.throws(
      () => parseEdgeConfig({ nodes, models: [{ name: "m", adapter, target }] }, FILE),
      {
        name: "ConfigError",
        message: `edge.yaml: models[0].adapter: direct model 'm' cannot be served: no node has ` +
          `an enabled adapter '${adapter}' that runs target '${target}'`,
      },
    );
  }
  const ok = parseEdgeConfig({
    nodes,
    models: [{ name: "echo", adapter: "cli", target: "echo" }, {
      name: "d",
      adapter: "mock",
      target: "any",
    }],
  }, FILE);
  assert.deepEqual(ok.models.map((m) => [m.name, m.route]), [["echo", "direct"], ["d", "direct"]]);
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
    assert.deepEqual(config.tenants.map((t) => [t.name, t.keys]), [["default", ["k1", "k2"]]]);
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
  assert.deepEqual(config.tenants[0]!.keys, [key, "plain-key"]);
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

Deno.test("http.allowed_hosts, cors, allow_mock_metadata and allow_image_links default closed", () => {
  const config = parseEdgeConfig({}, FILE);
  assert.deepEqual(config.http.allowedHosts, []);
  assert.deepEqual(config.http.cors, { allowedOrigins: [] });
  assert.equal(config.http.allowMockMetadata, false);
  assert.equal(config.http.allowImageLinks, false);
  assert.equal(
    parseEdgeConfig({ http: { allow_image_links: true } }, FILE).http.allowImageLinks,
    true,
  );
  rejects({ http: { allow_image_links: "yes" } }, "http.allow_image_links", /true or false/);
});

Deno.test("http.max_body_bytes must be below wire.max_frame_bytes, as a run goes to its node in one frame", () => {
  const config = parseEdgeConfig({
    http: { max_body_bytes: 2 * 1024 * 1024 },
    wire: { max_frame_bytes: 8 * 1024 * 1024 },
  }, FILE);
  assert.equal(config.http.maxBodyBytes, 2 * 1024 * 1024);
  rejects(
    { http: { max_body_bytes: 4 * 1024 * 1024 } },
    "http.max_body_bytes",
    /must be below wire\.max_frame_bytes \(4194304\).*current value is 4194304/,
  );
  rejects(
    { http: { max_body_bytes: 64 * 1024 }, wire: { max_frame_bytes: 32 * 1024 } },
    "http.max_body_bytes",
    /must be below wire\.max_frame_bytes \(32768\)/,
  );
});

Deno.test("http.allowed_hosts and cors origins are normalized as a browser would send them", () => {
  const config = parseEdgeConfig({
    http: {
      allowed_hosts: ["Edge.Example.com", "edge.internal:8443", "[::1]:80", "*"],
      cors: { allowed_origins: ["https://App.example.com/", "http://localhost:5173", "*"] },
      allow_mock_metadata: true,
    },
  }, FILE);
  assert.deepEqual(config.http.allowedHosts, [
    "edge.example.com",
    "edge.internal:8443",
    "[::1]",
    "*",
  ]);
  assert.deepEqual(config.http.cors.allowedOrigins, [
    "https://app.example.com",
    "http://localhost:5173",
    "*",
  ]);
  assert.equal(config.http.allowMockMetadata, true);
});

Deno.test("a malformed allowed host or origin is rejected at its key path", () => {
  rejects(
    { http: { allowed_hosts: ["edge.example.com/path"] } },
    "http.allowed_hosts[0]",
    /host name/,
  );
  rejects(
    { http: { cors: { allowed_origins: ["https://a.example/app"] } } },
    "http.cors.allowed_origins[0]",
    /must be an origin/,
  );
  rejects({ http: { allow_mock_metadata: "yes" } }, "http.allow_mock_metadata", /true or false/);
});

Deno.test("IOP_EDGE_HTTP_ALLOWED_HOSTS and IOP_EDGE_CORS_ALLOWED_ORIGINS set the lists", async () => {
  await withFile("edge: { id: e }\n", async (path) => {
    const env: Record<string, string> = {
      IOP_EDGE_HTTP_ALLOWED_HOSTS: "edge.example.com, edge-b",
      IOP_EDGE_CORS_ALLOWED_ORIGINS: "https://app.example.com",
    };
    const config = await loadEdgeConfig(path, (name) => env[name]);
    assert.deepEqual(config.http.allowedHosts, ["edge.example.com", "edge-b"]);
    assert.deepEqual(config.http.cors.allowedOrigins, ["https://app.example.com"]);
  });
});

Deno.test("http.sse_keepalive_ms defaults to 15 s, 0 turns it off, IOP_EDGE_HTTP_SSE_KEEPALIVE_MS sets it", async () => {
  assert.equal(parseEdgeConfig({}, FILE).http.sseKeepaliveMs, 15_000);
  assert.equal(parseEdgeConfig({ http: { sse_keepalive_ms: 0 } }, FILE).http.sseKeepaliveMs, 0);
  rejects({ http: { sse_keepalive_ms: -1 } }, "http.sse_keepalive_ms", /at least 0/);
  await withFile("edge: { id: e }\n", async (path) => {
    const env: Record<string, string> = { IOP_EDGE_HTTP_SSE_KEEPALIVE_MS: "5000" };
    const config = await loadEdgeConfig(path, (name) => env[name]);
    assert.equal(config.http.sseKeepaliveMs, 5000);
  });
});

Deno.test("responses defaults: a store under .iop/<edge id>, 10000 kept (1000 a tenant, 1 GiB) for 30 days, 1 MiB each", () => {
  const config = parseEdgeConfig({ edge: { id: "edge-r" } }, FILE);
  assert.deepEqual(config.responses, {
    storePath: ".iop/edge-r/responses.db",
    maxStored: 10_000,
    maxStoredPerTenant: 1000,
    maxTotalBytes: 1024 * 1024 * 1024,
    retentionMs: 30 * 24 * 60 * 60 * 1000,
    maxResponseBytes: 1024 * 1024,
  });
});

Deno.test("responses keys are read, bounded, and store_path follows IOP_EDGE_RESPONSES_STORE_PATH", async () => {
  const config = parseEdgeConfig({
    responses: {
      store_path: "/var/lib/iop/responses.db",
      max_stored: 5,
      max_stored_per_tenant: 2,
      max_total_bytes: 8192,
      retention_ms: 60_000,
      max_response_bytes: 4096,
    },
  }, FILE);
  assert.deepEqual(config.responses, {
    storePath: "/var/lib/iop/responses.db",
    maxStored: 5,
    maxStoredPerTenant: 2,
    maxTotalBytes: 8192,
    retentionMs: 60_000,
    maxResponseBytes: 4096,
  });
  rejects({ responses: { store_path: " " } }, "responses.store_path", /must not be empty/);
  rejects({ responses: { max_stored: 0 } }, "responses.max_stored", /at least 1/);
  rejects({ responses: { retention_ms: 10 } }, "responses.retention_ms", /at least 1000/);
  rejects(
    { responses: { max_response_bytes: 100 } },
    "responses.max_response_bytes",
    /at least 1024/,
  );
  rejects({ responses: { max_stored: 1.5 } }, "responses.max_stored", /whole number/);
  rejects(
    { responses: { max_stored_per_tenant: 0 } },
    "responses.max_stored_per_tenant",
    /at least 1/,
  );
  // The budget holds at least one response, or one just stored could go at once.
  rejects(
    { responses: { max_response_bytes: 4096, max_total_bytes: 2048 } },
    "responses.max_total_bytes",
    /at least 4096/,
  );
  await withFile("responses: { store_path: a.db }\n", async (path) => {
    const env = (name: string) =>
      name === "IOP_EDGE_RESPONSES_STORE_PATH" ? "/data/responses.db" : undefined;
    assert.equal((await loadEdgeConfig(path, env)).responses.storePath, "/data/responses.db");
  });
});

// --- enrollment ---------------------------------------------------------------------------------

/** A valid enrollment rule; `extra` replaces or adds keys. */
function rule(name: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    name,
    token: `${name}-enroll-token`,
    node_ids: [`${name}-*`],
    template: {
      alias: "{node}-box",
      adapters: [{ name: "ollama", kind: "ollama", base_url: "http://{node}.lan:11434" }],
      providers: [{
        id: "{node}-llama",
        adapter: "ollama",
        target: "llama3.2",
        model_group: "llama3.2",
        max_concurrency: 4,
      }],
    },
    ...extra,
  };
}

Deno.test("enrollment rules are read with their defaults and their template kept as written", () => {
  const config = parseEdgeConfig(
    { enrollment: [rule("gpu", { max_nodes: 64 }), rule("cpu")] },
    FILE,
  );
  assert.deepEqual(config.enrollment.map((r) => [r.name, r.nodeIds, r.maxNodes, r.path]), [
    ["gpu", ["gpu-*"], 64, "enrollment[0]"],
    ["cpu", ["cpu-*"], 256, "enrollment[1]"],
  ]);
  assert.equal(config.enrollment[0]!.token, "gpu-enroll-token");
  assert.equal(config.enrollment[0]!.retainDisconnectedMs, 15 * 60_000);
  assert.equal((config.enrollment[0]!.template as { alias: string }).alias, "{node}-box");
  assert.deepEqual(parseEdgeConfig({}, FILE).enrollment, []);
});

Deno.test("enrolledRecord() replaces {node} in every template string and marks the rule", () => {
  const config = parseEdgeConfig({ enrollment: [rule("gpu")] }, FILE);
  const record = enrolledRecord(config.enrollment[0]!, "gpu-07", FILE);
  assert.equal(record.id, "gpu-07");
  assert.equal(record.alias, "gpu-07-box");
  assert.equal(record.token, "gpu-enroll-token");
  assert.equal(record.enrolledBy, "gpu");
  const adapter = record.adapters[0]!;
  assert.equal(adapter.kind, "ollama");
  assert.equal(adapter.kind === "ollama" ? adapter.baseUrl : "", "http://gpu-07.lan:11434");
  assert.deepEqual(record.providers, [{
    id: "gpu-07-llama",
    adapter: "ollama",
    target: "llama3.2",
    modelGroup: "llama3.2",
    maxConcurrency: 4,
  }]);
  // The rule keeps its template: the next node gets its own expansion.
  assert.equal(enrolledRecord(config.enrollment[0]!, "gpu-08", FILE).alias, "gpu-08-box");
});

Deno.test("an enrollment template is checked like a nodes[] entry, for a sample id", () => {
  const withTemplate = (template: Record<string, unknown>) => ({
    enrollment: [rule("gpu", { template })],
  });
  rejects(
    withTemplate({ adapters: [{ name: "x", kind: "tpu" }] }),
    "enrollment[0].template.adapters[0].kind",
    /must be one of/,
  );
  rejects(
    withTemplate({
      adapters: [{ name: "mock", kind: "mock" }],
      providers: [{ id: "{node}-p", adapter: "other", target: "t", model_group: "g" }],
    }),
    "enrollment[0].template.providers[0].adapter",
    /adapter 'other' is not defined on this node/,
  );
  rejects(
    withTemplate({ adapters: [{ name: "o", kind: "ollama", base_url: "http://u:p@{node}:1" }] }),
    "enrollment[0].template.adapters[0].base_url",
    /must not contain a user name or password/,
  );
  rejects(withTemplate({ id: "x", adapters: [] }), "enrollment[0].template.id", /must not be set/);
  rejects(withTemplate({ token: "t" }), "enrollment[0].template.token", /must not be set/);
  rejects(withTemplate({ alias: "gpu" }), "enrollment[0].template.alias", /must contain \{node\}/);
  rejects(
    withTemplate({
      adapters: [{ name: "mock", kind: "mock" }],
      providers: [{ id: "shared", adapter: "mock", target: "demo", model_group: "g" }],
    }),
    "enrollment[0].template.providers[0].id",
    /must contain \{node\}/,
  );
  const { template: _template, ...noTemplate } = rule("gpu");
  rejects({ enrollment: [noTemplate] }, "enrollment[0].template", /is required/);
});

Deno.test("enrollment rules need unique names, id patterns and tokens of their own", () => {
  rejects(
    { enrollment: [rule("gpu"), rule("gpu", { token: "other" })] },
    "enrollment[1].name",
    /duplicate enrollment rule 'gpu'/,
  );
  rejects({ enrollment: [rule("gpu one")] }, "enrollment[0].name", /must be 1 to 64 letters/);
  rejects(
    { enrollment: [rule("gpu", { node_ids: [] })] },
    "enrollment[0].node_ids",
    /at least one/,
  );
  rejects(
    { enrollment: [rule("gpu", { node_ids: ["gpu/*"] })] },
    "enrollment[0].node_ids[0]",
    /only letters/,
  );
  rejects({ enrollment: [rule("gpu", { max_nodes: 0 })] }, "enrollment[0].max_nodes", /at least 1/);
  rejects({ enrollment: [rule("gpu", { token: "" })] }, "enrollment[0].token", /must not be empty/);
  rejects(
    { enrollment: [rule("gpu"), rule("cpu", { token: hashSecret("gpu-enroll-token") })] },
    "enrollment[1].token",
    /same secret as enrollment\[0\]\.token/,
  );
  rejects(
    { nodes: [node("n1")], enrollment: [rule("gpu", { token: "n1-token" })] },
    "enrollment[0].token",
    /same secret as nodes\[0\]\.token/,
  );
  // The message never shows the token.
  assert.throws(
    () =>
      parseEdgeConfig(
        { nodes: [node("n1")], enrollment: [rule("gpu", { token: "n1-token" })] },
        FILE,
      ),
    (err: Error) => !err.message.includes("n1-token"),
  );
});

Deno.test("a model served only by an enrollment template is servable; without the rule it is not", () => {
  const models = [
    { name: "llama3.2" },
    { name: "echo", adapter: "mock", target: "demo" },
  ];
  const template = {
    adapters: [{ name: "mock", kind: "mock" }],
    providers: [{ id: "{node}-llama", adapter: "mock", target: "demo", model_group: "llama3.2" }],
  };
  const config = parseEdgeConfig({ enrollment: [rule("gpu", { template })], models }, FILE);
  assert.deepEqual(config.models.map((m) => m.name), ["llama3.2", "echo"]);
  assert.deepEqual(config.nodes, []);
  rejects({ models }, "models[0].name", /pool model 'llama3.2' has no provider/);
});

Deno.test("runs defaults: a 1 MiB window, a 30 s stall timeout and a 30 s resume grace", () => {
  const config = parseEdgeConfig({}, FILE);
  assert.deepEqual(config.runs, {
    windowBytes: 1_048_576,
    stallTimeoutMs: 30_000,
    resumeGraceMs: 30_000,
  });
});

Deno.test("runs keys are read and bounded; 0 turns the window and the grace off", () => {
  const config = parseEdgeConfig({
    runs: { window_bytes: 0, stall_timeout_ms: 1000, resume_grace_ms: 0 },
  }, FILE);
  assert.deepEqual(config.runs, { windowBytes: 0, stallTimeoutMs: 1000, resumeGraceMs: 0 });
  rejects({ runs: { window_bytes: -1 } }, "runs.window_bytes", /at least 0/);
  rejects({ runs: { window_bytes: 1.5 } }, "runs.window_bytes", /whole number/);
  rejects({ runs: { stall_timeout_ms: 999 } }, "runs.stall_timeout_ms", /at least 1000/);
  rejects({ runs: { resume_grace_ms: -5 } }, "runs.resume_grace_ms", /at least 0/);
  rejects({ runs: { resume_grace_ms: "soon" } }, "runs.resume_grace_ms", /must be a number/);
});

Deno.test("IOP_EDGE_RUNS_* override the runs keys", async () => {
  await withFile("runs: { window_bytes: 4096 }\n", async (path) => {
    const env: Record<string, string> = {
      IOP_EDGE_RUNS_WINDOW_BYTES: "65536",
      IOP_EDGE_RUNS_STALL_TIMEOUT_MS: "5000",
      IOP_EDGE_RUNS_RESUME_GRACE_MS: "0",
    };
    const config = await loadEdgeConfig(path, (name) => env[name]);
    assert.deepEqual(config.runs, { windowBytes: 65_536, stallTimeoutMs: 5000, resumeGraceMs: 0 });
  });
});
