/**
 * Tenants on the A2A surface, with the unmodified `@a2a-js/sdk` client and raw JSON-RPC against a
 * real Edge and Node over TCP and a SQLite task store: tasks and contexts belong to the tenant
 * that created them, the agent allow-list answers like an unknown agent, and a tenant over its
 * limit gets 429 with Retry-After.
 */
import assert from "node:assert/strict";
import { Role, TaskState } from "@a2a-js/sdk";
import { ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory } from "@a2a-js/sdk/client";
import { startTenantEdge } from "./a2a_edge.ts";

type Client = Awaited<ReturnType<ClientFactory["createFromUrl"]>>;
type SendParams = Parameters<Client["sendMessage"]>[0];

const TENANTS = [
  { name: "alpha", keys: ["alpha-key"], concurrent_runs: 2 },
  { name: "beta", keys: ["beta-key"], agents: ["other-*"] },
  { name: "gamma", keys: ["gamma-key"] },
];

function userMessage(text: string, options: { contextId?: string; taskId?: string } = {}) {
  return {
    tenant: "",
    message: {
      messageId: crypto.randomUUID(),
      contextId: options.contextId ?? "",
      taskId: options.taskId ?? "",
      role: Role.ROLE_USER,
      parts: [{
        content: { $case: "text", value: text },
        metadata: undefined,
        filename: "",
        mediaType: "",
      }],
      metadata: undefined,
      extensions: [],
      referenceTaskIds: [],
    },
    configuration: undefined,
    metadata: undefined,
  } as SendParams;
}

function textOf(parts: { content?: { $case: string; value: unknown } | undefined }[]): string {
  return parts.map((p) => p.content?.$case === "text" ? String(p.content.value) : "").join("");
}

/** An SDK client of `agent` that sends `key` as its bearer token. */
async function clientWithKey(baseUrl: string, agent: string, key: string): Promise<Client> {
  const fetchImpl: typeof fetch = (input, init) => {
    const headers = new Headers(init?.headers);
    headers.set("Authorization", `Bearer ${key}`);
    return fetch(input, { ...init, headers });
  };
  const factory = new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [new JsonRpcTransportFactory({ fetchImpl })],
    }),
  );
  return await factory.createFromUrl(baseUrl, `/a2a/${agent}/.well-known/agent-card.json`);
}

const isTaskNotFound = (err: Error) => err.name === "TaskNotFoundError";

function listRequest(contextId = "") {
  return {
    tenant: "",
    contextId,
    status: TaskState.TASK_STATE_UNSPECIFIED,
    pageSize: undefined,
    pageToken: "",
    historyLength: undefined,
    statusTimestampAfter: undefined,
    includeArtifacts: true,
  };
}

async function rpc(url: string, key: string, method: string, params: unknown) {
  const res = await fetch(url, {
    method: "POST",
    headers: {
      "Content-Type": "application/json",
      "A2A-Version": "1.0",
      Authorization: `Bearer ${key}`,
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }),
  });
  return { status: res.status, headers: res.headers, json: await res.json() };
}

function textMessage(text: string) {
  return { messageId: crypto.randomUUID(), role: "ROLE_USER", parts: [{ text }] };
}

Deno.test("another tenant cannot get, cancel, resubscribe, list or continue a task by its id: task not found, while its owner can", async () => {
  await using edge = await startTenantEdge({ tenants: TENANTS });
  const alpha = await clientWithKey(edge.url, "count", "alpha-key");
  const gamma = await clientWithKey(edge.url, "count", "gamma-key");
  let taskId = "";
  let contextId = "";
  for await (const event of alpha.sendMessageStream(userMessage("go"))) {
    const p = event.payload!;
    if (p.$case === "task") [taskId, contextId] = [p.value.id, p.value.contextId];
    if (p.$case === "artifactUpdate") break; // the CLI runs
  }
  assert.notEqual(taskId, "");

  await assert.rejects(
    gamma.getTask({ tenant: "", id: taskId, historyLength: undefined }),
    isTaskNotFound,
  );
  await assert.rejects(
    gamma.cancelTask({ tenant: "", id: taskId, metadata: undefined }),
    isTaskNotFound,
  );
  await assert.rejects(async () => {
    for await (const _ of gamma.resubscribeTask({ tenant: "", id: taskId })) {
      throw new Error("gamma was streamed alpha's task");
    }
  }, isTaskNotFound);
  await assert.rejects(gamma.sendMessage(userMessage("more", { taskId })), isTaskNotFound);
  const gammaList = await gamma.listTasks(listRequest());
  assert.deepEqual(gammaList.tasks, []);
  assert.equal(gammaList.totalSize, 0);
  const byContext = await gamma.listTasks(listRequest(contextId));
  assert.deepEqual(byContext.tasks, []);

  // The answers are exactly those for an id nobody has.
  const foreign = await rpc(`${edge.url}/a2a/count`, "gamma-key", "GetTask", { id: taskId });
  const unknown = await rpc(`${edge.url}/a2a/count`, "gamma-key", "GetTask", { id: "nope" });
  assert.deepEqual(
    foreign.json.error,
    { ...unknown.json.error, message: unknown.json.error.message.replace("nope", taskId) },
  );
  assert.equal(foreign.json.error.code, -32001);

  // Alpha still sees, lists and cancels its task: gamma's cancel reached nothing.
  const got = await alpha.getTask({ tenant: "", id: taskId, historyLength: undefined });
  assert.equal(got.status?.state, TaskState.TASK_STATE_WORKING);
  assert.deepEqual((await alpha.listTasks(listRequest())).tasks.map((t) => t.id), [taskId]);
  const canceled = await alpha.cancelTask({ tenant: "", id: taskId, metadata: undefined });
  assert.equal(canceled.status?.state, TaskState.TASK_STATE_CANCELED);
});

Deno.test("another tenant's contextId does not join the owner's context or its CLI session", async () => {
  await using edge = await startTenantEdge({ tenants: TENANTS });
  const alpha = await clientWithKey(edge.url, "session", "alpha-key");
  const gamma = await clientWithKey(edge.url, "session", "gamma-key");
  const first = await alpha.sendMessage(userMessage("one"));
  assert.ok("status" in first);
  assert.equal(textOf(first.artifacts[0]!.parts), "new:one");
  const sessionId = String(first.metadata?.iopSessionId);

  const intruder = await gamma.sendMessage(userMessage("two", { contextId: first.contextId }));
  assert.ok("status" in intruder);
  assert.equal(intruder.status?.state, TaskState.TASK_STATE_COMPLETED);
  assert.equal(textOf(intruder.artifacts[0]!.parts), "new:two", "a new session, not a resume");
  assert.notEqual(intruder.metadata?.iopSessionId, sessionId);
  assert.deepEqual(
    (await alpha.listTasks(listRequest(first.contextId))).tasks.map((t) => t.id),
    [first.id],
    "alpha's context holds only alpha's task",
  );

  const resumed = await alpha.sendMessage(userMessage("three", { contextId: first.contextId }));
  assert.ok("status" in resumed);
  assert.equal(textOf(resumed.artifacts[0]!.parts), `resume:${sessionId}:three`);
});

Deno.test("a tenant not allowed an agent gets the 404 of an unknown agent on rpc; cards stay public", async () => {
  await using edge = await startTenantEdge({ tenants: TENANTS });
  const send = { message: textMessage("hi") };
  const denied = await rpc(`${edge.url}/a2a/echo`, "beta-key", "SendMessage", send);
  const unknown = await rpc(`${edge.url}/a2a/no-such-agent`, "beta-key", "SendMessage", send);
  assert.equal(denied.status, 404);
  assert.equal(unknown.status, 404);
  assert.deepEqual(denied.json, {
    jsonrpc: "2.0",
    id: null,
    error: { code: -32600, message: "This Edge publishes no A2A agent 'echo'" },
  });
  assert.deepEqual(denied.json, {
    ...unknown.json,
    error: {
      ...unknown.json.error,
      message: unknown.json.error.message.replace("no-such-agent", "echo"),
    },
  });
  // The default agent (echo) is denied the same way on /a2a.
  const byDefault = await rpc(`${edge.url}/a2a`, "beta-key", "SendMessage", send);
  assert.equal(byDefault.status, 404);

  const card = await fetch(`${edge.url}/a2a/echo/.well-known/agent-card.json`);
  assert.equal(card.status, 200, "cards need no key");
  assert.equal((await card.json()).name, "Echo");

  const allowed = await clientWithKey(edge.url, "other-echo", "beta-key");
  const result = await allowed.sendMessage(userMessage("x y"));
  assert.ok("status" in result);
  assert.equal(result.status?.state, TaskState.TASK_STATE_COMPLETED);
  const other = await rpc(`${edge.url}/a2a/echo`, "alpha-key", "SendMessage", send);
  assert.equal(other.status, 200, "alpha may use every agent");
});

Deno.test("a tenant over concurrent_runs gets 429 with Retry-After and a -32000 error naming the limit; a finished run frees its slot", async () => {
  await using edge = await startTenantEdge({ tenants: TENANTS });
  const url = `${edge.url}/a2a/slow`; // at most 4 at once on the node
  const nonBlocking = (text: string) => ({
    message: textMessage(text),
    configuration: { returnImmediately: true },
  });
  const first = await rpc(url, "alpha-key", "SendMessage", nonBlocking("1"));
  const second = await rpc(url, "alpha-key", "SendMessage", nonBlocking("2"));
  assert.equal(first.status, 200);
  assert.equal(second.status, 200);
  const ids = [first.json.result.task.id, second.json.result.task.id];

  const third = await rpc(url, "alpha-key", "SendMessage", nonBlocking("3"));
  assert.equal(third.status, 429);
  const retryAfter = Number(third.headers.get("Retry-After"));
  assert.ok(Number.isInteger(retryAfter) && retryAfter >= 1, `Retry-After ${retryAfter}`);
  assert.equal(third.json.error.code, -32000);
  assert.match(
    third.json.error.message,
    /^Overloaded: Tenant 'alpha' already has 2 runs in flight, its limit of concurrent runs is 2$/,
  );
  assert.deepEqual(third.json.error.data, {
    reason: "tenant_limit",
    limit: "concurrent_runs",
    retryAfterSeconds: retryAfter,
  });
  // A refused send left no task behind.
  const listed = await rpc(url, "alpha-key", "ListTasks", {});
  assert.deepEqual(
    listed.json.result.tasks.map((t: { id: string }) => t.id).sort(),
    [...ids].sort(),
  );

  // The SDK surfaces the same error, also on a stream.
  const alpha = await clientWithKey(edge.url, "slow", "alpha-key");
  await assert.rejects(
    async () => {
      for await (const _ of alpha.sendMessageStream(userMessage("4"))) break;
    },
    (err: Error & { code?: number }) => /Overloaded: Tenant 'alpha'/.test(err.message),
  );
  // Another tenant is not limited by alpha.
  const gamma = await rpc(url, "gamma-key", "SendMessage", nonBlocking("g"));
  assert.equal(gamma.status, 200, JSON.stringify(gamma.json));

  const canceled = await rpc(url, "alpha-key", "CancelTask", { id: ids[0] });
  assert.equal(canceled.json.result.status.state, "TASK_STATE_CANCELED");
  const again = await rpc(url, "alpha-key", "SendMessage", nonBlocking("5"));
  assert.equal(again.status, 200, "the canceled run's lease ended");
  for (const id of [ids[1], again.json.result.task.id]) {
    await rpc(url, "alpha-key", "CancelTask", { id });
  }
  await rpc(url, "gamma-key", "CancelTask", { id: gamma.json.result.task.id });
});
