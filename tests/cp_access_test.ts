/**
 * Control Plane access with named tokens and roles, against a real Control Plane (HTTP server,
 * `/client` WebSocket, SQLite audit file) with a real Edge and Node in this process: every data
 * route wants a token, a read token reads but cannot command, the audit names the token and not
 * what the caller claims, the socket refuses foreign origins and stays silent until it
 * authenticates, and status refreshes that fan out to the edges are rate-limited.
 */
import assert from "node:assert/strict";
import { type ControlPlane, startControlPlane } from "../services/cp/control_plane.ts";
import { CLOSE_UNAUTHENTICATED } from "../services/cp/http/client_socket.ts";
import { openAuditStore } from "../services/cp/store/audit_store.ts";
import {
  authHeaders,
  startCpEdge,
  TEST_OPERATE_TOKEN,
  TEST_OPERATOR,
  TEST_READ_TOKEN,
  TEST_VIEWER,
  testCpConfig,
} from "./cp_harness.ts";
import { quiet, type RawConfig } from "./stack.ts";
import { until } from "./util.ts";

/** Parsed JSON of the HTTP API and the socket, read field by field in assertions. */
// deno-lint-ignore no-explicit-any
type Json = any;

async function startCp(access: RawConfig = {}, auditPath = ":memory:"): Promise<ControlPlane> {
  return await startControlPlane(await testCpConfig(auditPath, { access }), {
    logger: quiet("cp"),
  });
}

/** A JSON-text `/client` socket that keeps everything it receives and how it closed. */
async function openSocket(cp: ControlPlane, headers: Record<string, string> = {}) {
  const ws = new WebSocket(cp.httpUrl.replace("http", "ws") + "/client", { headers });
  const received: Json[] = [];
  ws.onmessage = (e) => received.push(JSON.parse(e.data));
  let closeEvent: CloseEvent | undefined;
  const closed = new Promise<CloseEvent>((resolve) =>
    ws.onclose = (e) => {
      closeEvent = e;
      resolve(e);
    }
  );
  await new Promise((resolve, reject) => {
    ws.onopen = resolve;
    ws.onerror = reject;
  });
  let next = 1;
  return {
    received,
    /** Resolves with the close event; fails the test if the server never closes. */
    closedByServer: () => until("the server to close the socket", () => closeEvent, 5_000),
    send(message: Json) {
      ws.send(JSON.stringify(message));
    },
    async call(message: Json): Promise<Json> {
      const id = String(next++);
      ws.send(JSON.stringify({ correlationId: id, ...message }));
      return await until("an answer", () => received.find((r) => r.correlationId === id));
    },
    async close() {
      ws.close();
      await closed;
    },
  };
}

/** The HTTP status of a raw WebSocket upgrade request to `/client` with these headers. */
async function upgradeStatus(cp: ControlPlane, headers: Record<string, string>): Promise<number> {
  const { hostname, port } = new URL(cp.httpUrl);
  const conn = await Deno.connect({ hostname, port: Number(port) });
  const lines = [
    "GET /client HTTP/1.1",
    `Host: ${hostname}:${port}`,
    "Upgrade: websocket",
    "Connection: Upgrade",
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
    "Sec-WebSocket-Version: 13",
    ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`),
  ];
  await conn.write(new TextEncoder().encode(lines.join("\r\n") + "\r\n\r\n"));
  const buffer = new Uint8Array(1024);
  const n = await conn.read(buffer);
  conn.close();
  const statusLine = new TextDecoder().decode(buffer.subarray(0, n ?? 0)).split("\r\n")[0] ?? "";
  return Number(statusLine.split(" ")[1]);
}

const RUN = {
  edges: { edgeIds: ["edge-a"] },
  command: { run: { adapter: "mock", target: "demo", prompt: "hi" } },
};

Deno.test("every data route of a running Control Plane is 401 without a token, and open routes stay open", async () => {
  await using cp = await startCp();
  for (const path of ["/edges", "/edges/edge-a", "/commands", "/commands/cmd_1", "/report"]) {
    for (const init of [{}, { headers: authHeaders("wrong-token") }]) {
      const res = await fetch(cp.httpUrl + path, init);
      assert.equal(res.status, 401, path);
      assert.equal((await res.json()).error.code, "UNAUTHENTICATED");
    }
  }
  for (const path of ["/report?refresh=1", "/audit", "/edges/edge-a/events"]) {
    const res = await fetch(cp.httpUrl + path);
    assert.equal(res.status, 401, path);
    await res.body?.cancel();
  }
  const post = await fetch(`${cp.httpUrl}/commands`, { method: "POST", body: "{}" });
  assert.equal(post.status, 401);
  await post.body?.cancel();
  for (const path of ["/healthz", "/readyz", "/metrics", "/", "/dashboard.js"]) {
    const res = await fetch(cp.httpUrl + path);
    assert.equal(res.status, 200, path);
    await res.body?.cancel();
  }
});

Deno.test("a read token reads the fleet but POST /commands is 403, and the audit's actor is the operate token's name whatever the body claims", async () => {
  const dir = await Deno.makeTempDir({ prefix: "iop-cp-access-" });
  const auditPath = `${dir}/audit.sqlite`;
  try {
    {
      await using cp = await startCp({}, auditPath);
      await using _edge = await startCpEdge({ edgeId: "edge-a", cpAddress: cp.wireAddress });
      await until("edge status", () => cp.registry.get("edge-a")?.status?.nodes[0]?.connected);
      const edges = await (await fetch(`${cp.httpUrl}/edges`, {
        headers: authHeaders(TEST_READ_TOKEN),
      })).json();
      assert.deepEqual(edges.edges.map((e: Json) => e.edgeId), ["edge-a"]);

      const denied = await fetch(`${cp.httpUrl}/commands`, {
        method: "POST",
        headers: authHeaders(TEST_READ_TOKEN),
        body: JSON.stringify(RUN),
      });
      assert.equal(denied.status, 403);
      const { error } = await denied.json();
      assert.equal(error.code, "PERMISSION_DENIED");
      assert.match(error.message, new RegExp(`token '${TEST_VIEWER}' as its role is read`));
      assert.equal(cp.commands.list().length, 0, "nothing was submitted");

      const accepted = await fetch(`${cp.httpUrl}/commands`, {
        method: "POST",
        headers: { ...authHeaders(TEST_OPERATE_TOKEN), "x-iop-actor": "mallory" },
        body: JSON.stringify({ ...RUN, actor: "mallory" }),
      });
      assert.equal(accepted.status, 202);
      const { commandId } = await accepted.json();
      await until("command done", () => cp.commands.get(commandId)?.outcome === "succeeded");
      const audit = await (await fetch(`${cp.httpUrl}/audit`, {
        headers: authHeaders(TEST_READ_TOKEN),
      })).json();
      assert.deepEqual(
        audit.records.map((r: Json) => [r.commandId, r.actor, r.via]),
        [[commandId, TEST_OPERATOR, "http"]],
      );
    }
    // The SQLite file itself, after the Control Plane stopped.
    const store = openAuditStore(auditPath);
    try {
      assert.deepEqual(store.recent(10).map((r) => r.actor), [TEST_OPERATOR]);
    } finally {
      store.close();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the /client upgrade is refused (403) from a foreign Origin and with a wrong bearer token (401)", async () => {
  await using cp = await startCp({ allowed_origins: ["https://ops.example.com"] });
  const own = new URL(cp.httpUrl).origin;
  assert.equal(await upgradeStatus(cp, { Origin: "https://evil.example" }), 403);
  assert.equal(await upgradeStatus(cp, { Origin: own.replace("127.0.0.1", "localhost") }), 403);
  assert.equal(await upgradeStatus(cp, { Origin: own.replace("http:", "https:") }), 403);
  assert.equal(await upgradeStatus(cp, { Origin: "null" }), 403);
  assert.equal(await upgradeStatus(cp, { Authorization: "Bearer wrong" }), 401);
  assert.equal(await upgradeStatus(cp, { Origin: own }), 101);
  assert.equal(await upgradeStatus(cp, { Origin: "https://ops.example.com" }), 101);
  assert.equal(await upgradeStatus(cp, {}), 101, "no Origin: not a browser page");
});

Deno.test("a /client socket that does not authenticate gets no fleet data and is closed with a clear reason", async () => {
  await using cp = await startCp({ client_auth_timeout_ms: 400 });
  const socket = await openSocket(cp);
  const early = await socket.call({ subscribe: {} });
  assert.equal(early.error.code, "UNAUTHENTICATED");
  const status = await socket.call({ statusRequest: { refresh: false } });
  assert.equal(status.error.code, "UNAUTHENTICATED");
  // Fleet events happen meanwhile: an edge attaches and reports.
  await using _edge = await startCpEdge({ edgeId: "edge-a", cpAddress: cp.wireAddress });
  await until("edge status", () => cp.registry.get("edge-a")?.status?.nodes[0]?.connected);
  const closed = await socket.closedByServer();
  assert.equal(closed.code, CLOSE_UNAUTHENTICATED);
  assert.match(
    closed.reason,
    /^authentication timeout: no hello with a valid token within 400 ms$/,
  );
  assert.deepEqual(
    socket.received.map((r) => Object.keys(r).filter((k) => k !== "correlationId")),
    [
      ["error"],
      ["error"],
    ],
  );

  const wrong = await openSocket(cp);
  const refused = await wrong.call({ hello: { clientName: "x", credential: "wrong" } });
  assert.equal(refused.error.code, "UNAUTHENTICATED");
  const wrongClosed = await wrong.closedByServer();
  assert.equal(wrongClosed.code, CLOSE_UNAUTHENTICATED);
  assert.match(wrongClosed.reason, /the hello's token is not valid/);
});

Deno.test("a /client socket authenticates by its first message or by its upgrade header, and commands need operate", async () => {
  await using cp = await startCp({ client_auth_timeout_ms: 400 });
  await using _edge = await startCpEdge({ edgeId: "edge-a", cpAddress: cp.wireAddress });
  await until("edge status", () => cp.registry.get("edge-a")?.status?.nodes[0]?.connected);

  // The browser-friendly first message.
  const viewer = await openSocket(cp);
  viewer.send({ type: "auth", token: TEST_READ_TOKEN });
  const ack = await until("the hello ack", () => viewer.received.find((r) => r.helloAck));
  assert.equal(ack.helloAck.canCommand, false);
  const status = await viewer.call({ statusRequest: {} });
  assert.deepEqual(status.status.edges.map((e: Json) => e.edgeId), ["edge-a"]);
  const denied = await viewer.call({ submitCommand: RUN });
  assert.equal(denied.error.code, "PERMISSION_DENIED");
  assert.match(denied.error.message, new RegExp(`token '${TEST_VIEWER}' as its role is read`));
  // Authenticated in time: still open past the timeout.
  await new Promise((resolve) => setTimeout(resolve, 600));
  assert.ok((await viewer.call({ statusRequest: {} })).status);
  await viewer.close();

  // A header on the upgrade: the hello needs no credential; the actor is the token's name.
  const operator = await openSocket(cp, { authorization: `Bearer ${TEST_OPERATE_TOKEN}` });
  const opAck = await operator.call({ hello: { clientName: "ops-app" } });
  assert.equal(opAck.helloAck.canCommand, true);
  const accepted = await operator.call({ submitCommand: { ...RUN, actor: "mallory" } });
  const commandId = accepted.commandAccepted.commandId;
  await until("command done", () => cp.commands.get(commandId)?.outcome === "succeeded");
  assert.deepEqual(
    [cp.audit.get(commandId)?.actor, cp.audit.get(commandId)?.via],
    [TEST_OPERATOR, "client"],
  );
  await operator.close();
});

Deno.test("status refreshes that ask the edges are rate-limited across /report, /edges/{id} and /client", async () => {
  await using cp = await startCp({ refresh_min_interval_ms: 60_000 });
  await using _edge = await startCpEdge({ edgeId: "edge-a", cpAddress: cp.wireAddress });
  await until("edge status", () => cp.registry.get("edge-a")?.status?.nodes[0]?.connected);
  let asked = 0;
  const refresh = cp.registry.refresh.bind(cp.registry);
  cp.registry.refresh = (edgeId, timeoutMs) => {
    asked++;
    return refresh(edgeId, timeoutMs);
  };
  const report = async () => {
    const res = await fetch(`${cp.httpUrl}/report?refresh=1`, {
      headers: authHeaders(TEST_READ_TOKEN),
    });
    assert.equal(res.status, 200);
    return { header: res.headers.get("x-iop-refresh"), body: await res.json() };
  };
  const first = await report();
  assert.equal(first.header, "performed");
  assert.equal(first.body.refresh.performed, true);
  assert.equal(first.body.edges.connected, 1);
  assert.equal(asked, 1);
  const second = await report();
  assert.equal(second.header, "rate-limited");
  assert.equal(second.body.refresh.performed, false);
  assert.equal(second.body.refresh.nextAtMs, first.body.refresh.lastAtMs + 60_000);
  assert.equal(second.body.perEdge[0].edgeId, "edge-a", "served from the last refresh");

  const socket = await openSocket(cp);
  await socket.call({ hello: { credential: TEST_READ_TOKEN } });
  const status = await socket.call({ statusRequest: { refresh: true } });
  assert.deepEqual(status.status.edges.map((e: Json) => e.edgeId), ["edge-a"]);
  await socket.close();
  assert.equal(asked, 1, "the socket's refresh shares the fleet limit");

  const edge = async () => {
    const res = await fetch(`${cp.httpUrl}/edges/edge-a?refresh=1`, {
      headers: authHeaders(TEST_READ_TOKEN),
    });
    assert.equal(res.status, 200);
    await res.body?.cancel();
    return res.headers.get("x-iop-refresh");
  };
  assert.equal(await edge(), "performed");
  assert.equal(await edge(), "rate-limited");
  assert.equal(asked, 2, "one edge refresh per interval");
});
