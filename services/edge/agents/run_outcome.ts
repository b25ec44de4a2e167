/**
 * Runs one submission to its end for a remote caller (a Control Plane command or a domain-agent
 * step): reports progress as output lines arrive and returns a short summary. The full output
 * stays in the Node's run history; only the tail travels upward.
 * @module
 */
import { toIopError } from "../../../shared/errors.ts";
import type { RunGateway, RunSubmission } from "../ports.ts";

/** Longest output tail kept in a summary. */
export const SUMMARY_TAIL_CHARS = 2_000;
/** Most output lines reported as progress per run; the rest only reach the summary. */
const MAX_PROGRESS_LINES = 50;

/** A step of a run reported to the caller. */
export interface RunProgress {
  message: string;
  runId: string;
  nodeId: string;
}

/** How a run ended, as reported upward. */
export interface RunOutcome {
  status: "succeeded" | "failed" | "cancelled";
  summary: string;
  runId: string;
  nodeId: string;
  exitCode: number;
  durationMs: number;
  error?: { code: string; message: string; retryable: boolean };
}

/** Options of {@linkcode runToOutcome}. */
export interface RunToOutcomeOptions {
  onProgress?: (progress: RunProgress) => void;
  /** Aborting cancels the run; the outcome is then `cancelled`. */
  signal?: AbortSignal;
  /** Defaults to Date.now. */
  now?: () => number;
}

/** Submits a run through the service layer and waits for its terminal event. */
export async function runToOutcome(
  service: RunGateway,
  submission: RunSubmission,
  options: RunToOutcomeOptions = {},
): Promise<RunOutcome> {
  const now = options.now ?? Date.now;
  const started = now();
  let handle;
  try {
    handle = await service.submitRun(
      submission,
      options.signal ? { signal: options.signal } : {},
    );
  } catch (err) {
    const e = toIopError(err);
    const status = e.code === "CANCELLED" ? "cancelled" : "failed";
    return {
      status,
      summary: e.message,
      runId: "",
      nodeId: "",
      exitCode: 0,
      durationMs: now() - started,
      error: { code: e.code, message: e.message, retryable: e.retryable },
    };
  }
  const { runId, nodeId } = handle;
  const progress = (message: string) => options.onProgress?.({ message, runId, nodeId });
  progress(`run ${runId} started on node ${nodeId}`);
  let tail = "";
  let partial = "";
  let reported = 0;
  for await (const event of handle.events()) {
    if (event.type !== "output") continue;
    tail = (tail + event.text).slice(-SUMMARY_TAIL_CHARS);
    partial += event.text;
    const lines = partial.split("\n");
    partial = lines.pop() ?? "";
    for (const line of lines) {
      if (line.trim() !== "" && reported++ < MAX_PROGRESS_LINES) progress(line);
    }
  }
  const terminal = await handle.done;
  const base = { summary: tail.trim(), runId, nodeId, durationMs: now() - started };
  switch (terminal.type) {
    case "completed":
      return { ...base, status: "succeeded", exitCode: terminal.exitCode };
    case "cancelled":
      return {
        ...base,
        status: "cancelled",
        exitCode: 0,
        summary: base.summary || terminal.reason,
      };
    case "failed":
      return {
        ...base,
        status: "failed",
        exitCode: terminal.exitCode,
        summary: base.summary || terminal.message,
        error: { code: terminal.code, message: terminal.message, retryable: terminal.retryable },
      };
  }
}
