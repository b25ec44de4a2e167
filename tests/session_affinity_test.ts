/**
 * Session affinity with real nodes: two nodes with the same CLI profile (which prints the
 * session id and the node it ran on) behind one Edge, driven through the A2A surface with the
 * unmodified `@a2a-js/sdk` client and through the service layer for pooled model runs.
 */
import assert from "node:assert/strict";
import { Role, TaskState } from "@a2a-js/sdk";
import { ClientFactory } from "@a2a-js/sdk/client";
import { memoryTaskStore } from "../services/edge/a2a/task_store.ts";
import { runInput } from "../shared/run.ts";
import { adapterCatalog } from "../services/node/adapters/catalog.ts";
import { mockNode, type RawConfig, startEdge, startNode, type TestEdge } from "./stack.ts";

type Client = Awaited<ReturnType<ClientFactory["createFromUrl"]>>;
type SendParams = Parameters<Client["sendMessage"]>[0];

/** The same profile on both nodes: `new|resume <session> on <node>`. */
const agentProfile = {
  name: "agent",
  command: "sh",
  args: ["-c", 'echo "new $1 on {node_id}"', "s", "{session}"],
  resume_args: ["-c", 'echo "resume $1 on {node_id}"', "s", "{session}"],
};

function config(): RawConfig {
  const cli = { name: "cli", kind: "cli", profiles: [agentProfile] };
  return {
    edge: { id: "edge-sessions" },
    control_plane: { address: "" },
    a2a: { task_retention_ms: 60_000, store_path: ":memory:" },
    nodes: ["n1", "n2"].map((id) =>
      mockNode(id, {
        providers: [{ id: `${id}-chat`, group: "chat", max: 4 }],
        extraAdapters: [cli],
      })
    ),
    models: [{ name: "chat", route: "pool" }],
    agents: [{ id: "agent", name: "Agent", kind: "a2a", adapter: "cli", target: "agent" }],
  };
}

/** The Edge and both nodes, each node's CLI adapter filling `{node_id}` with its own id. */
async function startSessionStack(): Promise<TestEdge> {
  const edge = await startEdge({ config, a2a: memoryTaskStore() });
  try {
    await Promise.all(
      ["n1", "n2"].map((id) => startNode(edge, { id, factories: adapterCatalog({ nodeId: id }) })),
    );
    return edge;
  } catch (err) {
    await edge.close();
    throw err;
  }
}

function userMessage(text: string, contextId = "", metadata?: Record<string, unknown>): SendParams {
  return {
    tenant: "",
    message: {
      messageId: crypto.randomUUID(),
      contextId,
      taskId: "",
      role: Role.ROLE_USER,
      parts: [{
        content: { $case: "text", value: text },
        metadata: undefined,
        filename: "",
        mediaType: "",
      }],
      metadata,
      extensions: [],
      referenceTaskIds: [],
    },
    configuration: undefined,
    metadata: undefined,
  };
}

type SentTask = Extract<Awaited<ReturnType<Client["sendMessage"]>>, { status?: unknown }>;

async function send(client: Client, params: SendParams): Promise<SentTask> {
  const result = await client.sendMessage(params);
  assert.ok("status" in result, "a task, not a message");
  return result;
}

function outputOf(task: SentTask): string {
  return task.artifacts.flatMap((a) => a.parts).map((p) =>
    p.content?.$case === "text" ? String(p.content.value) : ""
  ).join("").trim();
}

function statusText(task: SentTask): string {
  return (task.status?.message?.parts ?? []).map((p) =>
    p.content?.$case === "text" ? String(p.content.value) : ""
  ).join("");
}

function agentClient(stack: TestEdge): Promise<Client> {
  return new ClientFactory().createFromUrl(stack.url, "/a2a/agent/.well-known/agent-card.json");
}

Deno.test("A2A follow-ups in one context stay on the node holding the CLI session, which has its id from turn one", async () => {
  await using stack = await startSessionStack();
  const client = await agentClient(stack);
  const first = await send(client, userMessage("one"));
  assert.equal(first.status?.state, TaskState.TASK_STATE_COMPLETED);
  const [, sessionId, , node] = outputOf(first).split(" ");
  assert.match(outputOf(first), /^new [0-9a-f-]{36} on n[12]$/, "{session} set on turn one");
  assert.equal(first.metadata?.iopSessionId, sessionId);
  assert.equal(first.metadata?.iopNodeId, node);
  // Another context meanwhile: free to go anywhere (the other node, by rotation).
  const others = new Set<string>();
  for (let turn = 2; turn <= 8; turn++) {
    const next = await send(client, userMessage(`turn ${turn}`, first.contextId));
    assert.equal(outputOf(next), `resume ${sessionId} on ${node}`, `turn ${turn}`);
    const other = await send(client, userMessage("elsewhere"));
    others.add(outputOf(other).split(" ").at(-1)!);
  }
  assert.ok(others.size === 2, `fresh contexts spread over both nodes: ${[...others]}`);
});

Deno.test("a follow-up after the session's node stopped fails naming the node, unless it asks to start anew", async () => {
  await using stack = await startSessionStack();
  const client = await agentClient(stack);
  const first = await send(client, userMessage("one"));
  const [, sessionId, , node] = outputOf(first).split(" ");
  const survivor = node === "n1" ? "n2" : "n1";
  await stack.nodes.get(node!)!.stop();

  const lost = await send(client, userMessage("two", first.contextId));
  assert.equal(lost.status?.state, TaskState.TASK_STATE_FAILED);
  assert.equal(
    statusText(lost),
    `Cannot run agent 'agent': Cannot continue session '${sessionId}' as it lives on node ` +
      `'${node}', which is not connected`,
  );
  assert.equal(lost.status?.message?.metadata?.code, "UNAVAILABLE");

  const moved = await send(
    client,
    userMessage("three", first.contextId, { iopOnSessionLost: "start_new" }),
  );
  assert.equal(outputOf(moved), `new ${sessionId} on ${survivor}`, "same id, fresh session");
  const after = await send(client, userMessage("four", first.contextId));
  assert.equal(outputOf(after), `resume ${sessionId} on ${survivor}`);
});

Deno.test("pooled model runs with a session prefer its node but are not pinned to it", async () => {
  await using stack = await startSessionStack();
  const submit = async (sessionId: string) => {
    const handle = await stack.service.submitRun({
      ...runInput({ adapter: "mock", target: "demo", prompt: "hi", sessionId }),
      modelGroup: "chat",
    });
    const done = await handle.done;
    assert.equal(done.type, "completed");
    return handle.nodeId;
  };
  const usual = await submit("");
  assert.equal(await submit(""), usual, "an idle pool picks the same provider");
  const home = usual === "n1" ? "n2" : "n1";
  stack.service.sessionAffinity.remember("m1", home);
  for (let i = 0; i < 5; i++) assert.equal(await submit("m1"), home, "preferred while it has room");
  assert.equal(await submit(""), usual);
  await stack.nodes.get(home)!.stop();
  const elsewhere = await submit("m1");
  assert.notEqual(elsewhere, home, "a model run's session moves with it");
  assert.equal(await submit("m1"), elsewhere);
});

Deno.test("a CLI run through the service gets a session id, and a client-chosen one may not start with '-'", async () => {
  await using stack = await startSessionStack();
  const handle = await stack.service.submitRun(runInput({ adapter: "cli", target: "agent" }));
  let out = "";
  for await (const e of handle.events()) if (e.type === "output") out += e.text;
  assert.match(out.trim(), new RegExp(`^new [0-9a-f-]{36} on ${handle.nodeId}$`));
  assert.throws(
    () => stack.service.submitRun(runInput({ adapter: "cli", target: "agent", sessionId: "-rf" })),
    { name: "IopError", code: "INVALID_ARGUMENT" },
  );
});

Deno.test("OpenAI clients read the session of a CLI model from x-iop-session and continue it on its node", async () => {
  const base = config();
  base.models = [...(base.models as unknown[]), {
    name: "agent",
    route: "direct",
    adapter: "cli",
    target: "agent",
  }];
  const edge = await startEdge({ config: base, http: true });
  try {
    await Promise.all(
      ["n1", "n2"].map((id) => startNode(edge, { id, factories: adapterCatalog({ nodeId: id }) })),
    );
    const ask = async (session?: string) => {
      const res = await fetch(`${edge.url}/v1/chat/completions`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          ...(session ? { "x-iop-session": session } : {}),
        },
        body: JSON.stringify({ model: "agent", messages: [{ role: "user", content: "hi" }] }),
      });
      const body = await res.json();
      return {
        status: res.status,
        session: res.headers.get("x-iop-session"),
        text: String(body.choices?.[0]?.message?.content ?? body.error?.message),
      };
    };
    const first = await ask();
    assert.equal(first.status, 200);
    assert.ok(first.session, "the first answer names its session");
    const [, node] = first.text.match(new RegExp(`^new ${first.session} on (n[12])`)) ?? [];
    assert.ok(node, first.text);
    for (let i = 0; i < 4; i++) {
      const next = await ask(first.session!);
      assert.equal(next.session, first.session);
      assert.match(next.text, new RegExp(`^resume ${first.session} on ${node}`));
    }
    const bad = await ask("-rf");
    assert.equal(bad.status, 400, bad.text);
  } finally {
    await edge.close();
  }
});
