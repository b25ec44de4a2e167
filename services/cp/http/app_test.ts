import assert from "node:assert/strict";
import { Registry } from "prom-client";
import { createLogger } from "../../../shared/log.ts";
import { hashSecret } from "../../../shared/secrets.ts";
import { CommandCenter } from "../commands.ts";
import { parseCpConfig } from "../config.ts";
import { EdgeRegistry } from "../registry.ts";
import { openAuditStore } from "../store/audit_store.ts";
import { createCpHttp } from "./app.ts";

const OPERATE = "op-s3cret";
const READ = "read-s3cret";

function app(raw: Record<string, unknown> = {}, now?: () => number) {
  const config = parseCpConfig({
    access: {
      tokens: [
        { name: "ops", token: OPERATE, role: "operate" },
        { name: "viewer", token: READ, role: "read" },
      ],
    },
    audit: { path: ":memory:" },
    ...raw,
  }, "cp.yaml");
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
  return createCpHttp({
    config,
    registry,
    commands,
    audit,
    metrics: new Registry(),
    logger,
    ...(now ? { now } : {}),
  });
}

const command = JSON.stringify({ edges: { all: true }, command: { reload: {} } });
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

const DATA_ROUTES = [
  "/edges",
  "/edges/x",
  "/edges/x?refresh=1",
  "/edges/x/events",
  "/commands",
  "/commands/cmd_x",
  "/report",
  "/report?refresh=1",
  "/audit",
  "/audit?actor=ops&edge=x&status=failed",
  "/series",
  "/edges/x/series",
  "/edges/x/nodes/n/runs",
  "/edges/x/nodes/n/runs/r/output",
  "/no-such-route",
];

Deno.test("every data route is 401 without a token or with a wrong one", async () => {
  const a = app();
  for (const path of DATA_ROUTES) {
    for (const headers of [{}, bearer("nope"), { authorization: `Basic ${btoa("a:b")}` }]) {
      const res = await a.request(path, { headers });
      assert.equal(res.status, 401, `${path} with ${JSON.stringify(headers)}`);
      assert.match(res.headers.get("www-authenticate") ?? "", /^Bearer /);
      assert.equal((await res.json()).error.code, "UNAUTHENTICATED");
    }
  }
  const post = await a.request("/commands", { method: "POST", body: command });
  assert.equal(post.status, 401);
  await post.body?.cancel();
});

Deno.test("with no access tokens configured every data route is refused and says why", async () => {
  const a = app({ access: {} });
  for (const path of DATA_ROUTES) {
    const res = await a.request(path, { headers: bearer(OPERATE) });
    assert.equal(res.status, 401, path);
    assert.match((await res.json()).error.message, /no access tokens are configured/);
  }
});

Deno.test("a read token reads every data route but POST /commands is 403 naming the token", async () => {
  const a = app();
  assert.deepEqual(await (await a.request("/edges", { headers: bearer(READ) })).json(), {
    edges: [],
  });
  assert.equal((await a.request("/edges/x/events", { headers: bearer(READ) })).status, 404);
  assert.equal((await a.request("/commands/cmd_x", { headers: bearer(READ) })).status, 404);
  const commands = await a.request("/commands", { headers: bearer(READ) });
  assert.deepEqual(await commands.json(), { commands: [] });
  const report = await (await a.request("/report", { headers: bearer(READ) })).json();
  assert.equal(report.edges.known, 0);
  assert.deepEqual(await (await a.request("/audit", { headers: bearer(READ) })).json(), {
    records: [],
  });
  const denied = await a.request("/commands", {
    method: "POST",
    body: command,
    headers: bearer(READ),
  });
  assert.equal(denied.status, 403);
  const { error } = await denied.json();
  assert.equal(error.code, "PERMISSION_DENIED");
  assert.match(error.message, /token 'viewer' as its role is read: use a token with role operate/);
});

Deno.test("POST /commands with an operate token that matches no edge is 400 and a malformed body is 400", async () => {
  const none = await app().request("/commands", {
    method: "POST",
    body: command,
    headers: bearer(OPERATE),
  });
  assert.equal(none.status, 400);
  assert.match((await none.json()).error.message, /no edge matches/);
  const bad = await app().request("/commands", {
    method: "POST",
    body: JSON.stringify({ command: { launch: {} } }),
    headers: bearer(OPERATE),
  });
  assert.equal(bad.status, 400);
  await bad.body?.cancel();
});

Deno.test("health, readiness, metrics and the dashboard files are served without a token", async () => {
  const a = app({ access: {} });
  assert.equal((await (await a.request("/healthz")).json()).status, "ok");
  assert.equal((await (await a.request("/readyz")).json()).edges_connected, 0);
  const page = await a.request("/");
  assert.match(page.headers.get("content-type") ?? "", /text\/html/);
  assert.match(await page.text(), /IOP fleet/);
  const script = await a.request("/dashboard.js");
  assert.equal(script.status, 200);
  await script.body?.cancel();
  const metrics = await a.request("/metrics");
  assert.match(metrics.headers.get("content-type") ?? "", /text\/plain/);
  await metrics.body?.cancel();
});

Deno.test("a token stored as its sha256: hash admits the token, not the hash", async () => {
  const hashed = app({
    access: { tokens: [{ name: "h", token: hashSecret("s3cret"), role: "read" }] },
  });
  const byHash = await hashed.request("/edges", { headers: bearer(hashSecret("s3cret")) });
  assert.equal(byHash.status, 401);
  await byHash.body?.cancel();
  const byToken = await hashed.request("/edges", { headers: bearer("s3cret") });
  assert.equal(byToken.status, 200);
  await byToken.body?.cancel();
});

Deno.test("the deprecated admin.tokens still act as operate tokens", async () => {
  const legacy = app({ access: {}, admin: { tokens: ["old-admin"] } });
  const res = await legacy.request("/commands", {
    method: "POST",
    body: command,
    headers: bearer("old-admin"),
  });
  assert.equal(res.status, 400, "past access checks: no edge matches");
  await res.body?.cancel();
});

Deno.test("CORS answers name only an allowed origin", async () => {
  const a = app({
    access: {
      tokens: [{ name: "viewer", token: READ, role: "read" }],
      allowed_origins: ["https://ops.example.com"],
    },
  });
  const preflight = await a.request("/edges", {
    method: "OPTIONS",
    headers: { origin: "https://ops.example.com", "access-control-request-method": "GET" },
  });
  assert.equal(preflight.status, 204);
  assert.equal(preflight.headers.get("access-control-allow-origin"), "https://ops.example.com");
  assert.match(preflight.headers.get("access-control-allow-headers") ?? "", /Authorization/);
  const foreign = await a.request("/edges", {
    method: "OPTIONS",
    headers: { origin: "https://evil.example", "access-control-request-method": "GET" },
  });
  assert.equal(foreign.headers.get("access-control-allow-origin"), null);
  const read = await a.request("/edges", {
    headers: { ...bearer(READ), origin: "https://ops.example.com" },
  });
  assert.equal(read.headers.get("access-control-allow-origin"), "https://ops.example.com");
  await read.body?.cancel();
});

Deno.test("GET /report?refresh fans out at most once per refresh_min_interval_ms and says when it served the last one", async () => {
  let now = 1_000_000;
  const a = app({
    access: {
      tokens: [{ name: "viewer", token: READ, role: "read" }],
      refresh_min_interval_ms: 5_000,
    },
  }, () => now);
  const get = async () => {
    const res = await a.request("/report?refresh=1", { headers: bearer(READ) });
    assert.equal(res.status, 200);
    return { header: res.headers.get("x-iop-refresh"), body: await res.json() };
  };
  const first = await get();
  assert.equal(first.header, "performed");
  assert.deepEqual(first.body.refresh, {
    performed: true,
    lastAtMs: 1_000_000,
    nextAtMs: 1_005_000,
  });
  now += 4_999;
  const second = await get();
  assert.equal(second.header, "rate-limited");
  assert.equal(second.body.refresh.performed, false);
  assert.equal(second.body.refresh.nextAtMs, 1_005_000);
  now += 1;
  assert.equal((await get()).header, "performed");
  const plain = await (await a.request("/report", { headers: bearer(READ) })).json();
  assert.equal(plain.refresh, undefined, "no refresh asked, none reported");
});
