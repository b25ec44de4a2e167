import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import {
  EdgeCommandProgressSchema,
  EdgeCommandResultSchema,
} from "../../../proto/gen/iop/v1/control_pb.ts";
import type { EdgeCommandState, FleetCommand } from "../commands.ts";
import { commandJson, runOutputPath } from "./json.ts";

function commandWith(edges: Record<string, EdgeCommandState>): FleetCommand {
  return {
    commandId: "cmd_1",
    actor: "admin",
    via: "http",
    kind: "run",
    detail: "run cli/build",
    createdAtMs: 1,
    finishedAtMs: 0,
    outcome: "running",
    edges: new Map(Object.entries(edges)),
  };
}

Deno.test("commandJson gives each edge the run it started and the edge path of its output", () => {
  const json = commandJson(commandWith({
    "edge-a": {
      status: "succeeded",
      progress: [],
      result: create(EdgeCommandResultSchema, {
        commandId: "cmd_1",
        status: "succeeded",
        runId: "run_abc",
        nodeId: "n 1",
      }),
      late: false,
      learnedAtMs: 5,
    },
    // Still running: the run is known from its progress.
    "edge-b": {
      status: "running",
      progress: [
        create(EdgeCommandProgressSchema, { message: "queued" }),
        create(EdgeCommandProgressSchema, { message: "started", runId: "run_b", nodeId: "n2" }),
      ],
      result: undefined,
      late: false,
      learnedAtMs: 0,
    },
    "edge-c": { status: "running", progress: [], result: undefined, late: false, learnedAtMs: 0 },
  }));
  const edges = json.edges as Record<string, Record<string, unknown>>;
  assert.deepEqual(
    [edges["edge-a"]?.runId, edges["edge-a"]?.nodeId, edges["edge-a"]?.outputPath],
    ["run_abc", "n 1", "/api/iop/nodes/n%201/runs/run_abc/output"],
  );
  assert.equal(edges["edge-b"]?.outputPath, runOutputPath("n2", "run_b"));
  assert.deepEqual(
    [edges["edge-c"]?.runId, edges["edge-c"]?.nodeId, edges["edge-c"]?.outputPath],
    ["", "", ""],
  );
});
