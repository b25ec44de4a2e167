import assert from "node:assert/strict";
import { ConfigError } from "../../shared/config.ts";
import { loadNodeConfig, parseNodeConfig } from "./config.ts";
import { DEFAULT_NODE_POLICY } from "./policy.ts";

async function withFile(text: string, fn: (path: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "iop_node_config_" });
  try {
    await Deno.writeTextFile(`${dir}/node.yaml`, text);
    await fn(`${dir}/node.yaml`);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("a node config with only id and token gets the documented defaults", () => {
  const config = parseNodeConfig({ node: { id: "n1", token: "t" } }, "node.yaml");
  assert.deepEqual(config, {
    file: "node.yaml",
    node: { id: "n1", token: "t" },
    edge: {
      address: "127.0.0.1:7100",
      addresses: ["127.0.0.1:7100"],
      failbackMs: 30_000,
      maxFrameBytes: 4 * 1024 * 1024,
      resumeGraceMs: 30_000,
      backoffInitialMs: 250,
      backoffMaxMs: 10_000,
      // Neither tls nor the opt-out: the node refuses to start (requireLinkSecurity).
      security: { tls: undefined, insecurePlaintext: false, file: "node.yaml", path: "edge" },
    },
    http: { host: "127.0.0.1", port: 9100 },
    history: { path: ".iop/n1/history.db", outputCapBytes: 1024 * 1024 },
    policy: DEFAULT_NODE_POLICY,
    health: { intervalMs: 15_000, probeTimeoutMs: 3_000 },
    shutdown: { drainTimeoutMs: 25_000 },
  });
});

Deno.test("shutdown.drain_timeout_ms is read; 0 is allowed, a negative one is refused", async () => {
  const raw = (ms: unknown) => ({
    node: { id: "n", token: "t" },
    shutdown: { drain_timeout_ms: ms },
  });
  assert.equal(parseNodeConfig(raw(5_000), "node.yaml").shutdown.drainTimeoutMs, 5_000);
  assert.equal(parseNodeConfig(raw(0), "node.yaml").shutdown.drainTimeoutMs, 0);
  assert.throws(() => parseNodeConfig(raw(-1), "node.yaml"), {
    name: "ConfigError",
    message: "node.yaml: shutdown.drain_timeout_ms: must be at least 0: current value is -1",
  });
  assert.throws(() => parseNodeConfig(raw("25s"), "node.yaml"), {
    name: "ConfigError",
    message: "node.yaml: shutdown.drain_timeout_ms: must be a number: current value is '25s'",
  });
  await withFile("node: { id: n1, token: t1 }\n", async (path) => {
    const env = (n: string) => n === "IOP_NODE_SHUTDOWN_DRAIN_TIMEOUT_MS" ? "9000" : undefined;
    assert.equal((await loadNodeConfig(path, env)).shutdown.drainTimeoutMs, 9_000);
  });
});

Deno.test("edge.resume_grace_ms is read from the file and IOP_NODE_EDGE_RESUME_GRACE_MS; 0 is allowed", async () => {
  const raw = (ms: unknown) => ({ node: { id: "n", token: "t" }, edge: { resume_grace_ms: ms } });
  assert.equal(parseNodeConfig(raw(5_000), "node.yaml").edge.resumeGraceMs, 5_000);
  assert.equal(parseNodeConfig(raw(0), "node.yaml").edge.resumeGraceMs, 0);
  assert.throws(() => parseNodeConfig(raw(-1), "node.yaml"), {
    name: "ConfigError",
    message: "node.yaml: edge.resume_grace_ms: must be at least 0: current value is -1",
  });
  assert.throws(() => parseNodeConfig(raw("30s"), "node.yaml"), {
    name: "ConfigError",
    message: "node.yaml: edge.resume_grace_ms: must be a number: current value is '30s'",
  });
  assert.throws(() => parseNodeConfig(raw(86_400_001), "node.yaml"), ConfigError);
  await withFile("node: { id: n1, token: t1 }\n", async (path) => {
    const env = (n: string) => n === "IOP_NODE_EDGE_RESUME_GRACE_MS" ? "2500" : undefined;
    assert.equal((await loadNodeConfig(path, env)).edge.resumeGraceMs, 2_500);
  });
});

Deno.test("health.interval_ms and probe_timeout_ms are read; 0 turns periodic probes off", () => {
  const config = parseNodeConfig({
    node: { id: "n1", token: "t" },
    health: { interval_ms: 0, probe_timeout_ms: 500 },
  }, "node.yaml");
  assert.deepEqual(config.health, { intervalMs: 0, probeTimeoutMs: 500 });
  assert.throws(
    () =>
      parseNodeConfig({ node: { id: "n1", token: "t" }, health: { interval_ms: -1 } }, "n.yaml"),
    /health\.interval_ms.*must be at least 0/,
  );
});

Deno.test("edge.tls is read as file paths, and a cert without its key is refused", () => {
  const config = parseNodeConfig({
    node: { id: "n1", token: "t" },
    edge: { tls: { ca: "certs/ca.pem", server_name: "edge-1", cert: "n.pem", key: "n-key.pem" } },
  }, "node.yaml");
  assert.deepEqual(config.edge.security.tls, {
    file: "node.yaml",
    path: "edge.tls",
    caFile: "certs/ca.pem",
    serverName: "edge-1",
    certFile: "n.pem",
    keyFile: "n-key.pem",
  });
  assert.throws(
    () =>
      parseNodeConfig(
        { node: { id: "n1", token: "t" }, edge: { tls: { ca: "c", cert: "n.pem" } } },
        "node.yaml",
      ),
    /node\.yaml: edge\.tls\.key: cert and key go together/,
  );
  assert.throws(
    () =>
      parseNodeConfig({
        node: { id: "n1", token: "t" },
        edge: { tls: { ca: "c" }, insecure_plaintext: true },
      }, "node.yaml"),
    /edge\.insecure_plaintext: cannot be true while tls is set/,
  );
});

Deno.test("the shipped deploy/config/node.yaml is valid and matches the shipped edge", async () => {
  const config = await loadNodeConfig(
    new URL("../../deploy/config/node.yaml", import.meta.url).pathname,
    () => undefined,
  );
  assert.equal(config.node.id, "node-1");
  assert.equal(config.edge.address, "127.0.0.1:7100");
  assert.equal(config.http.port, 9100);
  // deploy/config/edge.yaml pushes a mock adapter and CLI profiles running `sh` without a cwd.
  assert.deepEqual(config.policy, {
    adapterKinds: ["mock", "cli"],
    cli: { commands: ["sh"], cwd: ["."] },
    apiKeyEnv: [],
    backendHosts: [],
    isDefault: false,
  });
});

Deno.test("the policy section is read from node.yaml; a bad one names the file and the key", async () => {
  await withFile(
    "node: { id: n1, token: t1 }\npolicy:\n  adapter_kinds: [mock, vllm]\n" +
      "  backend_hosts: [gpu:8000]\n",
    async (path) => {
      const config = await loadNodeConfig(path, () => undefined);
      assert.deepEqual(config.policy.adapterKinds, ["mock", "vllm"]);
      assert.deepEqual(config.policy.backendHosts, ["gpu:8000"]);
    },
  );
  await withFile(
    "node: { id: n1, token: t1 }\npolicy:\n  cli: { commands: sh }\n",
    async (path) => {
      const err = await loadNodeConfig(path, () => undefined).catch((e) => e);
      assert.ok(err instanceof ConfigError);
      assert.equal(
        err.message,
        `${path}: policy.cli.commands: must be a list: current value is 'sh'`,
      );
    },
  );
});

Deno.test("a missing node id or token is rejected with file and key path", () => {
  assert.throws(() => parseNodeConfig({ node: { token: "t" } }, "node.yaml"), {
    name: "ConfigError",
    message: "node.yaml: node.id: is required",
  });
  assert.throws(() => parseNodeConfig({ node: { id: "n1", token: "" } }, "node.yaml"), {
    message: "node.yaml: node.token: must not be empty",
  });
});

Deno.test("an out-of-range value is rejected naming its key and value", () => {
  assert.throws(
    () => parseNodeConfig({ node: { id: "n", token: "t" }, http: { port: -1 } }, "node.yaml"),
    { message: "node.yaml: http.port: must be at least 0: current value is -1" },
  );
  assert.throws(
    () =>
      parseNodeConfig(
        { node: { id: "n", token: "t" }, edge: { backoff_max_ms: 1.5 } },
        "node.yaml",
      ),
    { message: "node.yaml: edge.backoff_max_ms: must be a whole number: current value is 1.5" },
  );
});

Deno.test("invalid YAML names the file and the line", async () => {
  await withFile("node:\n  id: n1\n  token: 'open\n", async (path) => {
    const err = await loadNodeConfig(path, () => undefined).catch((e) => e);
    assert.ok(err instanceof ConfigError);
    assert.match(err.message, new RegExp(`^${path}: line \\d+, column \\d+: invalid YAML`));
  });
});

Deno.test("IOP_NODE_* variables override the file, typed as declared", async () => {
  const env: Record<string, string> = {
    IOP_NODE_ID: "n2",
    IOP_NODE_TOKEN: "t2",
    IOP_NODE_EDGE_ADDRESS: "127.0.0.1:17100",
    IOP_NODE_HTTP_PORT: "19100",
    IOP_NODE_HISTORY_PATH: "/tmp/h.db",
  };
  await withFile("node: { id: n1, token: t1 }\nhttp: { port: 1 }\n", async (path) => {
    const config = await loadNodeConfig(path, (name) => env[name]);
    assert.deepEqual(config.node, { id: "n2", token: "t2" });
    assert.equal(config.edge.address, "127.0.0.1:17100");
    assert.equal(config.http.port, 19100);
    assert.equal(config.history.path, "/tmp/h.db");
  });
});

Deno.test("a non-numeric IOP_NODE_HTTP_PORT is rejected naming the variable", async () => {
  await withFile("node: { id: n1, token: t1 }\n", async (path) => {
    const err = await loadNodeConfig(path, (n) => n === "IOP_NODE_HTTP_PORT" ? "x" : undefined)
      .catch((e) => e);
    assert.ok(err instanceof ConfigError);
    assert.equal(err.message, "IOP_NODE_HTTP_PORT: must be a number: current value is 'x'");
  });
});

Deno.test("history.output_cap_bytes is read, and one beyond a reply frame's room is refused", () => {
  const raw = (cap: number) => ({
    node: { id: "n", token: "t" },
    history: { output_cap_bytes: cap },
  });
  assert.equal(parseNodeConfig(raw(4096), "node.yaml").history.outputCapBytes, 4096);
  assert.throws(() => parseNodeConfig(raw(8 * 1024 * 1024), "node.yaml"), {
    name: "ConfigError",
    message:
      "node.yaml: history.output_cap_bytes: must be at most 3145728: current value is 8388608",
  });
});

Deno.test("node.token_file (IOP_NODE_TOKEN_FILE) reads the token from a secret file", async () => {
  const dir = await Deno.makeTempDir({ prefix: "iop_node_token_" });
  try {
    const secret = `${dir}/iop-gpu-token`;
    await Deno.writeTextFile(secret, "s3cret-token\n");
    const fromFile = parseNodeConfig({ node: { id: "n1", token_file: secret } }, "node.yaml");
    assert.equal(fromFile.node.token, "s3cret-token", "the trailing newline is not the token's");

    await Deno.writeTextFile(`${dir}/node.yaml`, "node: { id: gpu-host1 }\n");
    const env = (name: string) => name === "IOP_NODE_TOKEN_FILE" ? secret : undefined;
    const loaded = await loadNodeConfig(`${dir}/node.yaml`, env);
    assert.equal(loaded.node.token, "s3cret-token");

    // Both set: refused, naming both, so nobody wonders which one is used.
    await assert.rejects(
      loadNodeConfig(
        `${dir}/node.yaml`,
        (name) => ({ IOP_NODE_TOKEN_FILE: secret, IOP_NODE_TOKEN: "plain" })[name],
      ),
      {
        name: "ConfigError",
        message: `${dir}/node.yaml: node.token_file: cannot be set together with node.token ` +
          "(IOP_NODE_TOKEN): set only one",
      },
    );
    assert.throws(
      () => parseNodeConfig({ node: { id: "n1", token_file: `${dir}/absent` } }, "node.yaml"),
      (err: unknown) =>
        err instanceof ConfigError && err.path === "node.token_file" &&
        err.message.startsWith(`node.yaml: node.token_file: cannot read '${dir}/absent': `),
    );
    await Deno.writeTextFile(`${dir}/empty`, "\n");
    assert.throws(
      () => parseNodeConfig({ node: { id: "n1", token_file: `${dir}/empty` } }, "node.yaml"),
      { message: `node.yaml: node.token_file: file '${dir}/empty' holds no token` },
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("edge.addresses lists the active edge and its standbys; edge.address is a list of one", () => {
  const base = { node: { id: "n", token: "t" } };
  const one = parseNodeConfig({ ...base, edge: { address: "edge-a:7100" } }, "node.yaml");
  assert.deepEqual(one.edge.addresses, ["edge-a:7100"]);
  assert.equal(one.edge.address, "edge-a:7100");
  assert.equal(one.edge.failbackMs, 30_000);
  const two = parseNodeConfig({
    ...base,
    edge: { addresses: ["edge-a:7100", "edge-a-standby:7100"], failback_ms: 0 },
  }, "node.yaml");
  assert.deepEqual(two.edge.addresses, ["edge-a:7100", "edge-a-standby:7100"]);
  assert.equal(two.edge.address, "edge-a:7100", "the first address is the active edge");
  assert.equal(two.edge.failbackMs, 0);
  assert.deepEqual(parseNodeConfig(base, "node.yaml").edge.addresses, ["127.0.0.1:7100"]);
});

Deno.test("bad edge addresses are refused naming the key", () => {
  const refuses = (edge: Record<string, unknown>, message: string) =>
    assert.throws(() => parseNodeConfig({ node: { id: "n", token: "t" }, edge }, "node.yaml"), {
      name: "ConfigError",
      message: `node.yaml: ${message}`,
    });
  refuses(
    { address: "a:1", addresses: ["b:2"] },
    "edge.addresses: cannot be set together with edge.address (IOP_NODE_EDGE_ADDRESS): set only one",
  );
  refuses({ addresses: [] }, "edge.addresses: must list at least one host:port");
  refuses({ addresses: "a:1" }, "edge.addresses: must be a list: current value is 'a:1'");
  refuses(
    { addresses: ["a:1", "b"] },
    "edge.addresses[1]: must be host:port: current value is 'b'",
  );
  refuses({ addresses: ["a:1", "a:1"] }, "edge.addresses[1]: lists 'a:1' a second time");
  refuses({ address: "edge" }, "edge.address: must be host:port: current value is 'edge'");
  refuses(
    { failback_ms: 5 },
    "edge.failback_ms: must be 0 (never) or at least 100: current value is 5",
  );
});

Deno.test("IOP_NODE_EDGE_ADDRESSES is a comma-separated list; with edge.address set it is an error", async () => {
  const env: Record<string, string> = {
    IOP_NODE_EDGE_ADDRESSES: "edge-a:7100, edge-a-standby:7100",
    IOP_NODE_EDGE_FAILBACK_MS: "2000",
  };
  await withFile("node: { id: n1, token: t1 }\n", async (path) => {
    const config = await loadNodeConfig(path, (name) => env[name]);
    assert.deepEqual(config.edge.addresses, ["edge-a:7100", "edge-a-standby:7100"]);
    assert.equal(config.edge.failbackMs, 2000);
  });
  await withFile("node: { id: n1, token: t1 }\nedge: { address: 'e:7100' }\n", async (path) => {
    const err = await loadNodeConfig(path, (name) => env[name]).catch((e) => e);
    assert.ok(err instanceof ConfigError);
    assert.match(err.message, /edge\.addresses: cannot be set together with edge\.address/);
  });
});
