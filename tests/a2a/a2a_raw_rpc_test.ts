/**
 * Raw JSON-RPC against a real Edge and Node: A2A 0.3 requests get 0.3 answers, and every
 * malformed request gets its JSON-RPC error while the Edge serves on.
 */
import assert from "node:assert/strict";
import { memoryTaskStore } from "../../services/edge/a2a/task_store.ts";
import { startA2aEdge } from "./a2a_edge.ts";

async function rpc(url: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

async function sseEvents(res: Response): Promise<Record<string, unknown>[]> {
  assert.match(res.headers.get("content-type") ?? "", /^text\/event-stream/);
  const text = await res.text();
  return text.split("\n\n").filter((b) => b.startsWith("data: ")).map((b) =>
    JSON.parse(b.slice(6))
  );
}

function v03Message(text: string) {
  return {
    kind: "message",
    messageId: crypto.randomUUID(),
    role: "user",
    parts: [{ kind: "text", text }],
  };
}

Deno.test("a 0.3 card carries url and protocolVersion when the client asks for no version", async () => {
  await using stack = await startA2aEdge(memoryTaskStore());
  const card = await (await fetch(`${stack.url}/a2a/demo/.well-known/agent-card.json`)).json();
  assert.equal(card.url, `${stack.url}/a2a/demo`);
  assert.equal(card.protocolVersion, "0.3.0");
  assert.equal(card.preferredTransport, "JSONRPC");
  const v1 = await (await fetch(`${stack.url}/.well-known/agent-card.json`, {
    headers: { "A2A-Version": "1.0" },
  })).json();
  assert.equal(v1.url, undefined);
  assert.equal(v1.supportedInterfaces[0].protocolVersion, "1.0");
  const missing = await fetch(`${stack.url}/a2a/nope/.well-known/agent-card.json`);
  assert.equal(missing.status, 404);
  await missing.body?.cancel();
});

Deno.test("message/send answers a 0.3 task with kind fields and lowercase states; tasks/get finds it", async () => {
  await using stack = await startA2aEdge(memoryTaskStore());
  const url = `${stack.url}/a2a/echo`;
  const { json } = await rpc(url, {
    jsonrpc: "2.0",
    id: "r1",
    method: "message/send",
    params: { message: v03Message("one two") },
  });
  assert.equal(json.id, "r1");
  const task = json.result;
  assert.equal(task.kind, "task");
  assert.equal(task.status.state, "completed");
  assert.deepEqual(task.artifacts[0].parts, [{ kind: "text", text: "one\ntwo\n" }]);
  assert.equal(task.history[0].kind, "message");
  assert.equal(task.history[0].role, "user");
  const got = await rpc(url, {
    jsonrpc: "2.0",
    id: 2,
    method: "tasks/get",
    params: { id: task.id },
  });
  assert.equal(got.json.id, 2);
  assert.equal(got.json.result.kind, "task");
  assert.equal(got.json.result.status.state, "completed");
});

Deno.test("message/stream sends 0.3 events ending with final:true, and tasks/resubscribe replays the end", async () => {
  await using stack = await startA2aEdge(memoryTaskStore());
  const url = `${stack.url}/a2a/echo`;
  const res = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 7,
      method: "message/stream",
      params: { message: v03Message("a b") },
    }),
  });
  const events = await sseEvents(res);
  assert.ok(events.every((e) => e.id === 7 && e.jsonrpc === "2.0"));
  const results = events.map((e) => e.result as Record<string, unknown>);
  assert.equal(results[0]!.kind, "task");
  assert.deepEqual(
    [...new Set(results.map((r) => r.kind))].sort(),
    ["artifact-update", "status-update", "task"],
  );
  const last = results.at(-1)!;
  assert.equal(last.kind, "status-update");
  assert.equal(last.final, true);
  assert.equal((last.status as { state: string }).state, "completed");
  assert.ok(results.slice(0, -1).every((r) => r.final !== true));

  const again = await sseEvents(
    await fetch(url, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: 8,
        method: "tasks/resubscribe",
        params: { id: results[0]!.id },
      }),
    }),
  );
  assert.equal((again.at(-1)!.result as { final: boolean }).final, true);
});

Deno.test("tasks/cancel of a finished 0.3 task answers -32002 and of an unknown one -32001", async () => {
  await using stack = await startA2aEdge(memoryTaskStore());
  const url = `${stack.url}/a2a/demo`;
  const sent = await rpc(url, {
    jsonrpc: "2.0",
    id: 1,
    method: "message/send",
    params: { message: v03Message("hi") },
  });
  const done = await rpc(url, {
    jsonrpc: "2.0",
    id: 2,
    method: "tasks/cancel",
    params: { id: sent.json.result.id },
  });
  assert.equal(done.json.error.code, -32002);
  const unknown = await rpc(url, {
    jsonrpc: "2.0",
    id: 3,
    method: "tasks/cancel",
    params: { id: "nope" },
  });
  assert.equal(unknown.json.error.code, -32001);
  assert.equal(unknown.json.id, 3);
});

Deno.test("each malformed request gets its JSON-RPC error and the Edge serves on", async () => {
  await using stack = await startA2aEdge(memoryTaskStore());
  const url = `${stack.url}/a2a/demo`;
  const v1 = { "A2A-Version": "1.0" };
  const cases: [string, unknown, number, Record<string, string>?][] = [
    ["bad JSON", "{not json", -32700],
    ["an array", "[]", -32600],
    ["no jsonrpc", { id: 1, method: "GetTask", params: { id: "x" } }, -32600],
    ["no id", { jsonrpc: "2.0", method: "GetTask", params: { id: "x" } }, -32600],
    ["method not a string", { jsonrpc: "2.0", id: 1, method: 5 }, -32600],
    ["unknown method", { jsonrpc: "2.0", id: 1, method: "tasks/explode", params: {} }, -32601],
    ["GetTask without id", { jsonrpc: "2.0", id: 1, method: "GetTask", params: {} }, -32602, v1],
    [
      "SendMessage with agent role",
      {
        jsonrpc: "2.0",
        id: 1,
        method: "SendMessage",
        params: { message: { messageId: "m", role: "ROLE_AGENT", parts: [{ text: "x" }] } },
      },
      -32602,
      v1,
    ],
    [
      "SendMessage with a part of two kinds",
      {
        jsonrpc: "2.0",
        id: 1,
        method: "SendMessage",
        params: {
          message: { messageId: "m", role: "ROLE_USER", parts: [{ text: "x", url: "u" }] },
        },
      },
      -32602,
      v1,
    ],
    [
      "message/send without kind",
      { jsonrpc: "2.0", id: 1, method: "message/send", params: { message: { role: "user" } } },
      -32602,
    ],
    [
      "unknown task",
      { jsonrpc: "2.0", id: 1, method: "GetTask", params: { id: "nope" } },
      -32001,
      v1,
    ],
    [
      "push config",
      { jsonrpc: "2.0", id: 1, method: "CreateTaskPushNotificationConfig", params: {} },
      -32003,
      v1,
    ],
    ["unsupported version", { jsonrpc: "2.0", id: 1, method: "GetTask", params: {} }, -32009, {
      "A2A-Version": "9.9",
    }],
  ];
  for (const [what, body, code, headers] of cases) {
    const { json } = await rpc(url, body, headers);
    assert.equal(json.jsonrpc, "2.0", what);
    assert.equal(json.error?.code, code, `${what}: ${JSON.stringify(json)}`);
    assert.equal(typeof json.error.message, "string", what);
  }
  const alive = await rpc(url, {
    jsonrpc: "2.0",
    id: "after",
    method: "SendMessage",
    params: { message: { messageId: "m", role: "ROLE_USER", parts: [{ text: "still here" }] } },
  }, v1);
  assert.equal(alive.json.result.task.status.state, "TASK_STATE_COMPLETED");
  const health = await fetch(`${stack.url}/healthz`);
  assert.equal(health.status, 200);
  await health.body?.cancel();
});

Deno.test("with API keys configured, cards declare bearer auth and JSON-RPC needs a key", async () => {
  await using stack = await startA2aEdge(memoryTaskStore(), ["a2a-secret"]);
  const v1 = await (await fetch(`${stack.url}/a2a/demo/.well-known/agent-card.json`, {
    headers: { "A2A-Version": "1.0" },
  })).json();
  assert.equal(v1.securitySchemes.bearer.httpAuthSecurityScheme.scheme, "Bearer");
  assert.deepEqual(v1.securityRequirements, [{ schemes: { bearer: { list: [] } } }]);
  const v03 = await (await fetch(`${stack.url}/a2a/demo/.well-known/agent-card.json`)).json();
  assert.deepEqual([v03.securitySchemes.bearer.type, v03.securitySchemes.bearer.scheme], [
    "http",
    "bearer",
  ]);
  assert.deepEqual(v03.security, [{ bearer: [] }]);

  const send = {
    jsonrpc: "2.0",
    id: 1,
    method: "message/send",
    params: { message: v03Message("hello") },
  };
  const refused = await rpc(`${stack.url}/a2a/demo`, send);
  assert.equal(refused.status, 401);
  const wrong = await rpc(`${stack.url}/a2a/demo`, send, { Authorization: "Bearer nope" });
  assert.equal(wrong.status, 401);
  const ok = await rpc(`${stack.url}/a2a/demo`, send, { Authorization: "Bearer a2a-secret" });
  assert.equal(ok.status, 200);
  assert.equal(ok.json.result.status.state, "completed");
});

Deno.test("without API keys, cards declare no security", async () => {
  await using stack = await startA2aEdge(memoryTaskStore());
  const card = await (await fetch(`${stack.url}/a2a/demo/.well-known/agent-card.json`)).json();
  assert.equal(card.securitySchemes, undefined);
  assert.equal(card.security, undefined);
});
