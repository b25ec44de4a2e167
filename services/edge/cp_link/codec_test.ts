import assert from "node:assert/strict";
import type { ResourceStatus, StatusSnapshot } from "../ports.ts";
import { toRelayedEvent, toStatusResponse } from "./codec.ts";
import { BUCKET_BOUNDS_MS, bucketOf, RunCounters } from "./run_counters.ts";

const WHY =
  "profiles[0].command: 'bash' is not allowed on this node (policy.cli.commands allows: sh)";

Deno.test("node_config_applied relays what the node built and why it refused the rest", () => {
  const relayed = toRelayedEvent({
    type: "node_config_applied",
    atMs: 5,
    nodeId: "n1",
    adapters: ["mock", "llm"],
    rejected: { cli: WHY, x: "unknown adapter kind 'x'" },
  });
  assert.ok(relayed?.event.case === "node");
  assert.deepEqual(
    [relayed.event.value.nodeId, relayed.event.value.kind, relayed.event.value.detail],
    [
      "n1",
      "adapters_applied",
      `mock, llm; refused cli: ${WHY}; refused x: unknown adapter kind 'x'`,
    ],
  );
  const none = toRelayedEvent({
    type: "node_config_applied",
    atMs: 5,
    nodeId: "n1",
    adapters: [],
    rejected: { cli: WHY },
  });
  assert.ok(none?.event.case === "node");
  assert.equal(none.event.value.detail, `no adapters; refused cli: ${WHY}`);
});

Deno.test("a resource its node refused reaches the Control Plane as not enabled", () => {
  const resource = (id: string, refused: string): ResourceStatus => ({
    kind: "adapter",
    id,
    adapter: id,
    adapterKind: "cli",
    target: "",
    modelGroup: "",
    maxConcurrency: 0,
    inFlight: 0,
    queued: 0,
    enabled: true,
    refused,
  });
  const snapshot: StatusSnapshot = {
    edgeId: "e1",
    version: "1",
    startedAtMs: 0,
    runsInFlight: 0,
    nodes: [{
      id: "n1",
      alias: "",
      connected: true,
      draining: false,
      version: "1",
      hostname: "h",
      connectedAtMs: 0,
      lastSeenMs: 0,
      inFlight: 0,
      configVersion: 2,
      wantedConfigVersion: 2,
      resources: [resource("ok", ""), resource("cli", WHY)],
    }],
  };
  const status = toStatusResponse(snapshot, [], 0);
  assert.deepEqual(status.nodes[0]!.resources.map((r) => [r.id, r.enabled]), [
    ["ok", true],
    ["cli", false],
  ]);
});

Deno.test("the status report carries each pool's counters, in-flight runs and its providers' queue", () => {
  const provider = (id: string, modelGroup: string, queued: number): ResourceStatus => ({
    kind: "provider",
    id,
    adapter: "mock",
    adapterKind: "mock",
    target: id,
    modelGroup,
    maxConcurrency: 2,
    inFlight: 0,
    queued,
    enabled: true,
    refused: "",
  });
  const snapshot: StatusSnapshot = {
    edgeId: "e1",
    version: "1",
    startedAtMs: 0,
    runsInFlight: 1,
    nodes: [{
      id: "n1",
      alias: "",
      connected: true,
      draining: false,
      version: "1",
      hostname: "h",
      connectedAtMs: 0,
      lastSeenMs: 0,
      inFlight: 1,
      configVersion: 1,
      wantedConfigVersion: 1,
      resources: [provider("p1", "chat", 2), provider("p2", "chat", 1), provider("p3", "", 0)],
    }],
  };
  const counters = new RunCounters();
  counters.started("chat");
  counters.started("chat");
  counters.finished("chat", { status: "completed", latencyMs: 20, ttftMs: 4, tokensOut: 9 });
  counters.started("cli/build");
  const status = toStatusResponse(snapshot, [], 0, counters.snapshot());
  assert.deepEqual(status.bucketBoundsMs, [...BUCKET_BOUNDS_MS]);
  assert.deepEqual(
    status.pools.map((
      p,
    ) => [p.pool, p.runsStarted, p.runsFinished, p.tokensOut, p.inFlight, p.queued]),
    [
      ["chat", 2n, 1n, 9n, 1, 3],
      ["cli/build", 1n, 0n, 0n, 1, 0],
      ["p3", 0n, 0n, 0n, 0, 0],
    ],
  );
  assert.equal(status.pools[0]!.latencyBuckets[bucketOf(20)], 1n);
  assert.equal(status.pools[2]!.ttftBuckets.length, BUCKET_BOUNDS_MS.length + 1);
});
