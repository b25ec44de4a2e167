import assert from "node:assert/strict";
import { Hono } from "hono";
import { parseEdgeConfig } from "../config.ts";
import { hostGuard, isHostAllowed } from "./host_guard.ts";

const config = (http: Record<string, unknown> = {}, a2a: Record<string, unknown> = {}) =>
  parseEdgeConfig({ http, a2a }, "edge.yaml");

Deno.test("isHostAllowed takes the bind address and loopback names on any port, nothing else", () => {
  const c = config({ host: "127.0.0.1" });
  for (const host of ["127.0.0.1", "127.0.0.1:8080", "localhost:8080", "LOCALHOST", "[::1]:1"]) {
    assert.ok(isHostAllowed(host, c), host);
  }
  for (const host of ["evil.example", "evil.example:8080", "10.0.0.5", "edge-a", "", "a/b"]) {
    assert.ok(!isHostAllowed(host, c), host);
  }
});

Deno.test("isHostAllowed adds allowed_hosts (a port pins it) and the a2a.public_url host", () => {
  const c = config(
    { host: "10.0.0.5", allowed_hosts: ["edge.example.com", "api.example.com:8443"] },
    { public_url: "https://agents.example.com/base" },
  );
  assert.ok(isHostAllowed("10.0.0.5:8080", c));
  assert.ok(isHostAllowed("edge.example.com:8080", c));
  assert.ok(isHostAllowed("api.example.com:8443", c));
  assert.ok(!isHostAllowed("api.example.com:8080", c));
  assert.ok(isHostAllowed("agents.example.com", c));
  assert.ok(!isHostAllowed("evil.example.com", c));
  assert.ok(isHostAllowed("anything.example", config({ allowed_hosts: ["*"] })));
});

Deno.test("with a wildcard bind, IP literals and dotless service names pass, dotted names do not", () => {
  const c = config({ host: "0.0.0.0" });
  for (const host of ["172.18.0.4:8080", "[fd00::4]:8080", "edge-a:8080", "localhost"]) {
    assert.ok(isHostAllowed(host, c), host);
  }
  for (const host of ["evil.example:8080", "rebind.attacker.test", "edge-a.evil.example"]) {
    assert.ok(!isHostAllowed(host, c), host);
  }
});

Deno.test("hostGuard answers a foreign Host 421 in the shape of the path's surface", async () => {
  const app = new Hono();
  app.use("*", hostGuard(() => config()));
  app.all("*", (c) => c.text("served"));
  const ask = (path: string, host: string) =>
    app.request(`http://127.0.0.1${path}`, { headers: { host } });
  assert.equal(await (await ask("/healthz", "127.0.0.1:8080")).text(), "served");
  const openai = await ask("/v1/models", "evil.example:8080");
  assert.equal(openai.status, 421);
  assert.equal((await openai.json()).error.code, "misdirected_request");
  const ollama = await (await ask("/api/tags", "evil.example")).json();
  assert.match(ollama.error, /Host 'evil\.example' is not a name this Edge answers to/);
  const a2a = await (await ask("/a2a/echo", "evil.example")).json();
  assert.equal(a2a.jsonrpc, "2.0");
  assert.equal(a2a.error.code, -32600);
});
