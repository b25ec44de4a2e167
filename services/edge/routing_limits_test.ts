import assert from "node:assert/strict";
import { IopError, OverloadedError } from "../../shared/errors.ts";
import { runInput } from "../../shared/run.ts";
import { parseEdgeConfig } from "./config.ts";
import { NodeStore } from "./nodes/node_store.ts";
import type { NodeSession } from "./nodes/registry.ts";
import type { NodeLink, RunSubmission } from "./ports.ts";
import { cliProfileOf, pickNode, type TargetUsage } from "./routing.ts";

const cli = (max?: number) => ({
  name: "cli",
  kind: "cli",
  profiles: [{ name: "agent", command: "sh", ...(max ? { max_concurrency: max } : {}) }],
});

const config = parseEdgeConfig({
  nodes: [
    { id: "a", token: "ta", adapters: [{ name: "mock", kind: "mock" }, cli(1)] },
    { id: "b", token: "tb", adapters: [cli(3)] },
    { id: "c", token: "tc", adapters: [cli()] },
  ],
}, "edge.yaml");
const store = new NodeStore(config.nodes);
const link: NodeLink = {
  run: () => Promise.resolve(),
  cancel: () => {},
  ack: () => {},
  command: () => Promise.reject(new Error("unused")),
  close: () => {},
};

function connect(id: string): NodeSession {
  const record = store.byName(id)!;
  return {
    id,
    alias: record.alias,
    record,
    link,
    version: "1",
    hostname: "h",
    connectedAtMs: 0,
    lastSeenMs: 0,
    inFlight: 0,
    draining: false,
    adapters: [],
    wantedConfigVersion: 1,
    configVersion: 1,
  };
}

function sub(partial: Partial<RunSubmission> = {}): RunSubmission {
  return runInput({ adapter: "cli", target: "agent", ...partial });
}

/** Usage from a table of `node/adapter/target` counts. */
function usageOf(counts: Record<string, number>): TargetUsage {
  return (node, adapter, target) => counts[`${node}/${adapter}/${target}`] ?? 0;
}

Deno.test("cliProfileOf() finds a profile of an enabled CLI adapter only", () => {
  const a = store.byName("a")!;
  assert.equal(cliProfileOf(a, "cli", "agent")?.maxConcurrency, 1);
  assert.equal(cliProfileOf(store.byName("c")!, "cli", "agent")?.maxConcurrency, 2);
  assert.equal(cliProfileOf(a, "cli", "other"), undefined);
  assert.equal(cliProfileOf(a, "mock", "agent"), undefined);
});

Deno.test("pickNode() skips nodes whose CLI profile is at its max_concurrency", () => {
  const sessions = ["a", "b"].map(connect);
  const usage = usageOf({ "a/cli/agent": 1, "b/cli/agent": 2 });
  for (let i = 0; i < 4; i++) {
    assert.equal(pickNode(sessions, store, sub(), { usage }).id, "b");
  }
  // A preferred node without room is passed over too.
  assert.equal(pickNode(sessions, store, sub(), { usage, preferNode: "a" }).id, "b");
});

Deno.test("pickNode() refuses with OVERLOADED naming the profile and each limit when all are full", () => {
  const sessions = ["a", "b", "c"].map(connect);
  const usage = usageOf({ "a/cli/agent": 1, "b/cli/agent": 3, "c/cli/agent": 2 });
  assert.throws(() => pickNode(sessions, store, sub(), { usage }), (err: unknown) => {
    assert.ok(err instanceof OverloadedError);
    assert.equal(err.code, "OVERLOADED");
    assert.equal(err.retryAfterSeconds, 5);
    assert.equal(
      err.message,
      "Cannot run CLI profile 'agent' of adapter 'cli' as it is at its limit on every node " +
        "offering it: node 'a' runs 1 of max_concurrency 1, node 'b' runs 3 of max_concurrency " +
        "3, node 'c' runs 2 of max_concurrency 2",
    );
    return true;
  });
  // Without usage there is no slot check (and a mock target is never checked).
  assert.ok(pickNode(sessions, store, sub()));
  assert.equal(pickNode(sessions, store, sub({ adapter: "mock" }), { usage }).id, "a");
});

Deno.test("pickNode() refuses a pinned run when its node is full, naming the held session", () => {
  const sessions = ["a", "b"].map(connect);
  const usage = usageOf({ "a/cli/agent": 1 });
  assert.throws(
    () => pickNode(sessions, store, sub({ node: "a" }), { usage, heldSession: "s-1" }),
    (err: unknown) => {
      assert.ok(err instanceof OverloadedError);
      assert.equal(
        err.message,
        "Cannot run CLI profile 'agent' of adapter 'cli' as it is at its limit on its node: " +
          "node 'a' runs 1 of max_concurrency 1; session 's-1' stays on that node, retry later",
      );
      return true;
    },
  );
  assert.equal(pickNode(sessions, store, sub({ node: "b" }), { usage }).id, "b");
  // Not connected stays UNAVAILABLE, not OVERLOADED.
  assert.throws(
    () => pickNode([connect("b")], store, sub({ node: "a" }), { usage }),
    (err: unknown) => err instanceof IopError && err.code === "UNAVAILABLE",
  );
});
