/**
 * Hostile and heavy A2A clients against a real Edge and Node over TCP with a SQLite task store:
 * a flood of non-blocking tasks stays bounded (refused with 429, never an unbounded number of
 * processes) while another tenant is served; the task store's cap drops finished tasks only and
 * refuses new ones when full of running ones; a task's output is capped; a store written before
 * tenants keeps working after its migration.
 */
import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { startTenantEdge } from "./a2a/a2a_edge.ts";

interface RpcAnswer {
  status: number;
  retryAfter: string | null;
  // deno-lint-ignore no-explicit-any
  json: any;
}

async function rpc(url: string, key: string, method: string, params: unknown): Promise<RpcAnswer> {
  const res = await fetch(url, {
    method: "POST",
    headers: {
      "Content-Type": "application/json",
      "A2A-Version": "1.0",
      Authorization: `Bearer ${key}`,
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }),
  });
  return { status: res.status, retryAfter: res.headers.get("Retry-After"), json: await res.json() };
}

function send(text: string, blocking: boolean) {
  return {
    message: { messageId: crypto.randomUUID(), role: "ROLE_USER", parts: [{ text }] },
    configuration: { returnImmediately: !blocking },
  };
}

async function lines(path: string): Promise<string[]> {
  const text = await Deno.readTextFile(path).catch(() => "");
  return text.split("\n").filter((l) => l !== "");
}

const MiB = 1024 * 1024;

Deno.test("500 non-blocking tasks at once stay bounded: 429s, no process per refused task, and another tenant's blocking request completes", async () => {
  await using edge = await startTenantEdge({
    tenants: [
      { name: "flood", keys: ["flood-key"] },
      { name: "calm", keys: ["calm-key"] },
    ],
  });
  const slow = `${edge.url}/a2a/slow`;
  // Warm the path once so the figure below measures the flood, not first-use compilation.
  const warm = await rpc(`${edge.url}/a2a/echo`, "flood-key", "SendMessage", send("warm", true));
  assert.equal(warm.json.result.task.status.state, "TASK_STATE_COMPLETED");
  const rssBefore = Deno.memoryUsage().rss;

  const flood = Array.from(
    { length: 500 },
    (_, i) => rpc(slow, "flood-key", "SendMessage", send(`job ${i}`, false)),
  );
  const calm = rpc(`${edge.url}/a2a/demo`, "calm-key", "SendMessage", send("hello", true));
  const answers = await Promise.all(flood);
  const calmAnswer = await calm;
  const rssAfter = Deno.memoryUsage().rss;

  assert.equal(calmAnswer.status, 200, JSON.stringify(calmAnswer.json));
  assert.equal(calmAnswer.json.result.task.status.state, "TASK_STATE_COMPLETED");

  const accepted = answers.filter((a) => a.status === 200);
  const refused = answers.filter((a) => a.status === 429);
  assert.equal(accepted.length + refused.length, 500, "every answer is a task or a 429");
  assert.ok(accepted.length >= 1 && accepted.length <= 4, `accepted ${accepted.length}`);
  for (const r of refused) {
    assert.equal(r.json.error.code, -32000);
    assert.match(r.json.error.message, /^Overloaded: .*CLI profile 'slow'/);
    assert.ok(Number(r.retryAfter) >= 1);
  }
  // Only the accepted tasks were kept, and only they started a process.
  const acceptedIds = accepted.map((a) => a.json.result.task.id as string);
  const listed = await rpc(slow, "flood-key", "ListTasks", { pageSize: 100 });
  const kept = listed.json.result.tasks.map((t: { id: string }) => t.id);
  assert.deepEqual(kept.sort(), [...acceptedIds].sort());
  assert.equal(edge.tasks.size, accepted.length + 2, "the accepted, the calm and the warm-up");
  let pids: string[] = [];
  for (let i = 0; i < 100 && pids.length < accepted.length; i++) {
    pids = await lines(`${edge.edge.dir}/slow.pids`);
    await new Promise((r) => setTimeout(r, 20));
  }
  await new Promise((r) => setTimeout(r, 200)); // a refused task that spawned would show by now
  pids = await lines(`${edge.edge.dir}/slow.pids`);
  assert.equal(pids.length, accepted.length, "one process per accepted task, none per refused");

  const grewMiB = (rssAfter - rssBefore) / MiB;
  console.log(
    `edge rss before ${(rssBefore / MiB).toFixed(1)} MiB, after 500 sends ${
      (rssAfter / MiB).toFixed(1)
    } MiB (+${grewMiB.toFixed(1)} MiB), accepted ${accepted.length}, refused ${refused.length}`,
  );
  assert.ok(grewMiB < 100, `RSS grew ${grewMiB.toFixed(1)} MiB`);
  for (const id of acceptedIds) await rpc(slow, "flood-key", "CancelTask", { id });
});

Deno.test("at a2a.max_tasks the oldest finished task is purged, running ones never; full of running tasks, a new one gets 429", async () => {
  await using edge = await startTenantEdge({
    tenants: [{ name: "alpha", keys: ["alpha-key"] }],
    a2a: { max_tasks: 4 },
  });
  const slow = `${edge.url}/a2a/slow`;
  const echo = `${edge.url}/a2a/echo`;
  const start = async (url: string, blocking: boolean) => {
    const a = await rpc(url, "alpha-key", "SendMessage", send("a b", blocking));
    assert.equal(a.status, 200, JSON.stringify(a.json));
    return a.json.result.task.id as string;
  };
  const stored = () => {
    const db = new DatabaseSync(edge.storePath, { readOnly: true });
    const rows = db.prepare("SELECT id, state FROM tasks").all() as { id: string; state: string }[];
    db.close();
    return new Map(rows.map((r) => [r.id, r.state]));
  };
  const s1 = await start(slow, false);
  const s2 = await start(slow, false);
  const s3 = await start(slow, false);
  const e1 = await start(echo, true);
  const e2 = await start(echo, true); // the store is full: e1, the oldest finished, goes
  const get = (url: string, id: string) => rpc(url, "alpha-key", "GetTask", { id });
  assert.equal((await get(echo, e1)).json.error?.code, -32001);
  assert.equal((await get(echo, e2)).json.result.status.state, "TASK_STATE_COMPLETED");
  assert.deepEqual([...stored().keys()].sort(), [s1, s2, s3, e2].sort());

  const s4 = await start(slow, false); // e2 goes; now four running tasks
  assert.deepEqual([...stored().keys()].sort(), [s1, s2, s3, s4].sort());
  const refused = await rpc(echo, "alpha-key", "SendMessage", send("no room", true));
  assert.equal(refused.status, 429);
  assert.ok(Number(refused.retryAfter) >= 1);
  assert.equal(refused.json.error.code, -32000);
  assert.equal(
    refused.json.error.message,
    "Overloaded: Cannot create a task as the A2A task store is full: all 4 tasks it keeps " +
      "(a2a.max_tasks = 4) are unfinished",
  );
  assert.equal(refused.json.error.data.reason, "store_full");
  for (const id of [s1, s2, s3, s4]) {
    assert.equal((await get(slow, id)).json.result.status.state, "TASK_STATE_WORKING");
  }

  await rpc(slow, "alpha-key", "CancelTask", { id: s1 });
  const e3 = await start(echo, true); // s1 is finished now: it makes room
  assert.deepEqual([...stored().keys()].sort(), [s2, s3, s4, e3].sort());
  for (const id of [s2, s3, s4]) await rpc(slow, "alpha-key", "CancelTask", { id });
});

Deno.test("output beyond a2a.max_task_bytes is cut with a marker, and the task still completes", async () => {
  await using edge = await startTenantEdge({
    tenants: [{ name: "alpha", keys: ["alpha-key"] }],
    a2a: { max_task_bytes: 1024 },
  });
  const words = Array.from({ length: 400 }, (_, i) => `word${i}`).join(" ");
  const answer = await rpc(`${edge.url}/a2a/echo`, "alpha-key", "SendMessage", send(words, true));
  const task = answer.json.result.task;
  assert.equal(task.status.state, "TASK_STATE_COMPLETED");
  const text: string = task.artifacts[0].parts[0].text;
  const [head, rest] = text.split("\n[output truncated by the Edge:");
  assert.ok(rest, "the marker is there");
  assert.match(rest!, /at most 1024 bytes of output \(a2a\.max_task_bytes\)/);
  assert.ok(new TextEncoder().encode(head).byteLength <= 1024);
  assert.ok(head!.startsWith("word0\nword1\n"));
  const db = new DatabaseSync(edge.storePath, { readOnly: true });
  const row = db.prepare("SELECT length(body) AS n FROM tasks WHERE id = ?").get(task.id) as {
    n: number;
  };
  db.close();
  // The prompt (~3.5 KB), the cut artifact and the agent's reply: bounded, not the full output.
  assert.ok(row.n < 8 * 1024, `stored body ${row.n} bytes`);
});

Deno.test("a task store written before tenants is migrated: its old tasks belong to the tenant default only", async () => {
  await using edge = await startTenantEdge({
    tenants: [{ name: "alpha", keys: ["alpha-key"] }],
    apiKeys: ["legacy-key"],
    prepare(path) {
      const db = new DatabaseSync(path);
      db.exec(`CREATE TABLE tasks (
         id TEXT PRIMARY KEY, agent_id TEXT NOT NULL, context_id TEXT NOT NULL,
         state TEXT NOT NULL, created_at_ms INTEGER NOT NULL, updated_at_ms INTEGER NOT NULL,
         body TEXT NOT NULL);
       CREATE INDEX tasks_by_update ON tasks (updated_at_ms);
       PRAGMA user_version = 1;`);
      const now = Date.now();
      const body = {
        id: "old-task",
        contextId: "old-ctx",
        agentId: "echo",
        status: { state: "completed", timestampMs: now },
        artifacts: [{ artifactId: "a", name: "output", parts: [{ kind: "text", text: "kept" }] }],
        history: [],
        createdAtMs: now,
        runId: "run_old",
      };
      db.prepare("INSERT INTO tasks VALUES (?, ?, ?, ?, ?, ?, ?)").run(
        "old-task",
        "echo",
        "old-ctx",
        "completed",
        now,
        now,
        JSON.stringify(body),
      );
      db.close();
    },
  });
  const echo = `${edge.url}/a2a/echo`;
  const legacy = await rpc(echo, "legacy-key", "GetTask", { id: "old-task" });
  assert.equal(legacy.json.result?.artifacts[0].parts[0].text, "kept", JSON.stringify(legacy.json));
  const alpha = await rpc(echo, "alpha-key", "GetTask", { id: "old-task" });
  assert.equal(alpha.json.error.code, -32001);
  const fresh = await rpc(echo, "alpha-key", "SendMessage", send("new", true));
  assert.equal(fresh.json.result.task.status.state, "TASK_STATE_COMPLETED");
  const db = new DatabaseSync(edge.storePath, { readOnly: true });
  const owners = db.prepare("SELECT id, owner FROM tasks ORDER BY created_at_ms").all();
  db.close();
  assert.deepEqual(owners.map((r) => [r.id, r.owner]), [
    ["old-task", ""],
    [fresh.json.result.task.id, "alpha"],
  ]);
});
