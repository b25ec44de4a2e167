import assert from "node:assert/strict";
import { Registry } from "prom-client";
import { createLogger } from "../../../shared/log.ts";
import { hashSecret } from "../../../shared/secrets.ts";
import { CommandCenter } from "../commands.ts";
import { parseCpConfig } from "../config.ts";
import { EdgeRegistry } from "../registry.ts";
import { openAuditStore } from "../store/audit_store.ts";
import { createCpHttp } from "./app.ts";

function app(tokens: string[]) {
  const config = parseCpConfig({ admin: { tokens }, audit: { path: ":memory:" } }, "cp.yaml");
  const logger = createLogger("cp.test", { level: "error" });
  const registry = new EdgeRegistry({ eventsPerEdge: 5 });
  const audit = openAuditStore(":memory:");
  const commands = new CommandCenter({
    registry,
    audit,
    logger,
    defaultTimeoutMs: 1000,
    resultGraceMs: 0,
    retained: 5,
  });
  return createCpHttp({ config, registry, commands, audit, metrics: new Registry(), logger });
}

const command = JSON.stringify({ edges: { all: true }, command: { reload: {} } });

Deno.test("POST /commands without the admin token is 401 and with no tokens configured stays disabled", async () => {
  const res = await app(["s3cret"]).request("/commands", { method: "POST", body: command });
  assert.equal(res.status, 401);
  assert.equal((await res.json()).error.code, "UNAUTHENTICATED");
  const wrong = await app(["s3cret"]).request("/commands", {
    method: "POST",
    body: command,
    headers: { authorization: "Bearer nope" },
  });
  assert.equal(wrong.status, 401);
  await wrong.body?.cancel();
  const disabled = await app([]).request("/commands", {
    method: "POST",
    body: command,
    headers: { authorization: "Bearer " },
  });
  assert.equal(disabled.status, 401);
  assert.match((await disabled.json()).error.message, /disabled/);
});

Deno.test("POST /commands that matches no edge is 400 and a malformed body is 400", async () => {
  const headers = { authorization: "Bearer s3cret" };
  const none = await app(["s3cret"]).request("/commands", {
    method: "POST",
    body: command,
    headers,
  });
  assert.equal(none.status, 400);
  assert.match((await none.json()).error.message, /no edge matches/);
  const bad = await app(["s3cret"]).request("/commands", {
    method: "POST",
    body: JSON.stringify({ command: { launch: {} } }),
    headers,
  });
  assert.equal(bad.status, 400);
  await bad.body?.cancel();
});

Deno.test("health, readiness, empty fleet views and the dashboard page are served", async () => {
  const a = app([]);
  assert.equal((await (await a.request("/healthz")).json()).status, "ok");
  assert.equal((await (await a.request("/readyz")).json()).edges_connected, 0);
  assert.deepEqual(await (await a.request("/edges")).json(), { edges: [] });
  assert.equal((await a.request("/edges/x/events")).status, 404);
  assert.equal((await a.request("/commands/cmd_x")).status, 404);
  assert.equal((await (await a.request("/report")).json()).edges.known, 0);
  const page = await a.request("/");
  assert.match(page.headers.get("content-type") ?? "", /text\/html/);
  assert.match(await page.text(), /IOP fleet/);
  const metrics = await a.request("/metrics");
  assert.match(metrics.headers.get("content-type") ?? "", /text\/plain/);
  await metrics.body?.cancel();
});

Deno.test("an admin token stored as its sha256: hash admits the token, not the hash", async () => {
  const hashed = app([hashSecret("s3cret")]);
  const send = (token: string) =>
    hashed.request("/commands", {
      method: "POST",
      body: command,
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    });
  const byHash = await send(hashSecret("s3cret"));
  assert.equal(byHash.status, 401);
  await byHash.body?.cancel();
  const byToken = await send("s3cret");
  assert.notEqual(byToken.status, 401, await byToken.clone().text());
  await byToken.body?.cancel();
});
