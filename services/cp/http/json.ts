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
import type { FleetCommand } from "../commands.ts";

/** A contract message as JSON with implicit (default) fields included. */
export function messageJson<Desc extends DescMessage>(
  schema: Desc,
  message: MessageShape<Desc>,
): JsonValue {
  return toJson(schema, message, { alwaysEmitImplicit: true });
}

/** A fleet command with its per-edge progress and results. */
export function commandJson(command: FleetCommand): Record<string, unknown> {
  const edges: Record<string, unknown> = {};
  for (const [edgeId, state] of command.edges) {
    edges[edgeId] = {
      status: state.status,
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
