import assert from "node:assert/strict";
import { IopError } from "../../../shared/errors.ts";
import { createLogger } from "../../../shared/log.ts";
import { parseEdgeConfig } from "../config.ts";
import type { NodeLink } from "../ports.ts";
import { EdgeService } from "../service.ts";
import { type AgentStateChange, DomainAgents } from "./domain_agents.ts";

const logger = createLogger("test", { writer: () => {} });

const idleLink: NodeLink = {
  run: () => Promise.resolve(),
  cancel: () => {},
  ack: () => {},
  command: () => Promise.reject(new Error("no commands here")),
  close: () => {},
};

/** One node `n1` offering cli/build, and a `deployer` agent whose `build` runs there. */
function setup() {
  const config = parseEdgeConfig({
    edge: { id: "edge-a" },
    nodes: [{
      id: "n1",
      token: "n1-token",
      adapters: [{
        name: "cli",
        kind: "cli",
        profiles: [{ name: "build", command: "sh", args: ["-c", "echo built"] }],
      }],
    }],
    agents: [{
      id: "deployer",
      kind: "domain",
      commands: [{ name: "build", adapter: "cli", target: "build" }],
    }],
  }, "edge.yaml");
  const service = new EdgeService({ config, logger, version: "1" });
  const agents = new DomainAgents(service);
  const changes: AgentStateChange[] = [];
  agents.subscribe((change) => changes.push(change));
  const connect = () =>
    service.nodeConnected({
      record: service.nodeStore.byName("n1")!,
      link: idleLink,
      version: "1",
      hostname: "h",
    });
  const state = () => agents.list()[0]!;
  return { service, agents, changes, connect, state };
}

Deno.test("an agent is unavailable until a node offering its command connects, and again when it leaves", () => {
  const { service, changes, connect, state } = setup();
  assert.equal(state().state, "unavailable");
  assert.equal(state().detail, "build cannot run: no node offering cli/build is connected (n1)");

  const session = connect();
  assert.equal(state().state, "ready");
  assert.deepEqual(changes.at(-1), { agentId: "deployer", state: "ready", detail: "" });

  service.nodeDisconnected(session, "link lost");
  assert.deepEqual(changes.at(-1), {
    agentId: "deployer",
    state: "unavailable",
    detail: "build cannot run: no node offering cli/build is connected (n1)",
  });

  connect();
  assert.deepEqual(changes.at(-1), { agentId: "deployer", state: "ready", detail: "" });
  assert.equal(changes.length, 3, "each change is published once");
});

Deno.test("a draining node, a refused adapter or an unhealthy one makes the agent unavailable naming why", () => {
  const { service, connect, state } = setup();
  const session = connect();

  service.drainNode("n1", true);
  assert.equal(state().state, "unavailable");
  assert.equal(state().detail, "build cannot run: node n1 is draining");
  service.drainNode("n1", false);
  assert.equal(state().state, "ready");

  service.nodeAdaptersApplied(session, [], { cli: "policy forbids kind 'cli'" });
  assert.equal(
    state().detail,
    "build cannot run: node n1 refused adapter 'cli': policy forbids kind 'cli'",
  );
  service.nodeAdaptersApplied(session, ["cli"], {});
  assert.equal(state().state, "ready");

  service.nodeAdapterHealth(session, "cli", false, "sh not found");
  assert.equal(
    state().detail,
    "build cannot run: node n1 reports adapter 'cli' unhealthy: sh not found",
  );
});

Deno.test("execute refuses a command no node can run with UNAVAILABLE, without turning busy", async () => {
  const { agents, changes, state } = setup();
  await assert.rejects(agents.execute("deployer", "build", ""), (e) => {
    assert.ok(e instanceof IopError);
    assert.equal(e.code, "UNAVAILABLE");
    assert.equal(
      e.message,
      "Cannot run 'build' of agent 'deployer' as no node can run it now: " +
        "no node offering cli/build is connected (n1)",
    );
    return true;
  });
  assert.equal(state().state, "unavailable");
  assert.ok(changes.every((c) => c.state !== "busy"));
});
