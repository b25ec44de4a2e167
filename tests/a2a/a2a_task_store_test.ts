import assert from "node:assert/strict";
import { createLogger } from "../../shared/log.ts";
import { A2aTaskManager } from "../../services/edge/a2a/task_manager.ts";
import type { A2aTask } from "../../services/edge/a2a/task_model.ts";
import { startA2aEdge } from "./a2a_edge.ts";
import { openA2aTaskStore } from "../../services/edge/store/a2a_task_store.ts";

function task(id: string, state: A2aTask["status"]["state"], atMs: number): A2aTask {
  return {
    id,
    contextId: `ctx-${id}`,
    agentId: "echo",
    owner: "anonymous",
    status: { state, timestampMs: atMs },
    artifacts: [{
      artifactId: `${id}-output`,
      name: "output",
      parts: [{ kind: "text", text: "out" }],
    }],
    history: [{
      messageId: "m1",
      role: "user",
      parts: [{ kind: "text", text: "hi" }],
      contextId: `ctx-${id}`,
      taskId: id,
    }],
    createdAtMs: atMs,
    runId: "run_1",
  };
}

const quiet = createLogger("test", { level: "error" });
const echo = { agentId: "echo", owner: "anonymous" };
const noRuns = {
  submitRun: () => Promise.reject(new Error("no runs in this test")),
  cancelRun: () => false,
};

Deno.test("the task store keeps tasks with history and artifacts across reopening the file", async () => {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/a2a.db`;
  const first = openA2aTaskStore(path);
  first.put(task("t1", "working", 1000));
  first.put({ ...task("t1", "completed", 2000) });
  first.close();
  const again = openA2aTaskStore(path);
  const loaded = again.loadAll();
  assert.equal(loaded.length, 1);
  assert.equal(loaded[0]!.status.state, "completed");
  assert.equal(loaded[0]!.history[0]!.parts[0]!.kind, "text");
  assert.equal(loaded[0]!.artifacts[0]!.artifactId, "t1-output");
  assert.equal(again.loadAll()[0]!.owner, "anonymous");
  assert.equal(again.deleteFinishedBefore(2001), 1);
  assert.deepEqual(again.loadAll(), []);
  again.close();
  await Deno.remove(dir, { recursive: true });
});

Deno.test("recover() marks tasks a previous edge left unfinished failed and drops expired ones", async () => {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/a2a.db`;
  const crashed = openA2aTaskStore(path);
  const now = 10_000_000;
  crashed.put(task("running", "working", now - 1000));
  crashed.put(task("done", "completed", now - 1000));
  crashed.put(task("ancient", "completed", now - 120_000));
  crashed.close();

  const manager = new A2aTaskManager({
    service: noRuns,
    store: openA2aTaskStore(path),
    logger: quiet,
    retentionMs: 60_000,
    now: () => now,
  });
  assert.equal(manager.recover(), 1);
  const failed = manager.get(echo, "running")!;
  assert.equal(failed.status.state, "failed");
  const reason = failed.status.message!.parts[0]!;
  assert.ok(reason.kind === "text" && /Edge restarted/.test(reason.text));
  assert.equal(manager.get(echo, "done")!.status.state, "completed");
  assert.equal(manager.get(echo, "ancient"), undefined);
  manager.close();

  const reopened = openA2aTaskStore(path);
  assert.deepEqual(reopened.loadAll().map((t) => [t.id, t.status.state]), [
    ["running", "failed"],
    ["done", "completed"],
  ]);
  reopened.close();
  await Deno.remove(dir, { recursive: true });
});

Deno.test("after a restart GetTask over HTTP answers the unfinished task as failed with a reason", async () => {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/a2a.db`;
  const crashed = openA2aTaskStore(path);
  crashed.put(task("lost", "working", Date.now()));
  crashed.close();
  {
    await using stack = await startA2aEdge(openA2aTaskStore(path));
    const res = await fetch(`${stack.url}/a2a/echo`, {
      method: "POST",
      headers: { "A2A-Version": "1.0", "Content-Type": "application/json" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "GetTask", params: { id: "lost" } }),
    });
    const { result } = await res.json();
    assert.equal(result.status.state, "TASK_STATE_FAILED");
    assert.match(result.status.message.parts[0].text, /Edge restarted while this task was running/);
    assert.equal(result.artifacts[0].parts[0].text, "out");
  }
  await Deno.remove(dir, { recursive: true });
});
