/**
 * The unmodified `@a2a-js/sdk` 1.3.0 client against a real Edge HTTP server and a real Node
 * (mock and CLI adapters) over TCP.
 */
import assert from "node:assert/strict";
import { Role, TaskState } from "@a2a-js/sdk";
import { ClientFactory } from "@a2a-js/sdk/client";
import { memoryTaskStore } from "../../services/edge/a2a/task_store.ts";
import { startA2aEdge } from "./a2a_edge.ts";

type Client = Awaited<ReturnType<ClientFactory["createFromUrl"]>>;
type SendParams = Parameters<Client["sendMessage"]>[0];

function userMessage(text: string, contextId = ""): SendParams {
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
      metadata: undefined,
      extensions: [],
      referenceTaskIds: [],
    },
    configuration: undefined,
    metadata: undefined,
  };
}

function textOf(parts: { content?: { $case: string; value: unknown } | undefined }[]): string {
  return parts.map((p) => p.content?.$case === "text" ? String(p.content.value) : "").join("");
}

async function agentClient(baseUrl: string, agent?: string): Promise<Client> {
  const factory = new ClientFactory();
  return agent === undefined
    ? await factory.createFromUrl(baseUrl)
    : await factory.createFromUrl(baseUrl, `/a2a/${agent}/.well-known/agent-card.json`);
}

Deno.test("the SDK reads the default card and a per-agent card with a 1.0 JSON-RPC interface", async () => {
  await using stack = await startA2aEdge(memoryTaskStore());
  const byDefault = await agentClient(stack.url);
  const card = await byDefault.getAgentCard();
  assert.equal(card.name, "Echo");
  assert.equal(card.capabilities?.streaming, true);
  assert.equal(byDefault.protocolVersion, "1.0");
  assert.deepEqual(card.supportedInterfaces[0], {
    url: `${stack.url}/a2a/echo`,
    protocolBinding: "JSONRPC",
    protocolVersion: "1.0",
  });
  const demo = await (await agentClient(stack.url, "demo")).getAgentCard();
  assert.equal(demo.name, "Demo");
  assert.equal(demo.skills[0]?.id, "demo");
  assert.deepEqual(demo.defaultOutputModes, ["text/plain"]);
});

Deno.test("SendMessage to a mock agent blocks until the task completes with its output", async () => {
  await using stack = await startA2aEdge(memoryTaskStore());
  const client = await agentClient(stack.url, "demo");
  const result = await client.sendMessage(userMessage("hello there"));
  assert.ok("status" in result, "a task, not a message");
  assert.equal(result.status?.state, TaskState.TASK_STATE_COMPLETED);
  assert.ok(textOf(result.artifacts[0]!.parts).length > 0);
  assert.equal(result.history[0]?.role, Role.ROLE_USER);
  assert.equal(textOf(result.history[0]!.parts), "hello there");
  assert.equal(result.history.at(-1)?.role, Role.ROLE_AGENT);
});

Deno.test("SendStreamingMessage streams a CLI task from submitted to completed, then GetTask and ListTasks find it", async () => {
  await using stack = await startA2aEdge(memoryTaskStore());
  const client = await agentClient(stack.url, "echo");
  const cases: string[] = [];
  const states: TaskState[] = [];
  let streamed = "";
  let taskId = "";
  let lastChunk = false;
  for await (const event of client.sendMessageStream(userMessage("alpha beta gamma"))) {
    const p = event.payload!;
    cases.push(p.$case);
    if (p.$case === "task") {
      taskId = p.value.id;
      states.push(p.value.status!.state);
    } else if (p.$case === "statusUpdate") {
      states.push(p.value.status!.state);
    } else if (p.$case === "artifactUpdate") {
      streamed += textOf(p.value.artifact!.parts);
      lastChunk ||= p.value.lastChunk;
    }
  }
  assert.equal(cases[0], "task");
  assert.equal(states[0], TaskState.TASK_STATE_SUBMITTED);
  assert.ok(states.includes(TaskState.TASK_STATE_WORKING));
  assert.equal(states.at(-1), TaskState.TASK_STATE_COMPLETED);
  assert.equal(streamed, "alpha\nbeta\ngamma\n");
  assert.ok(lastChunk);

  const got = await client.getTask({ tenant: "", id: taskId, historyLength: undefined });
  assert.equal(got.status?.state, TaskState.TASK_STATE_COMPLETED);
  assert.equal(textOf(got.artifacts[0]!.parts), "alpha\nbeta\ngamma\n");

  const listed = await client.listTasks({
    tenant: "",
    contextId: got.contextId,
    status: TaskState.TASK_STATE_UNSPECIFIED,
    pageSize: undefined,
    pageToken: "",
    historyLength: undefined,
    statusTimestampAfter: undefined,
    includeArtifacts: true,
  });
  assert.deepEqual(listed.tasks.map((t) => t.id), [taskId]);
  assert.equal(listed.totalSize, 1);

  // The stream is over; a resubscription still gets the finished task.
  const again = [];
  for await (const e of client.resubscribeTask({ tenant: "", id: taskId })) again.push(e);
  assert.equal(again[0]?.payload?.$case, "task");
});

function pidGone(pid: number): boolean {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    return stat.split(") ")[1]?.startsWith("Z") ?? false;
  } catch {
    return true;
  }
}

/** Live (not zombie: killed, awaiting its reaper) processes of a process group. */
async function liveGroupMembers(pgid: number): Promise<number[]> {
  const out = await new Deno.Command("pgrep", { args: ["-g", String(pgid)] }).output();
  return new TextDecoder().decode(out.stdout).split("\n").filter((l) => l !== "").map(Number)
    .filter((pid) => !pidGone(pid));
}

Deno.test("CancelTask cancels a long CLI task and its whole process group is gone", async () => {
  await using stack = await startA2aEdge(memoryTaskStore());
  const client = await agentClient(stack.url, "count");
  let taskId = "";
  let steps = 0;
  const stream = client.sendMessageStream(userMessage("go"));
  for await (const event of stream) {
    const p = event.payload!;
    if (p.$case === "task") taskId = p.value.id;
    if (p.$case === "artifactUpdate") steps++;
    if (steps === 2) break; // the CLI is running and printing
  }
  const pid = Number((await Deno.readTextFile(`${stack.dir}/count.pid`)).trim());
  assert.ok(pid > 0);
  assert.ok(!pidGone(pid), "the CLI runs before the cancel");
  assert.ok((await liveGroupMembers(pid)).includes(pid));

  const canceled = await client.cancelTask({ tenant: "", id: taskId, metadata: undefined });
  assert.equal(canceled.status?.state, TaskState.TASK_STATE_CANCELED);
  assert.ok(pidGone(pid), "the CLI process is gone after the cancel");
  assert.deepEqual(await liveGroupMembers(pid), [], "no process of its group is left");

  const got = await client.getTask({ tenant: "", id: taskId, historyLength: 0 });
  assert.equal(got.status?.state, TaskState.TASK_STATE_CANCELED);
  assert.equal(got.history.length, 0);
  await assert.rejects(
    client.cancelTask({ tenant: "", id: taskId, metadata: undefined }),
    (err: Error & { envelopeCode?: number }) => err.envelopeCode === -32002,
  );
});

Deno.test("a failing CLI task ends failed with its exit code, and stderr reached the status messages", async () => {
  await using stack = await startA2aEdge(memoryTaskStore());
  const client = await agentClient(stack.url, "fail");
  const statusTexts: string[] = [];
  let final: TaskState | undefined;
  for await (const event of client.sendMessageStream(userMessage("x"))) {
    const p = event.payload!;
    if (p.$case === "statusUpdate") {
      final = p.value.status!.state;
      if (p.value.status?.message) statusTexts.push(textOf(p.value.status.message.parts));
    }
  }
  assert.equal(final, TaskState.TASK_STATE_FAILED);
  assert.ok(statusTexts.includes("thinking hard"), `stderr line in ${JSON.stringify(statusTexts)}`);
  assert.match(statusTexts.at(-1)!, /exited with code 3: disk full/);
});

Deno.test("a follow-up message with the same contextId resumes the CLI session", async () => {
  await using stack = await startA2aEdge(memoryTaskStore());
  const client = await agentClient(stack.url, "session");
  const first = await client.sendMessage(userMessage("one"));
  assert.ok("status" in first);
  assert.equal(textOf(first.artifacts[0]!.parts), "new:one");
  const second = await client.sendMessage(userMessage("two", first.contextId));
  assert.ok("status" in second);
  assert.equal(second.contextId, first.contextId);
  assert.notEqual(second.id, first.id);
  // The session is the Edge's own id for the context, kept in the task's metadata.
  const sessionId = first.metadata?.iopSessionId;
  assert.equal(typeof sessionId, "string");
  assert.notEqual(sessionId, first.contextId);
  assert.equal(second.metadata?.iopSessionId, sessionId);
  assert.equal(textOf(second.artifacts[0]!.parts), `resume:${sessionId}:two`);
});

Deno.test("the SDK sees TaskNotFound for an unknown task and a failed task when no node serves the agent", async () => {
  await using stack = await startA2aEdge(memoryTaskStore());
  const client = await agentClient(stack.url, "nowhere");
  await assert.rejects(
    client.getTask({ tenant: "", id: "no-such-task", historyLength: undefined }),
    (err: Error) => err.name === "TaskNotFoundError",
  );
  const result = await client.sendMessage(userMessage("hi"));
  assert.ok("status" in result);
  assert.equal(result.status?.state, TaskState.TASK_STATE_FAILED);
  assert.match(
    textOf(result.status!.message!.parts),
    /No node offers adapter 'cli' with target 'missing'/,
  );
});

Deno.test("a task silent for http.sse_keepalive_ms gets keep-alive comments on its stream; the SDK reads past them", async () => {
  await using stack = await startA2aEdge(memoryTaskStore(), [], { sseKeepaliveMs: 100 });
  const client = await agentClient(stack.url, "pause");
  let streamed = "";
  let final: TaskState | undefined;
  for await (const event of client.sendMessageStream(userMessage("go"))) {
    const p = event.payload!;
    if (p.$case === "artifactUpdate") streamed += textOf(p.value.artifact!.parts);
    if (p.$case === "statusUpdate") final = p.value.status!.state;
  }
  assert.equal(streamed, "before\nafter\n");
  assert.equal(final, TaskState.TASK_STATE_COMPLETED);

  const res = await fetch(`${stack.url}/a2a/pause`, {
    method: "POST",
    headers: { "content-type": "application/json", "a2a-version": "1.0" },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "SendStreamingMessage",
      params: {
        message: { messageId: crypto.randomUUID(), role: "ROLE_USER", parts: [{ text: "go" }] },
      },
    }),
  });
  const raw = await res.text();
  const comments = raw.split("\n\n").filter((e) => e === ": keep-alive").length;
  assert.ok(comments >= 2, `about five in the 600 ms pause, got ${comments}:\n${raw}`);
});
