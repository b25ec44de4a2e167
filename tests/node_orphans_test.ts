/**
 * A real Node process (`deno run services/node/main.ts`) against an in-test Edge: a CLI run's
 * process group outlives a `kill -9` of its Node, and the restarted Node kills it.
 * @module
 */
import { dialTlsConfig } from "./tls_fixture.ts";
import assert from "node:assert/strict";
import { runInput } from "../shared/run.ts";
import { startEdge, type TestEdge } from "./stack.ts";
import { NodeProcess } from "./node_process.ts";
import { until } from "./util.ts";

/** True while `pid` is a live process (a zombie has already exited and counts as gone). */
function alive(pid: number): boolean {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    const state = stat.slice(stat.lastIndexOf(")") + 2).charAt(0);
    return state !== "Z" && state !== "X";
  } catch {
    return false;
  }
}

/** Resolves once the Edge saw node n1 apply its config, i.e. the node is ready for runs. */
function configApplied(edge: TestEdge): { ready: Promise<void>; unsubscribe(): void } {
  const ready = Promise.withResolvers<void>();
  const unsubscribe = edge.service.subscribe((event) => {
    if (event.type === "node_config_applied" && event.nodeId === "n1") ready.resolve();
  });
  return { ready: ready.promise, unsubscribe };
}

async function startNode(edge: TestEdge, configFile: string): Promise<NodeProcess> {
  const applied = configApplied(edge);
  const node = new NodeProcess(configFile);
  try {
    const late = node.child.status.then((s) => {
      throw new Error(`node exited with ${s.code} before registering:\n${node.stderr.text}`);
    });
    await Promise.race([applied.ready, late]);
  } catch (err) {
    await node[Symbol.asyncDispose]();
    throw err;
  } finally {
    applied.unsubscribe();
  }
  return node;
}

Deno.test("a node restarted after kill -9 kills the CLI process group its predecessor left", async () => {
  await using edge = await startEdge({
    config: (dir) => ({
      edge: { id: "edge-orphans" },
      nodes: [{
        id: "n1",
        token: "n1-token",
        adapters: [{
          name: "cli",
          kind: "cli",
          profiles: [{
            name: "tree",
            command: "sh",
            // The shell (the group leader) and a background grandchild record their pids.
            args: ["-c", `echo $$ >> ${dir}/pids; sleep 300 & echo $! >> ${dir}/pids; wait`],
            timeout_ms: 60_000,
          }],
        }],
      }],
    }),
  });
  const configFile = `${edge.dir}/node.yaml`;
  const pidFile = `${edge.dir}/pids`;
  // JSON is valid YAML.
  await Deno.writeTextFile(
    configFile,
    JSON.stringify({
      node: { id: "n1", token: "n1-token" },
      edge: {
        address: `127.0.0.1:${edge.wire.port}`,
        backoff_initial_ms: 50,
        backoff_max_ms: 300,
        tls: await dialTlsConfig("node"),
      },
      http: { host: "127.0.0.1", port: 0 },
      history: { path: `${edge.dir}/node/history.db` },
      policy: { adapter_kinds: ["cli"], cli: { commands: ["sh"], cwd: ["."] } },
    }),
  );
  let pids: number[] = [];
  let node = await startNode(edge, configFile);
  try {
    const run = await edge.service.submitRun({
      ...runInput({ adapter: "cli", target: "tree" }),
      node: "n1",
    });
    await until("the CLI run to start", async () => {
      const text = await Deno.readTextFile(pidFile).catch(() => "");
      pids = text.trim().split("\n").filter((l) => l !== "").map(Number);
      return pids.length === 2;
    }, 10_000);
    const [leader, grandchild] = pids as [number, number];
    // The group is recorded just after the spawn; wait for it so the kill cannot precede it.
    const record = `${edge.dir}/node/cli-groups/${leader}.json`;
    await until("the group record", () => Deno.stat(record).then(() => true, () => false), 5_000);

    await node[Symbol.asyncDispose](); // kill -9
    assert.equal((await run.done).type, "failed", "the Edge lost the run with its node");
    // The problem: nothing stopped the run's processes when their node died.
    assert.ok(alive(leader) && alive(grandchild), "the CLI group died with its node");

    node = await startNode(edge, configFile);
    const [line] = await node.stderr.waitFor(
      /\{[^\n]*"msg":"orphaned CLI process group killed"[^\n]*\}/,
    );
    await until(
      "the orphaned group to be killed",
      () => !alive(leader) && !alive(grandchild),
      3_000,
    );
    const warn = JSON.parse(line);
    assert.deepEqual(
      [warn.level, warn.pgid, warn.run_id, warn.profile, warn.adapter, warn.node_id],
      ["warn", leader, run.runId, "tree", "cli", "n1"],
    );
    assert.ok(!(await Deno.stat(record).then(() => true, () => false)), "record left behind");
    // Reaping happens before the node registers, so the Edge never sees the orphan as capacity.
    const registered = node.stderr.text.indexOf('"msg":"registered with edge"');
    assert.ok(registered > node.stderr.text.indexOf(line), "reaped after registering");
  } finally {
    await node[Symbol.asyncDispose]();
    for (const pid of pids) {
      try {
        Deno.kill(pid, "SIGKILL");
      } catch {
        // Already gone, as the test expects.
      }
    }
  }
});
