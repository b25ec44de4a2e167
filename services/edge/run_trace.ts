/**
 * The Edge's part of a run's trace: a submitted run joins the trace of the request that
 * submitted it, and its dispatch to a node is a client span (`iop.dispatch`) whose context
 * travels on the wire as the run's `traceParent`, so the node's run span is its child. With
 * tracing off no span exists, and the run carries the request's trace context on as it came —
 * or a fresh one when it has none, so every run, its logs and its node's history have a trace id.
 * @module
 */
import type { RunEvent, RunInput, TerminalRunEvent } from "../../shared/run.ts";
import { formatTraceparent, freshTraceContext } from "../../shared/trace_context.ts";
import { currentTrace, startSpan, type TraceSpan } from "../../shared/tracing.ts";
import type { RunSubmission, SubmitOptions } from "./ports.ts";

/** `submission` with the current request's trace context when it carries none itself. */
export function joinRequestTrace(submission: RunSubmission): RunSubmission {
  if (submission.traceParent !== undefined) return submission;
  const request = currentTrace();
  if (!request) return submission;
  return {
    ...submission,
    traceParent: request.traceparent,
    ...(request.tracestate ? { traceState: request.tracestate } : {}),
  };
}

/** A dispatch about to be sent: its span (tracing on) and the trace context it sends. */
export interface DispatchTrace {
  span: TraceSpan | undefined;
  /** What the run carries to the node. */
  context: Pick<RunInput, "traceParent" | "traceState">;
}

/** Starts the dispatch span of run `runId` to `nodeId` (see the module doc). */
export function startDispatch(
  runId: string,
  nodeId: string,
  submission: RunSubmission,
  options: SubmitOptions,
): DispatchTrace {
  const span = startSpan("iop.dispatch", {
    role: "client",
    parent: submission.traceParent,
    state: submission.traceState,
    attributes: {
      "iop.run_id": runId,
      "iop.node_id": nodeId,
      "iop.adapter": submission.adapter,
      "iop.target": submission.target,
      "gen_ai.request.model": submission.target,
      "iop.pool": options.pool,
      "iop.tenant": options.tenant?.name,
    },
  });
  const traceParent = span?.traceparent ?? submission.traceParent ??
    formatTraceparent(freshTraceContext());
  const traceState = span ? span.tracestate : submission.traceState;
  return { span, context: traceState ? { traceParent, traceState } : { traceParent } };
}

/** Ends a dispatch span with the run's outcome and token counts. */
export function endDispatch(span: TraceSpan, terminal: TerminalRunEvent): void {
  span.set({ "iop.run.status": terminal.type, ...usageAttributes(terminal) });
  span.end(failureOf(terminal));
}

/** `gen_ai.usage.*` of a completed run; empty otherwise. */
function usageAttributes(event: RunEvent): Record<string, number> {
  if (event.type !== "completed" || !event.usage) return {};
  return {
    "gen_ai.usage.input_tokens": event.usage.inputTokens,
    "gen_ai.usage.output_tokens": event.usage.outputTokens,
  };
}

/** The error a failed run's span ends with; a cancellation is not a failure. */
function failureOf(terminal: TerminalRunEvent): { code: string; message: string } | undefined {
  return terminal.type === "failed"
    ? { code: terminal.code, message: terminal.message }
    : undefined;
}
