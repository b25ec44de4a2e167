/**
 * A run's whole output, end to end: a CLI profile printing far more than the 2,000-character
 * summary, read back from the Node's history through the console's `/history <node> <run-id>`
 * and the Edge's `GET /api/iop/nodes/{node}/runs/{runId}/output`; and a domain agent turning
 * `unavailable` when its only node leaves, `ready` when it returns.
 */
import assert from "node:assert/strict";
import { DomainAgents } from "../services/edge/agents/domain_agents.ts";
import { OpsConsole } from "../services/edge/console/console.ts";
import { startNode, startStack } from "./stack.ts";
import { TextLog, until } from "./util.ts";

const STEPS = 300;
/** What the `build` profile prints: about 10,000 characters. */
const BUILD_OUTPUT = Array.from({ length: STEPS }, (_, i) => `build step ${i}: compiling module\n`)
  .join("");

const CONFIG = {
  edge: { id: "edge-out" },
  nodes: [{
    id: "n1",
    token: "t1",
    adapters: [{
      name: "cli",
      kind: "cli",
      profiles: [{
        name: "build",
        command: "sh",
        args: [
          "-c",
          `i=0; while [ $i -lt ${STEPS} ]; do echo "build step $i: compiling module"; ` +
          "i=$((i+1)); done",
        ],
      }],
    }],
  }],
  agents: [{
    id: "builder",
    kind: "domain",
    commands: [{ name: "build", adapter: "cli", target: "build" }],
  }],
};

async function setup() {
  const edge = await startStack({ config: CONFIG, http: true });
  const agents = new DomainAgents(edge.service);
  const screen = new TextLog();
  const ops = new OpsConsole(edge.service, screen.append, agents);
  return { edge, agents, screen, ops, [Symbol.asyncDispose]: edge.close };
}

Deno.test("a run's whole output is read back by /history <node> <run-id> and over HTTP", async () => {
  await using s = await setup();
  const outcome = await s.agents.execute("builder", "build", "");
  assert.equal(outcome.status, "succeeded");
  assert.ok(BUILD_OUTPUT.length > 2_000 && outcome.summary.length <= 2_000);

  await s.ops.execute(`/history n1 ${outcome.runId}`);
  assert.equal(s.screen.take(), BUILD_OUTPUT);
  await s.ops.execute("/history n1 run_unknown");
  assert.equal(s.screen.take(), "no run 'run_unknown' in the history of node n1\n");
  await s.ops.execute("/history n1 5");
  assert.match(s.screen.take(), new RegExp(outcome.runId));

  const res = await fetch(`${s.edge.url}/api/iop/nodes/n1/runs/${outcome.runId}/output`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type") ?? "", /^text\/plain/);
  assert.equal(res.headers.get("x-iop-output-truncated"), "false");
  assert.equal(await res.text(), BUILD_OUTPUT);

  const unknownRun = await fetch(`${s.edge.url}/api/iop/nodes/n1/runs/run_unknown/output`);
  assert.equal(unknownRun.status, 404);
  assert.equal(
    await unknownRun.text(),
    "Cannot find run 'run_unknown' in the history of node 'n1'\n",
  );
  const unknownNode = await fetch(`${s.edge.url}/api/iop/nodes/ghost/runs/r/output`);
  assert.equal(unknownNode.status, 404);
  assert.match(await unknownNode.text(), /^NOT_FOUND: Cannot find node 'ghost'/);
});

Deno.test("a domain agent is unavailable while its only node is away, ready when it is back", async () => {
  await using s = await setup();
  const changes: string[] = [];
  s.agents.subscribe((c) => changes.push(`${c.state}: ${c.detail}`));
  assert.equal(s.agents.list()[0]?.state, "ready");

  await s.edge.nodes.get("n1")!.stop();
  await until("the agent to turn unavailable", () => changes.length > 0);
  assert.deepEqual(changes, [
    "unavailable: build cannot run: no node offering cli/build is connected (n1)",
  ]);
  assert.equal(s.agents.list()[0]?.state, "unavailable");
  await s.ops.execute("/agents");
  assert.match(s.screen.take(), /^builder\s+unavailable\s+build\s+-\s+build cannot run: /m);

  await startNode(s.edge, { id: "n1" });
  await until("the agent to turn ready", () => changes.length > 1);
  assert.deepEqual(changes.slice(1), ["ready: "]);
  const outcome = await s.agents.execute("builder", "build", "");
  assert.equal(outcome.status, "succeeded");
});
