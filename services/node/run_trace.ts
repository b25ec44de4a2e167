/**
 * The Node's part of a run's trace: each run is a server span (`iop.run`), the child of the
 * Edge's dispatch span named by the run's `traceParent`, with one event at its first output
 * (never one per delta); the adapter's call is its child (`adapters/model_run.ts`). With
 * tracing off none of this exists and the run's `traceParent` goes on to the adapter unchanged.
 * @module
 */
import type { IopError } from "../../shared/errors.ts";
import type { RunInput, Usage } from "../../shared/run.ts";
import { startSpan, type TraceSpan } from "../../shared/tracing.ts";

/** Name of the event at a run's first output. */
export const FIRST_TOKEN_EVENT = "gen_ai.first_token";

/** Starts the span of run `runId` on node `nodeId`; undefined while tracing is off. */
export function startRunSpan(
  runId: string,
  nodeId: string,
  input: RunInput,
): TraceSpan | undefined {
  return startSpan("iop.run", {
    role: "server",
    parent: input.traceParent,
    state: input.traceState,
    attributes: {
      "iop.run_id": runId,
      "iop.node_id": nodeId,
      "iop.adapter": input.adapter,
      "iop.target": input.target,
      "gen_ai.request.model": input.target,
    },
  });
}

/** Ends a run span with its outcome, token counts and, for a failure, its error. */
export function endRunSpan(
  span: TraceSpan,
  status: "completed" | "failed" | "cancelled",
  usage?: Usage,
  error?: IopError,
): void {
  span.set({
    "iop.run.status": status,
    ...(usage
      ? {
        "gen_ai.usage.input_tokens": usage.inputTokens,
        "gen_ai.usage.output_tokens": usage.outputTokens,
      }
      : {}),
  });
  span.end(error ? { code: error.code, message: error.message } : undefined);
}

/** Records a run the node refused before it started (busy, unknown adapter) as a failed span. */
export function refusedRunSpan(runId: string, nodeId: string, input: RunInput, error: IopError) {
  const span = startRunSpan(runId, nodeId, input);
  if (span) endRunSpan(span, "failed", undefined, error);
}
