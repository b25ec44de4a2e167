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
  assert.deepEqual(config.admin.tokens, ["dev-admin-token"]);
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
    IOP_CP_AUDIT_PATH: "/tmp/x.sqlite",
  };
  const config = await loadCpConfig("deploy/config/cp.yaml", (name) => env[name]);
  assert.equal(config.http.port, 18090);
  assert.equal(config.wire.port, 17200);
  assert.deepEqual(config.admin.tokens, ["one", "two"]);
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
