import assert from "node:assert/strict";
import { ConfigError } from "../../shared/config.ts";
import { hashSecret } from "../../shared/secrets.ts";
import { loadCpConfig, parseCpConfig } from "./config.ts";

function rejects(raw: unknown, path: string, problem: RegExp): ConfigError {
  let caught: ConfigError | undefined;
  assert.throws(
    () => parseCpConfig(raw, "cp.yaml"),
    (err: unknown) => {
      assert.ok(err instanceof ConfigError, `expected ConfigError, got ${err}`);
      assert.equal(err.path, path);
      assert.ok(err.message.startsWith(`cp.yaml: ${path}: `), err.message);
      assert.match(err.message, problem);
      caught = err;
      return true;
    },
  );
  return caught!;
}

Deno.test("the sample config loads with the documented default ports", async () => {
  const config = await loadCpConfig("deploy/config/cp.yaml", () => undefined);
  assert.equal(config.http.port, 8090);
  assert.equal(config.wire.port, 7200);
  assert.deepEqual(
    config.access.tokens.map((t) => [t.name, t.role, t.token]),
    [["local-operator", "operate", "dev-operate-token"], [
      "local-viewer",
      "read",
      "dev-read-token",
    ]],
  );
  assert.deepEqual(config.access.allowedOrigins, []);
  assert.equal(config.access.refreshMinIntervalMs, 5000);
  assert.deepEqual(config.wire.edges, [{ id: "edge-local", credential: "dev-edge-credential" }]);
});

Deno.test("wire.edges gives each edge id its credential, plain or sha256:", () => {
  const hashed = hashSecret("edge-b-secret");
  const config = parseCpConfig({
    wire: {
      edges: [{ id: "edge-a", credential: "edge-a-secret" }, { id: "edge-b", credential: hashed }],
    },
  }, "cp.yaml");
  assert.deepEqual(config.wire.edges, [
    { id: "edge-a", credential: "edge-a-secret" },
    { id: "edge-b", credential: hashed },
  ]);
});

Deno.test("no wire.edges, or an empty list, admits no edge", () => {
  assert.deepEqual(parseCpConfig({}, "cp.yaml").wire.edges, []);
  assert.deepEqual(parseCpConfig({ wire: { edges: [] } }, "cp.yaml").wire.edges, []);
});

Deno.test("a duplicate edge id in wire.edges is rejected naming both places", () => {
  rejects(
    { wire: { edges: [{ id: "a", credential: "one" }, { id: "a", credential: "two" }] } },
    "wire.edges[1].id",
    /duplicate edge id 'a' \(first at wire\.edges\[0\]\.id\)/,
  );
});

Deno.test("one credential for two edges is rejected, however each stores it, without showing it", () => {
  const plain = rejects(
    { wire: { edges: [{ id: "a", credential: "shared" }, { id: "b", credential: "shared" }] } },
    "wire.edges[1].credential",
    /is the same secret as wire\.edges\[0\]\.credential: each edge needs its own credential/,
  );
  assert.ok(!plain.message.includes("shared"));
  const hashed = hashSecret("shared");
  const mixed = rejects(
    { wire: { edges: [{ id: "a", credential: hashed }, { id: "b", credential: "shared" }] } },
    "wire.edges[1].credential",
    /is the same secret as wire\.edges\[0\]\.credential/,
  );
  assert.ok(!mixed.message.includes("shared'") && !mixed.message.includes(hashed));
});

Deno.test("a malformed sha256: edge credential is a config error naming its key", () => {
  const err = rejects(
    { wire: { edges: [{ id: "a", credential: "sha256:c0ffee" }] } },
    "wire.edges[0].credential",
    /must be 'sha256:' followed by 64 hex digits .*current value has 6 characters/,
  );
  assert.ok(!err.message.includes("c0ffee"));
});

Deno.test("an edge without id or credential is rejected naming the key", () => {
  rejects({ wire: { edges: [{ credential: "x" }] } }, "wire.edges[0].id", /is required/);
  rejects({ wire: { edges: [{ id: " ", credential: "x" }] } }, "wire.edges[0].id", /not be empty/);
  rejects({ wire: { edges: [{ id: "a" }] } }, "wire.edges[0].credential", /is required/);
  rejects(
    { wire: { edges: [{ id: "a", credential: "" }] } },
    "wire.edges[0].credential",
    /must not be empty/,
  );
  rejects({ wire: { edges: { id: "a" } } }, "wire.edges", /must be a list/);
});

Deno.test("the removed wire.edge_credentials is rejected with the shape of wire.edges", () => {
  rejects(
    { wire: { edge_credentials: ["c"] } },
    "wire.edge_credentials",
    /is no longer supported .*under wire\.edges instead, e\.g\. edges: \[\{ id: edge-a, credential: <secret or sha256:…> \}\]/,
  );
});

Deno.test("IOP_CP_EDGES replaces wire.edges with id=credential pairs", async () => {
  const hashed = hashSecret("b=secret");
  const env = (name: string) =>
    name === "IOP_CP_EDGES" ? ` edge-a=first=part, edge-b=${hashed},, ` : undefined;
  const config = await loadCpConfig("deploy/config/cp.yaml", env);
  assert.deepEqual(config.wire.edges, [
    { id: "edge-a", credential: "first=part" },
    { id: "edge-b", credential: hashed },
  ]);
  const none = await loadCpConfig(
    "deploy/config/cp.yaml",
    (n) => n === "IOP_CP_EDGES" ? "" : undefined,
  );
  assert.deepEqual(none.wire.edges, []);
});

Deno.test("a malformed IOP_CP_EDGES entry is rejected naming the variable, not the value", async () => {
  for (const value of ["edge-a", "=secret", "edge-a="]) {
    const err = await loadCpConfig(
      "deploy/config/cp.yaml",
      (n) => n === "IOP_CP_EDGES" ? `ok=fine,${value}` : undefined,
    ).catch((e) => e);
    assert.ok(err instanceof ConfigError);
    assert.equal(
      err.message,
      "IOP_CP_EDGES: entry 2 must be 'id=credential' (comma-separated entries)",
    );
  }
});

Deno.test("IOP_CP_EDGE_CREDENTIALS is rejected, pointing to IOP_CP_EDGES", async () => {
  const err = await loadCpConfig(
    "deploy/config/cp.yaml",
    (n) => n === "IOP_CP_EDGE_CREDENTIALS" ? "c1,c2" : undefined,
  ).catch((e) => e);
  assert.ok(err instanceof ConfigError);
  assert.match(
    err.message,
    /^IOP_CP_EDGE_CREDENTIALS: is no longer supported .*set IOP_CP_EDGES=edge-a=<credential>,edge-b=<credential> instead$/,
  );
});

Deno.test("IOP_CP_* variables override config keys", async () => {
  const env: Record<string, string> = {
    IOP_CP_HTTP_PORT: "18090",
    IOP_CP_WIRE_PORT: "17200",
    IOP_CP_ADMIN_TOKENS: "one, two",
    IOP_CP_ALLOWED_ORIGINS: "https://ops.example.com",
    IOP_CP_REFRESH_MIN_INTERVAL_MS: "250",
    IOP_CP_AUDIT_PATH: "/tmp/x.sqlite",
  };
  const config = await loadCpConfig("deploy/config/cp.yaml", (name) => env[name]);
  assert.equal(config.http.port, 18090);
  assert.equal(config.wire.port, 17200);
  // The deprecated admin tokens join the file's access tokens as operate tokens.
  assert.deepEqual(
    config.access.tokens.map((t) => [t.name, t.role, t.declaredIn]),
    [
      ["local-operator", "operate", "access.tokens"],
      ["local-viewer", "read", "access.tokens"],
      ["admin-1", "operate", "admin.tokens"],
      ["admin-2", "operate", "admin.tokens"],
    ],
  );
  assert.deepEqual(config.access.allowedOrigins, ["https://ops.example.com"]);
  assert.equal(config.access.refreshMinIntervalMs, 250);
  assert.equal(config.audit.path, "/tmp/x.sqlite");
});

Deno.test("an invalid key is reported with the file and key path", () => {
  assert.throws(
    () => parseCpConfig({ wire: { port: 70000 } }, "cp.yaml"),
    (e) =>
      e instanceof ConfigError &&
      e.message === "cp.yaml: wire.port: must be at most 65535: current value is 70000",
  );
});

Deno.test("access.tokens gives each name a token and a role; none means no token at all", () => {
  const hashed = hashSecret("grafana-secret");
  const config = parseCpConfig({
    access: {
      tokens: [
        { name: "ops-alice", token: "alice-secret", role: "operate" },
        { name: "grafana", token: hashed, role: "read" },
      ],
    },
  }, "cp.yaml");
  assert.deepEqual(config.access.tokens, [
    { name: "ops-alice", token: "alice-secret", role: "operate", declaredIn: "access.tokens" },
    { name: "grafana", token: hashed, role: "read", declaredIn: "access.tokens" },
  ]);
  const empty = parseCpConfig({}, "cp.yaml").access;
  assert.deepEqual(empty, {
    tokens: [],
    allowedOrigins: [],
    refreshMinIntervalMs: 5000,
    clientAuthTimeoutMs: 5000,
  });
});

Deno.test("a duplicate token name is rejected naming both places", () => {
  rejects(
    {
      access: {
        tokens: [
          { name: "ops", token: "one", role: "read" },
          { name: "ops", token: "two", role: "operate" },
        ],
      },
    },
    "access.tokens[1].name",
    /duplicate token name 'ops' \(first at access\.tokens\[0\]\.name\)/,
  );
});

Deno.test("one secret for two tokens is rejected, however each stores it, without showing it", () => {
  const err = rejects(
    {
      access: {
        tokens: [
          { name: "a", token: "shared-secret", role: "read" },
          { name: "b", token: hashSecret("shared-secret"), role: "operate" },
        ],
      },
    },
    "access.tokens[1].token",
    /is the same secret as access\.tokens\[0\]\.token: each token needs its own secret/,
  );
  assert.ok(!err.message.includes("shared-secret"));
});

Deno.test("a token role other than read or operate is rejected naming the key", () => {
  rejects(
    { access: { tokens: [{ name: "a", token: "s", role: "admin" }] } },
    "access.tokens[0].role",
    /must be one of read, operate: current value is 'admin'/,
  );
  rejects(
    { access: { tokens: [{ name: "a", token: "s" }] } },
    "access.tokens[0].role",
    /is required/,
  );
  rejects(
    { access: { tokens: [{ name: " ", token: "s", role: "read" }] } },
    "access.tokens[0].name",
    /must not be empty/,
  );
  rejects(
    { access: { tokens: [{ name: "a", token: "", role: "read" }] } },
    "access.tokens[0].token",
    /must not be empty/,
  );
});

Deno.test("the deprecated admin.tokens become operate tokens admin-1, admin-2 and clash like any other", () => {
  const config = parseCpConfig({ admin: { tokens: ["x1", "x2"] } }, "cp.yaml");
  assert.deepEqual(config.access.tokens.map((t) => [t.name, t.role, t.declaredIn]), [
    ["admin-1", "operate", "admin.tokens"],
    ["admin-2", "operate", "admin.tokens"],
  ]);
  rejects(
    {
      access: { tokens: [{ name: "ops", token: "same", role: "read" }] },
      admin: { tokens: ["same"] },
    },
    "admin.tokens[0]",
    /is the same secret as access\.tokens\[0\]\.token/,
  );
  rejects(
    {
      access: { tokens: [{ name: "admin-1", token: "mine", role: "read" }] },
      admin: { tokens: ["other"] },
    },
    "admin.tokens[0]",
    /duplicate token name 'admin-1' .*admin\.tokens entries are named admin-1/,
  );
});

Deno.test("access.allowed_origins takes origins only", () => {
  const config = parseCpConfig(
    { access: { allowed_origins: ["https://ops.example.com", "http://10.0.0.5:3000/"] } },
    "cp.yaml",
  );
  assert.deepEqual(config.access.allowedOrigins, [
    "https://ops.example.com",
    "http://10.0.0.5:3000",
  ]);
  for (const bad of ["*", "ops.example.com", "https://ops.example.com/dash"]) {
    rejects(
      { access: { allowed_origins: ["https://ok.example", bad] } },
      "access.allowed_origins[1]",
      /must be an origin like https:\/\/ops\.example\.com/,
    );
  }
});

Deno.test("IOP_CP_ACCESS_TOKENS replaces access.tokens as name:role:token entries", async () => {
  const hashed = hashSecret("viewer-secret");
  const config = await loadCpConfig(
    "deploy/config/cp.yaml",
    (n) =>
      n === "IOP_CP_ACCESS_TOKENS" ? `ops:operate:op-secret, viewer:read:${hashed}` : undefined,
  );
  assert.deepEqual(config.access.tokens.map((t) => [t.name, t.role, t.token]), [
    ["ops", "operate", "op-secret"],
    ["viewer", "read", hashed],
  ]);
  const err = await loadCpConfig(
    "deploy/config/cp.yaml",
    (n) => n === "IOP_CP_ACCESS_TOKENS" ? "ops:operate:x,broken" : undefined,
  ).catch((e) => e);
  assert.ok(err instanceof ConfigError);
  assert.equal(
    err.message,
    "IOP_CP_ACCESS_TOKENS: entry 2 must be 'name:role:token' (comma-separated entries)",
  );
  const none = await loadCpConfig(
    "deploy/config/cp.yaml",
    (n) => n === "IOP_CP_ACCESS_TOKENS" ? "" : undefined,
  );
  assert.deepEqual(none.access.tokens, []);
});

Deno.test("series defaults to a 5 s sample over 15 minutes and refuses a window shorter than its interval", () => {
  assert.deepEqual(parseCpConfig({}, "cp.yaml").series, {
    sampleIntervalMs: 5_000,
    windowMs: 900_000,
  });
  assert.deepEqual(
    parseCpConfig({ series: { sample_interval_ms: 250, window_ms: 60_000 } }, "cp.yaml").series,
    { sampleIntervalMs: 250, windowMs: 60_000 },
  );
  rejects(
    { series: { sample_interval_ms: 10_000, window_ms: 5_000 } },
    "series.window_ms",
    /10000/,
  );
  rejects({ series: { sample_interval_ms: 10 } }, "series.sample_interval_ms", /100/);
});

Deno.test("shutdown.drain_timeout_ms defaults to 20 s, takes 0 to a day and IOP_CP_SHUTDOWN_DRAIN_TIMEOUT_MS", async () => {
  assert.deepEqual(parseCpConfig({}, "cp.yaml").shutdown, { drainTimeoutMs: 20_000 });
  assert.equal(
    parseCpConfig({ shutdown: { drain_timeout_ms: 0 } }, "cp.yaml").shutdown.drainTimeoutMs,
    0,
  );
  rejects({ shutdown: { drain_timeout_ms: -1 } }, "shutdown.drain_timeout_ms", /at least 0/);
  rejects(
    { shutdown: { drain_timeout_ms: 86_400_001 } },
    "shutdown.drain_timeout_ms",
    /at most 86400000/,
  );
  const config = await loadCpConfig(
    "deploy/config/cp.yaml",
    (n) => n === "IOP_CP_SHUTDOWN_DRAIN_TIMEOUT_MS" ? "1500" : undefined,
  );
  assert.equal(config.shutdown.drainTimeoutMs, 1_500);
});
