/**
 * The fleet report with a standby edge: nodes registered with the active edge are neither down
 * on the standby nor counted twice.
 */
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { EdgeViewSchema } from "../../proto/gen/iop/v1/control_pb.ts";
import { buildFleetReport } from "./report.ts";

/** An attached (or not) edge whose status lists `nodes` as connected (true) or not. */
function edge(edgeId: string, nodes: Record<string, boolean>, connected = true) {
  return create(EdgeViewSchema, {
    edgeId,
    connected,
    status: { nodes: Object.entries(nodes).map(([id, up]) => ({ id, connected: up })) },
  });
}

Deno.test("a standby edge whose nodes are registered with its active edge is healthy, its nodes counted once", () => {
  const report = buildFleetReport([
    edge("edge-a", { "node-a1": true, "node-a2": true }),
    edge("edge-a-standby", { "node-a1": false, "node-a2": false }),
    edge("edge-b", { "node-b1": true }),
  ], 0);
  const standby = report.perEdge.find((e) => e.edgeId === "edge-a-standby")!;
  assert.equal(standby.health, "healthy");
  assert.deepEqual(standby.nodes, { connected: 0, known: 2, draining: 0, elsewhere: 2 });
  assert.deepEqual(report.nodes, { connected: 3, known: 3 });
});

Deno.test("a node connected nowhere degrades every edge that knows it", () => {
  const report = buildFleetReport([
    edge("edge-a", { "node-a1": true, "node-a2": false }),
    edge("edge-a-standby", { "node-a1": false, "node-a2": false }),
  ], 0);
  assert.deepEqual(report.perEdge.map((e) => [e.edgeId, e.health, e.nodes.elsewhere]), [
    ["edge-a", "degraded", 0],
    ["edge-a-standby", "degraded", 1],
  ]);
  assert.deepEqual(report.nodes, { connected: 1, known: 3 });
});

Deno.test("a node shown connected by an edge that is no longer attached is not elsewhere", () => {
  // edge-a was killed: its last status still shows its nodes, but nobody serves them there.
  const report = buildFleetReport([
    edge("edge-a", { "node-a1": true }, false),
    edge("edge-a-standby", { "node-a1": false }),
  ], 0);
  const standby = report.perEdge.find((e) => e.edgeId === "edge-a-standby")!;
  assert.equal(standby.health, "degraded");
  assert.equal(standby.nodes.elsewhere, 0);
});
