/**
 * Answers the Control Plane's read-only node queries (a node's recent runs, one run's stored
 * output) through the service layer's node commands, as the ops console and the Edge's own run
 * output route do. An output larger than fits a frame to the Control Plane is cut to its tail.
 * @module
 */
import { create } from "@bufbuild/protobuf";
import {
  type NodeAnswer,
  NodeAnswerSchema,
  type NodeQuery,
} from "../../../proto/gen/iop/v1/control_pb.ts";
import { toIopError } from "../../../shared/errors.ts";
import type { OpsGateway } from "../ports.ts";

/** Largest run output sent up (its tail); the Control Plane's frame limit is 1 MiB. */
export const MAX_OUTPUT_CHARS = 512 * 1024;

/** Runs a history query returns when it names no limit, and at most. */
const HISTORY_DEFAULT = 20;
const HISTORY_MAX = 200;

/** Answers one query; never rejects: a failure is the answer's error. */
export async function answerNodeQuery(
  service: Pick<OpsGateway, "nodeCommand">,
  query: NodeQuery,
): Promise<NodeAnswer> {
  try {
    const q = query.query;
    switch (q.case) {
      case "history": {
        const limit = Math.min(q.value.limit || HISTORY_DEFAULT, HISTORY_MAX);
        const result = await service.nodeCommand(query.node, { type: "history", limit });
        const runs = result.type === "history" ? result.runs : [];
        return create(NodeAnswerSchema, {
          answer: {
            case: "history",
            value: {
              runs: runs.slice(0, limit).map((r) => ({
                runId: r.runId,
                adapter: r.adapter,
                target: r.target,
                status: r.status,
                startedAtMs: BigInt(r.startedAtMs),
                firstOutputAtMs: BigInt(r.firstOutputAtMs),
                finishedAtMs: BigInt(r.finishedAtMs),
                tokensIn: BigInt(Math.max(0, r.usage.inputTokens)),
                tokensOut: BigInt(Math.max(0, r.usage.outputTokens)),
                errorCode: r.errorCode,
                errorMessage: r.errorMessage,
                outputSummary: r.outputSummary,
                exitCode: r.exitCode,
              })),
            },
          },
        });
      }
      case "runOutput": {
        const runId = q.value.runId;
        const result = await service.nodeCommand(query.node, { type: "run_output", runId });
        const found = result.type === "run_output" && result.found;
        const output = result.type === "run_output" ? result.output : "";
        const cut = output.length > MAX_OUTPUT_CHARS;
        return create(NodeAnswerSchema, {
          answer: {
            case: "runOutput",
            value: {
              runId,
              found,
              output: cut ? output.slice(-MAX_OUTPUT_CHARS) : output,
              truncated: cut || (result.type === "run_output" && result.truncated),
            },
          },
        });
      }
      case undefined:
        return errorAnswer("INVALID_ARGUMENT", "Cannot answer a node query without a question");
    }
  } catch (err) {
    const e = toIopError(err);
    return errorAnswer(e.code, e.message, e.retryable);
  }
}

function errorAnswer(code: string, message: string, retryable = false): NodeAnswer {
  return create(NodeAnswerSchema, {
    answer: { case: "error", value: { code, message, retryable } },
  });
}
