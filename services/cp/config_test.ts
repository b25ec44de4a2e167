import assert from "node:assert/strict";
import { ConfigError } from "../../shared/config.ts";
import { loadCpConfig, parseCpConfig } from "./config.ts";

Deno.test("the sample config loads with the documented default ports", async () => {
  const config = await loadCpConfig("deploy/config/cp.yaml", () => undefined);
  assert.equal(config.http.port, 8090);
  assert.equal(config.wire.port, 7200);
  assert.deepEqual(config.admin.tokens, ["dev-admin-token"]);
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
