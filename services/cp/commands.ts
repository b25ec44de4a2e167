/**
 * The command center: fans one fleet command out to its target edges with their deadline,
 * collects each edge's progress and result, and writes the audit record when the command is
 * accepted and when it ends. A share it could not send (edge unknown or not connected) fails;
 * a share it cannot know (no answer by the deadline plus grace, or the link lost while it ran)
 * is `unknown`, never retryable. A late answer for an unknown share replaces it, in memory and
 * in the audit, marked late with when it was learned. A stopping Control Plane refuses new
 * commands, waits for the shares in flight (`drain.ts`) and settles the rest as unknown.
 * @module
 */
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import {
  type CommandUpdate,
  CommandUpdateSchema,
  type EdgeCommandProgress,
  type EdgeCommandRequest,
  type EdgeCommandResult,
  EdgeCommandResultSchema,
  type EdgeSelector,
} from "../../proto/gen/iop/v1/control_pb.ts";
import { type ErrorCode, errorKind, IopError } from "../../shared/errors.ts";
import type { Logger } from "../../shared/log.ts";
import {
  cleanTracestate,
  formatTraceparent,
  freshTraceContext,
  parseTraceparent,
} from "../../shared/trace_context.ts";
import {
  currentTrace,
  type RequestTrace,
  startSpan,
  type TraceSpan,
} from "../../shared/tracing.ts";
import {
  type AuditEdgeResult,
  type AuditLog,
  type CommandOutcome,
  type ShareStatus,
} from "./ports.ts";
import { auditResult, commandOutcome, shareStatusOf } from "./outcome.ts";
import type { EdgeRegistry } from "./registry.ts";

/** Progress messages kept per edge of a command. */
const PROGRESS_KEPT = 100;

/** One edge's share of a fleet command. */
export interface EdgeCommandState {
  /** running until the edge answers, then the result's status; unknown when it cannot be known. */
  status: ShareStatus;
  progress: EdgeCommandProgress[];
  /** The edge's result, or one this Control Plane made (status failed or unknown). */
  result: EdgeCommandResult | undefined;
  /** True when the edge's answer replaced `unknown`. */
  late: boolean;
  /** When the current status was learned; 0 while running. */
  learnedAtMs: number;
}

/** A fleet command and its per-edge states. */
export interface FleetCommand {
  commandId: string;
  actor: string;
  via: string;
  kind: string;
  detail: string;
  createdAtMs: number;
  finishedAtMs: number;
  outcome: CommandOutcome;
  edges: Map<string, EdgeCommandState>;
}

/** A command to submit. */
export interface CommandSubmission {
  selector: EdgeSelector;
  /** Its command_id is assigned here. */
  command: EdgeCommandRequest;
  actor: string;
  via: "http" | "client";
}

/** Options of {@linkcode CommandCenter}. */
export interface CommandCenterOptions {
  registry: EdgeRegistry;
  audit: AuditLog;
  logger: Logger;
  /** The deadline of a command that names none; always sent to the edge, which enforces it. */
  defaultTimeoutMs: number;
  /** How long past the deadline to wait for an edge's answer before a share is unknown. */
  resultGraceMs: number;
  /** Finished commands kept for lookup. */
  retained: number;
  /** Counts finished commands by kind and outcome. */
  onFinished?: (kind: string, outcome: CommandOutcome) => void;
  /** Counts late answers that replaced `unknown`, by kind and the status they brought. */
  onLateResult?: (kind: string, status: ShareStatus) => void;
  /** Defaults to Date.now. */
  now?: () => number;
  /** Starts a deadline timer and returns its cancel function; defaults to setTimeout. */
  setTimer?: (fire: () => void, ms: number) => () => void;
}

/** Tracks fleet commands from submission to their last edge result. */
export class CommandCenter {
  readonly #commands = new Map<string, FleetCommand>();
  readonly #timers = new Map<string, () => void>();
  /** Open `iop.command` spans by command id, while tracing is on; ended with the command. */
  readonly #spans = new Map<string, TraceSpan>();
  readonly #listeners = new Set<(update: CommandUpdate) => void>();
  readonly #options: CommandCenterOptions;
  readonly #now: () => number;
  readonly #setTimer: (fire: () => void, ms: number) => () => void;
  /** Why submissions are refused once the Control Plane stops; undefined while it takes them. */
  #refusal: string | undefined;
  /** Resolved, and emptied, each time a share gets its result: see {@linkcode nextShareEnd}. */
  #shareEndWaiters: (() => void)[] = [];

  constructor(options: CommandCenterOptions) {
    this.#options = options;
    this.#now = options.now ?? Date.now;
    this.#setTimer = options.setTimer ?? ((fire, ms) => {
      const timer = setTimeout(fire, ms);
      return () => clearTimeout(timer);
    });
  }

  /** Subscribes to per-edge progress and results. */
  subscribe(listener: (update: CommandUpdate) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * Audits and sends a command to every selected edge. Throws INVALID_ARGUMENT for an empty
   * command or a selector that matches no edge.
   */
  submit(submission: CommandSubmission): FleetCommand {
    if (this.#refusal !== undefined) throw new IopError("UNAVAILABLE", this.#refusal);
    const kind = submission.command.kind;
    if (kind.case === undefined) {
      throw new IopError("INVALID_ARGUMENT", "Cannot submit a command without a kind");
    }
    const edgeIds = this.#options.registry.select(submission.selector);
    if (edgeIds.length === 0) {
      throw new IopError("INVALID_ARGUMENT", "Cannot submit a command as no edge matches");
    }
    const command = this.#accept(submission, kind.case, edgeIds);
    const trace = this.#trace(command, submission, edgeIds.length);
    // The edge gets the deadline too, so that its work never outlives it.
    const request: EdgeCommandRequest = {
      ...submission.command,
      commandId: command.commandId,
      issuedBy: command.actor,
      timeoutMs: submission.command.timeoutMs || this.#options.defaultTimeoutMs,
      traceParent: trace.traceparent,
      traceState: trace.tracestate ?? "",
    };
    for (const edgeId of edgeIds) this.#sendTo(command, edgeId, request);
    return command;
  }

  /**
   * The trace every edge's share of a command joins: a span `iop.command` while tracing is on,
   * the child of the request's trace (or of a valid `trace_parent` the client put in the command
   * itself), else a new root; with tracing off that parent, or a fresh trace, goes on as it is,
   * so that all edges' runs of one fleet command share one trace id.
   */
  #trace(command: FleetCommand, submission: CommandSubmission, edges: number): RequestTrace {
    const request = currentTrace();
    const asked = parseTraceparent(submission.command.traceParent);
    const parent = request?.traceparent ?? (asked ? submission.command.traceParent : undefined);
    const state = request ? request.tracestate : cleanTracestate(submission.command.traceState);
    const span = startSpan("iop.command", {
      role: "producer",
      parent,
      state,
      attributes: {
        "iop.command_id": command.commandId,
        "iop.command.kind": command.kind,
        "iop.command.actor": command.actor,
        "iop.command.edges": edges,
      },
    });
    if (span) {
      this.#spans.set(command.commandId, span);
      return { traceparent: span.traceparent, tracestate: span.tracestate, span };
    }
    return parent
      ? { traceparent: parent, tracestate: state }
      : { traceparent: formatTraceparent(freshTraceContext()) };
  }

  /** Records a new command as running, in memory and in the audit. */
  #accept(submission: CommandSubmission, kind: string, edgeIds: string[]): FleetCommand {
    const commandId = `cmd_${crypto.randomUUID().replaceAll("-", "").slice(0, 20)}`;
    const command: FleetCommand = {
      commandId,
      actor: submission.actor || "unknown",
      via: submission.via,
      kind,
      detail: describe(submission.command),
      createdAtMs: this.#now(),
      finishedAtMs: 0,
      outcome: "running",
      edges: new Map(
        edgeIds.map((id) => [
          id,
          { status: "running", progress: [], result: undefined, late: false, learnedAtMs: 0 },
        ]),
      ),
    };
    this.#commands.set(commandId, command);
    this.#options.audit.begin({
      commandId,
      actor: command.actor,
      via: command.via,
      kind,
      detail: command.detail,
      edges: edgeIds,
      createdAtMs: command.createdAtMs,
      finishedAtMs: 0,
      outcome: "running",
      results: {},
    });
    this.#options.logger.info("fleet command accepted", {
      command_id: commandId,
      actor: command.actor,
      kind,
      edges: edgeIds,
    });
    return command;
  }

  /**
   * Sends the command to one edge and waits its deadline plus the grace; an edge that cannot
   * get it fails now (retryable when it is known but not connected: nothing ran).
   */
  #sendTo(command: FleetCommand, edgeId: string, request: EdgeCommandRequest): void {
    const link = this.#options.registry.link(edgeId);
    if (!link) {
      const known = this.#options.registry.get(edgeId) !== undefined;
      this.#fail(
        command,
        edgeId,
        known ? "UNAVAILABLE" : "NOT_FOUND",
        known ? `edge '${edgeId}' is not connected` : `edge '${edgeId}' is unknown`,
      );
      return;
    }
    const waitMs = request.timeoutMs + this.#options.resultGraceMs;
    this.#timers.set(
      `${command.commandId}/${edgeId}`,
      this.#setTimer(() => {
        this.#unknown(
          command,
          edgeId,
          "TIMEOUT",
          `outcome unknown: no result within ${waitMs} ms (deadline ${request.timeoutMs} ms)`,
        );
      }, waitMs),
    );
    link.sendCommand(request).catch((err: Error) => {
      this.#fail(command, edgeId, "UNAVAILABLE", `cannot send to edge: ${err.message}`);
    });
  }

  /** A command by id (running or recently finished). */
  get(commandId: string): FleetCommand | undefined {
    return this.#commands.get(commandId);
  }

  /** Commands in memory, newest first. */
  list(): FleetCommand[] {
    return [...this.#commands.values()].reverse();
  }

  /** Records progress an edge reported. */
  progress(edgeId: string, progress: EdgeCommandProgress): void {
    const state = this.#commands.get(progress.commandId)?.edges.get(edgeId);
    // An unknown share may still be running on its edge: its progress is still news.
    if (state?.status !== "running" && state?.status !== "unknown") return;
    state.progress.push(progress);
    if (state.progress.length > PROGRESS_KEPT) state.progress.shift();
    this.#emit({
      commandId: progress.commandId,
      edgeId,
      update: { case: "progress", value: progress },
      shareStatus: state.status,
    });
  }

  /**
   * Records an edge's result. One for an `unknown` share (after the deadline or a lost link, on
   * any link of that edge) replaces it, also in the audit when the command has left memory;
   * any other result for a share that already has one is ignored.
   */
  result(edgeId: string, result: EdgeCommandResult): void {
    const command = this.#commands.get(result.commandId);
    const state = command?.edges.get(edgeId);
    const status = shareStatusOf(result.status);
    if (!command) this.#learnLateFromAudit(edgeId, result);
    else if (state?.status === "running") this.#settle(command, edgeId, result, status, false);
    else if (state?.status === "unknown") this.#settle(command, edgeId, result, status, true);
  }

  /** Marks every running share of an edge whose link was lost as unknown: it may still run. */
  edgeLost(edgeId: string, reason: string): void {
    for (const command of this.#commands.values()) {
      if (command.edges.get(edgeId)?.status === "running") {
        this.#unknown(
          command,
          edgeId,
          "UNAVAILABLE",
          `outcome unknown: edge link lost while the command ran: ${reason}`,
        );
      }
    }
  }

  /**
   * Refuses every later submission with UNAVAILABLE and `message` (the Control Plane stops);
   * commands already accepted go on, and their results are still taken.
   */
  refuseNew(message: string): void {
    this.#refusal = message;
  }

  /** True once {@linkcode refuseNew} was called. */
  get refusing(): boolean {
    return this.#refusal !== undefined;
  }

  /** The shares still waiting for their edge's result, and how many commands they make. */
  inFlight(): { commands: number; shares: number } {
    let commands = 0;
    let shares = 0;
    for (const command of this.#commands.values()) {
      const running = [...command.edges.values()].filter((s) => s.status === "running").length;
      if (running > 0) commands++;
      shares += running;
    }
    return { commands, shares };
  }

  /** Resolves when the next share gets a result, its edge's or one made here. */
  nextShareEnd(): Promise<void> {
    return new Promise((resolve) => this.#shareEndWaiters.push(resolve));
  }

  /**
   * Records every share still running as unknown with `message`, with its audit row, as the
   * Control Plane stops before their results came; returns how many there were.
   */
  settleRunning(message: string): number {
    let settled = 0;
    for (const command of [...this.#commands.values()]) {
      for (const [edgeId, state] of command.edges) {
        if (state.status !== "running") continue;
        this.#unknown(command, edgeId, "UNAVAILABLE", message);
        settled++;
      }
    }
    return settled;
  }

  /** Stops every deadline timer (at shutdown). */
  close(): void {
    for (const cancel of this.#timers.values()) cancel();
    this.#timers.clear();
    for (const span of this.#spans.values()) span.end();
    this.#spans.clear();
  }

  #fail(command: FleetCommand, edgeId: string, code: ErrorCode, message: string): void {
    const state = command.edges.get(edgeId);
    if (state?.status !== "running") return;
    this.#settle(
      command,
      edgeId,
      create(EdgeCommandResultSchema, {
        commandId: command.commandId,
        status: "failed",
        summary: message,
        error: { code, message, retryable: errorKind(code).retryable },
      }),
      "failed",
      false,
    );
  }

  /** Records a running share as unknown: never retryable, as the work may have happened. */
  #unknown(command: FleetCommand, edgeId: string, code: ErrorCode, message: string): void {
    if (command.edges.get(edgeId)?.status !== "running") return;
    this.#options.logger.warn("fleet command share outcome unknown", {
      command_id: command.commandId,
      edge_id: edgeId,
      reason: message,
    });
    this.#settle(
      command,
      edgeId,
      create(EdgeCommandResultSchema, {
        commandId: command.commandId,
        status: "unknown",
        summary: message,
        error: { code, message, retryable: false },
      }),
      "unknown",
      false,
    );
  }

  /** Gives a share its result and status; `late` when it replaces `unknown`. */
  #settle(
    command: FleetCommand,
    edgeId: string,
    result: EdgeCommandResult,
    status: ShareStatus,
    late: boolean,
  ): void {
    const state = command.edges.get(edgeId);
    if (!state) return;
    state.result = result;
    state.status = status;
    state.late = late;
    state.learnedAtMs = this.#now();
    const key = `${command.commandId}/${edgeId}`;
    this.#timers.get(key)?.();
    this.#timers.delete(key);
    for (const wake of this.#shareEndWaiters.splice(0)) wake();
    this.#emit({
      commandId: command.commandId,
      edgeId,
      update: { case: "result", value: result },
      shareStatus: state.status,
      late,
    });
    if (late) {
      this.#options.onLateResult?.(command.kind, state.status);
      this.#options.logger.info("fleet command share learned late", {
        command_id: command.commandId,
        edge_id: edgeId,
        status: state.status,
      });
    }
    const outcome = commandOutcome([...command.edges.values()].map((s) => s.status));
    if (outcome === "running") return;
    const first = command.outcome === "running";
    command.outcome = outcome;
    if (first) command.finishedAtMs = this.#now();
    this.#writeAudit(command, first);
    if (!first) return;
    this.#options.onFinished?.(command.kind, command.outcome);
    const span = this.#spans.get(command.commandId);
    if (span) {
      this.#spans.delete(command.commandId);
      span.set({ "iop.command.outcome": command.outcome });
      span.end(
        command.outcome === "succeeded"
          ? undefined
          : { code: command.outcome, message: `command ${command.outcome}` },
      );
    }
    this.#options.logger.info("fleet command finished", {
      command_id: command.commandId,
      outcome: command.outcome,
    });
    this.#prune();
  }

  #writeAudit(command: FleetCommand, first: boolean): void {
    const results: Record<string, AuditEdgeResult> = {};
    for (const [id, s] of command.edges) {
      results[id] = auditResult(s.result, s.status, s.late, s.learnedAtMs);
    }
    const audit = this.#options.audit;
    try {
      if (first) audit.finish(command.commandId, command.outcome, command.finishedAtMs, results);
      else audit.update(command.commandId, command.outcome, results);
    } catch (err) {
      this.#options.logger.error("cannot write audit record", {
        err,
        command_id: command.commandId,
      });
    }
  }

  /** A late answer for a command no longer in memory: the audit row alone is updated. */
  #learnLateFromAudit(edgeId: string, result: EdgeCommandResult): void {
    const audit = this.#options.audit;
    try {
      const record = audit.get(result.commandId);
      const previous = record?.results[edgeId];
      if (!record || previous?.status !== "unknown") return;
      const status = shareStatusOf(result.status);
      const results = {
        ...record.results,
        [edgeId]: auditResult(result, status, true, this.#now()),
      };
      audit.update(
        result.commandId,
        commandOutcome(Object.values(results).map((r) => r.status)),
        results,
      );
      this.#options.onLateResult?.(record.kind, status);
      this.#emit({
        commandId: result.commandId,
        edgeId,
        update: { case: "result", value: result },
        shareStatus: status,
        late: true,
      });
    } catch (err) {
      this.#options.logger.error("cannot write audit record", {
        err,
        command_id: result.commandId,
      });
    }
  }

  #prune(): void {
    const finished = [...this.#commands.values()].filter((c) => c.outcome !== "running");
    for (const c of finished.slice(0, Math.max(0, finished.length - this.#options.retained))) {
      this.#commands.delete(c.commandId);
    }
  }

  #emit(update: MessageInitShape<typeof CommandUpdateSchema>): void {
    const message = create(CommandUpdateSchema, update);
    for (const listener of this.#listeners) {
      try {
        listener(message);
      } catch {
        // Subscribers handle their own failures; one must not block the others.
      }
    }
  }
}

/** A short human-readable description of a command's arguments, for the audit log. */
export function describe(command: EdgeCommandRequest): string {
  const k = command.kind;
  switch (k.case) {
    case "run":
      return `run ${k.value.adapter}/${k.value.target}` +
        (k.value.node ? ` on ${k.value.node}` : "") +
        (k.value.prompt ? ` prompt="${k.value.prompt.slice(0, 80)}"` : "");
    case "cancel":
      return `cancel ${k.value.runId}`;
    case "drain":
      return `${k.value.draining ? "drain" : "undrain"} ${k.value.node}`;
    case "reload":
      return "reload";
    case "agent":
      return `agent ${k.value.agentId} ${k.value.command}` +
        (k.value.input ? ` input="${k.value.input.slice(0, 80)}"` : "");
    case undefined:
      return "empty";
  }
}
