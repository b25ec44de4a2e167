/**
 * JSON views of Control Plane data for the HTTP API: contract messages in canonical proto3 JSON
 * (camelCase, every field present), and the command center's records.
 * @module
 */
import { type DescMessage, type MessageShape, toJson } from "@bufbuild/protobuf";
import type { JsonValue } from "@bufbuild/protobuf";
import {
  EdgeCommandProgressSchema,
  EdgeCommandResultSchema,
} from "../../../proto/gen/iop/v1/control_pb.ts";
import type { EdgeCommandState, FleetCommand } from "../commands.ts";

/** A contract message as JSON with implicit (default) fields included. */
export function messageJson<Desc extends DescMessage>(
  schema: Desc,
  message: MessageShape<Desc>,
): JsonValue {
  return toJson(schema, message, { alwaysEmitImplicit: true });
}

/**
 * A fleet command with its per-edge progress and results. Per edge: `status` (running,
 * succeeded, failed, cancelled or unknown), `retryable` (false while unknown), `late` (the
 * edge's answer replaced unknown), `learnedAtMs` (when the status was learned; 0 while
 * running), and `runId`, `nodeId` and `outputPath` of the run the command started there (from
 * its result, or its progress while it runs; empty when none): the run's whole output is at
 * `outputPath` on that edge's HTTP listener, which the Control Plane does not know, and through
 * this Control Plane at `cpOutputPath` (empty when there is no run).
 */
export function commandJson(command: FleetCommand): Record<string, unknown> {
  const edges: Record<string, unknown> = {};
  for (const [edgeId, state] of command.edges) {
    const run = runOf(state);
    edges[edgeId] = {
      status: state.status,
      retryable: state.result?.error?.retryable ?? false,
      late: state.late,
      learnedAtMs: state.learnedAtMs,
      ...run,
      cpOutputPath: run.outputPath ? cpRunOutputPath(edgeId, run.nodeId, run.runId) : "",
      progress: state.progress.map((p) => messageJson(EdgeCommandProgressSchema, p)),
      result: state.result ? messageJson(EdgeCommandResultSchema, state.result) : null,
    };
  }
  return {
    commandId: command.commandId,
    actor: command.actor,
    via: command.via,
    kind: command.kind,
    detail: command.detail,
    createdAtMs: command.createdAtMs,
    finishedAtMs: command.finishedAtMs,
    outcome: command.outcome,
    edges,
  };
}

/** The run an edge's share of a command started, and where that edge serves its output. */
function runOf(state: EdgeCommandState): { runId: string; nodeId: string; outputPath: string } {
  const started = state.result?.runId ? state.result : state.progress.findLast((p) => p.runId);
  const runId = started?.runId ?? "";
  const nodeId = started?.nodeId ?? "";
  return { runId, nodeId, outputPath: runId && nodeId ? runOutputPath(nodeId, runId) : "" };
}

/**
 * The path of a run's whole output on this Control Plane, which asks the edge for it over the
 * edge wire (`GET`, text/plain, read token).
 */
export function cpRunOutputPath(edgeId: string, nodeId: string, runId: string): string {
  return `/edges/${encodeURIComponent(edgeId)}${
    runOutputPath(nodeId, runId).slice("/api/iop".length)
  }`;
}

/** The path of a run's whole output on its edge (`GET`, text/plain). */
export function runOutputPath(nodeId: string, runId: string): string {
  return `/api/iop/nodes/${encodeURIComponent(nodeId)}/runs/${encodeURIComponent(runId)}/output`;
}
