/**
 * Executes a Control Plane command on this Edge through the same service-layer calls the ops
 * console uses (submit, cancel, drain, reload) and the domain agents, within the deadline the
 * Control Plane gave it, and turns the outcome into the command result sent upward.
 * @module
 */
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import {
  type EdgeCommandRequest,
  type EdgeCommandResult,
  EdgeCommandResultSchema,
} from "../../../proto/gen/iop/v1/control_pb.ts";
import { IopError, toIopError } from "../../../shared/errors.ts";
import { runInput } from "../../../shared/run.ts";
import {
  cleanTracestate,
  formatTraceparent,
  freshTraceContext,
  parseTraceparent,
} from "../../../shared/trace_context.ts";
import { type RequestTrace, startSpan, withTrace } from "../../../shared/tracing.ts";
import type { DomainAgents } from "../agents/domain_agents.ts";
import { type RunOutcome, type RunProgress, runToOutcome } from "../agents/run_outcome.ts";
import type { EdgeService } from "../service.ts";

/** What a command may use. */
export interface CommandDeps {
  service: EdgeService;
  agents: DomainAgents;
  onProgress: (progress: RunProgress) => void;
  /** Aborting cancels a run the command started. */
  signal: AbortSignal;
  /** Defaults to Date.now. */
  now?: () => number;
}

/** How long after the deadline cancelled work may take to stop before it is answered anyway. */
export const CANCEL_SETTLE_MS = 10_000;

/** Options of {@linkcode executeWithDeadline}, beyond those of {@linkcode executeCommand}. */
export interface DeadlineDeps extends CommandDeps {
  /** Defaults to {@linkcode CANCEL_SETTLE_MS}. */
  cancelSettleMs?: number;
}

/**
 * Executes one command within its `timeout_ms` (none when 0). When the deadline passes, the
 * runs it started are cancelled (with the deadline as their reason) and, once they have stopped
 * (or `cancelSettleMs` later), the answer is failed/TIMEOUT saying it was cancelled at the
 * deadline, never retryable: the work may have been half done. A command that ended on its own
 * before the cancellation took effect keeps its own result.
 */
export async function executeWithDeadline(
  req: EdgeCommandRequest,
  deps: DeadlineDeps,
): Promise<EdgeCommandResult> {
  // The command's trace is the Control Plane's (`trace_parent`), or a new one when it sent none
  // (an older Control Plane); the runs the command submits join it (`service.submitRun`).
  const sent = parseTraceparent(req.traceParent) ? req.traceParent : undefined;
  const state = sent ? cleanTracestate(req.traceState) : undefined;
  const span = startSpan("iop.command", {
    role: "consumer",
    parent: sent,
    state,
    attributes: {
      "iop.command_id": req.commandId,
      "iop.command.kind": req.kind.case ?? "empty",
    },
  });
  const requestTrace: RequestTrace = span
    ? { traceparent: span.traceparent, tracestate: span.tracestate, span }
    : { traceparent: sent ?? formatTraceparent(freshTraceContext()), tracestate: state };
  const result = await withTrace(requestTrace, () => executeUntilDeadline(req, deps));
  if (span) {
    span.set({ "iop.command.status": result.status });
    span.end(result.error ? { code: result.error.code, message: result.error.message } : undefined);
  }
  return result;
}

async function executeUntilDeadline(
  req: EdgeCommandRequest,
  deps: DeadlineDeps,
): Promise<EdgeCommandResult> {
  if (req.timeoutMs === 0) return await executeCommand(req, deps);
  const deadline = new AbortController();
  let lastRunId = "";
  let settleTimer: ReturnType<typeof setTimeout> | undefined;
  let deadlineTimer: ReturnType<typeof setTimeout> | undefined;
  const gaveUp = new Promise<undefined>((resolve) => {
    deadlineTimer = setTimeout(() => {
      // The runs it started listen to this signal and are cancelled with its reason.
      deadline.abort(new IopError("TIMEOUT", `command deadline of ${req.timeoutMs} ms passed`));
      settleTimer = setTimeout(resolve, deps.cancelSettleMs ?? CANCEL_SETTLE_MS, undefined);
    }, req.timeoutMs);
  });
  const execution = executeCommand(req, {
    ...deps,
    signal: AbortSignal.any([deps.signal, deadline.signal]),
    onProgress: (p) => {
      if (p.runId) lastRunId = p.runId;
      deps.onProgress(p);
    },
  });
  const result = await Promise.race([execution, gaveUp]);
  clearTimeout(deadlineTimer);
  clearTimeout(settleTimer);
  const cutShort = result === undefined || result.status === "cancelled" ||
    result.error?.code === "CANCELLED";
  if (result !== undefined && (!deadline.signal.aborted || deps.signal.aborted || !cutShort)) {
    return result;
  }
  const stopped = result !== undefined;
  const message = `Cannot finish the command within its deadline of ${req.timeoutMs} ms: ` +
    (stopped
      ? "cancelled at the deadline"
      : `cancelled at the deadline, still stopping ${
        deps.cancelSettleMs ?? CANCEL_SETTLE_MS
      } ms later`);
  return create(EdgeCommandResultSchema, {
    commandId: req.commandId,
    status: "failed",
    summary: result?.summary ? `${result.summary}\n${message}` : message,
    error: { code: "TIMEOUT", message, retryable: false },
    runId: result?.runId || lastRunId,
    nodeId: result?.nodeId ?? "",
    durationMs: result?.durationMs ?? BigInt(req.timeoutMs),
  });
}

/** Executes one command; never rejects: failures become a `failed` result. */
export async function executeCommand(
  req: EdgeCommandRequest,
  deps: CommandDeps,
): Promise<EdgeCommandResult> {
  const now = deps.now ?? Date.now;
  const started = now();
  const result = (
    status: string,
    summary: string,
    extra: MessageInitShape<typeof EdgeCommandResultSchema> = {},
  ) =>
    create(EdgeCommandResultSchema, {
      commandId: req.commandId,
      status,
      summary,
      durationMs: BigInt(now() - started),
      ...extra,
    });
  try {
    const kind = req.kind;
    switch (kind.case) {
      case "run": {
        const { adapter, target, prompt, node } = kind.value;
        if (!adapter || !target) {
          throw new IopError("INVALID_ARGUMENT", "Cannot run as adapter and target are required");
        }
        const outcome = await runToOutcome(
          deps.service,
          { ...runInput({ adapter, target, prompt }), ...(node ? { node } : {}) },
          { onProgress: deps.onProgress, signal: deps.signal, now },
        );
        return fromOutcome(req.commandId, outcome);
      }
      case "cancel": {
        const ok = deps.service.cancelRun(kind.value.runId, kind.value.reason || "cancelled");
        if (!ok) {
          throw new IopError("NOT_FOUND", `Cannot cancel run '${kind.value.runId}': not running`);
        }
        return result("succeeded", `cancellation of ${kind.value.runId} requested`, {
          runId: kind.value.runId,
        });
      }
      case "drain": {
        const { node, draining } = kind.value;
        if (!deps.service.drainNode(node, draining)) {
          throw new IopError("NOT_FOUND", `Cannot drain node '${node}' as it is not connected`);
        }
        return result("succeeded", `node ${node} ${draining ? "draining" : "accepting runs"}`, {
          nodeId: node,
        });
      }
      case "reload": {
        const outcome = await deps.service.reload();
        if (!outcome.ok) throw new IopError("INVALID_ARGUMENT", outcome.detail);
        return result("succeeded", outcome.detail);
      }
      case "agent": {
        const { agentId, command, input } = kind.value;
        const outcome = await deps.agents.execute(agentId, command, input, {
          onProgress: deps.onProgress,
          signal: deps.signal,
        });
        return fromOutcome(req.commandId, outcome);
      }
      case undefined:
        throw new IopError("INVALID_ARGUMENT", "Cannot execute an empty command");
    }
  } catch (err) {
    const e = toIopError(err);
    return result("failed", e.message, {
      error: { code: e.code, message: e.message, retryable: e.retryable },
    });
  }
}

function fromOutcome(commandId: string, outcome: RunOutcome): EdgeCommandResult {
  return create(EdgeCommandResultSchema, {
    commandId,
    status: outcome.status,
    summary: outcome.summary,
    runId: outcome.runId,
    nodeId: outcome.nodeId,
    exitCode: outcome.exitCode,
    durationMs: BigInt(outcome.durationMs),
    ...(outcome.error ? { error: outcome.error } : {}),
  });
}
