/**
 * The command center: fans one fleet command out to its target edges, collects each edge's
 * progress and result (or a failure when an edge is unknown, disconnected, silent past the
 * deadline, or lost), and writes the audit record when the command is accepted and when it ends.
 * @module
 */
import { create } from "@bufbuild/protobuf";
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
  type AuditEdgeResult,
  type AuditLog,
  type CommandOutcome,
  SHARE_STATUSES,
  type ShareStatus,
} from "./ports.ts";
import type { EdgeRegistry } from "./registry.ts";

/** Progress messages kept per edge of a command. */
const PROGRESS_KEPT = 100;

/** One edge's share of a fleet command. */
export interface EdgeCommandState {
  /** running until the edge answers, then the result's status. */
  status: ShareStatus;
  progress: EdgeCommandProgress[];
  result: EdgeCommandResult | undefined;
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
  defaultTimeoutMs: number;
  /** Finished commands kept for lookup. */
  retained: number;
  /** Counts finished commands by kind and outcome. */
  onFinished?: (kind: string, outcome: CommandOutcome) => void;
  /** Defaults to Date.now. */
  now?: () => number;
}

/** Tracks fleet commands from submission to their last edge result. */
export class CommandCenter {
  readonly #commands = new Map<string, FleetCommand>();
  readonly #timers = new Map<string, ReturnType<typeof setTimeout>>();
  readonly #listeners = new Set<(update: CommandUpdate) => void>();
  readonly #options: CommandCenterOptions;
  readonly #now: () => number;

  constructor(options: CommandCenterOptions) {
    this.#options = options;
    this.#now = options.now ?? Date.now;
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
    const kind = submission.command.kind;
    if (kind.case === undefined) {
      throw new IopError("INVALID_ARGUMENT", "Cannot submit a command without a kind");
    }
    const edgeIds = this.#options.registry.select(submission.selector);
    if (edgeIds.length === 0) {
      throw new IopError("INVALID_ARGUMENT", "Cannot submit a command as no edge matches");
    }
    const command = this.#accept(submission, kind.case, edgeIds);
    const request: EdgeCommandRequest = {
      ...submission.command,
      commandId: command.commandId,
      issuedBy: command.actor,
    };
    const timeoutMs = request.timeoutMs || this.#options.defaultTimeoutMs;
    for (const edgeId of edgeIds) this.#sendTo(command, edgeId, request, timeoutMs);
    return command;
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
        edgeIds.map((id) => [id, { status: "running", progress: [], result: undefined }]),
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

  /** Sends the command to one edge with its deadline; an edge that cannot get it fails now. */
  #sendTo(
    command: FleetCommand,
    edgeId: string,
    request: EdgeCommandRequest,
    timeoutMs: number,
  ): void {
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
    this.#timers.set(
      `${command.commandId}/${edgeId}`,
      setTimeout(() => {
        this.#fail(command, edgeId, "TIMEOUT", `no result within ${timeoutMs} ms`);
      }, timeoutMs),
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
    if (!state || state.result) return;
    state.progress.push(progress);
    if (state.progress.length > PROGRESS_KEPT) state.progress.shift();
    this.#emit({
      commandId: progress.commandId,
      edgeId,
      update: { case: "progress", value: progress },
    });
  }

  /** Records an edge's result; late or unknown results are ignored. */
  result(edgeId: string, result: EdgeCommandResult): void {
    const command = this.#commands.get(result.commandId);
    if (command) this.#settle(command, edgeId, result);
  }

  /** Fails every running command share of an edge whose link was lost. */
  edgeLost(edgeId: string, reason: string): void {
    for (const command of this.#commands.values()) {
      if (command.edges.get(edgeId)?.result === undefined && command.edges.has(edgeId)) {
        this.#fail(command, edgeId, "UNAVAILABLE", `edge link lost: ${reason}`);
      }
    }
  }

  /** Stops every deadline timer (at shutdown). */
  close(): void {
    for (const timer of this.#timers.values()) clearTimeout(timer);
    this.#timers.clear();
  }

  #fail(command: FleetCommand, edgeId: string, code: ErrorCode, message: string): void {
    this.#settle(
      command,
      edgeId,
      create(EdgeCommandResultSchema, {
        commandId: command.commandId,
        status: "failed",
        summary: message,
        error: { code, message, retryable: errorKind(code).retryable },
      }),
    );
  }

  #settle(command: FleetCommand, edgeId: string, result: EdgeCommandResult): void {
    const state = command.edges.get(edgeId);
    if (!state || state.result) return;
    state.result = result;
    state.status = shareStatusOf(result.status);
    const key = `${command.commandId}/${edgeId}`;
    clearTimeout(this.#timers.get(key));
    this.#timers.delete(key);
    this.#emit({ commandId: command.commandId, edgeId, update: { case: "result", value: result } });
    const states = [...command.edges.values()];
    if (states.some((s) => !s.result)) return;
    const ok = states.filter((s) => s.status === "succeeded").length;
    command.outcome = ok === states.length ? "succeeded" : ok === 0 ? "failed" : "partial";
    command.finishedAtMs = this.#now();
    const results: Record<string, AuditEdgeResult> = {};
    for (const [id, s] of command.edges) {
      results[id] = {
        status: s.status,
        summary: (s.result?.summary ?? "").slice(0, 500),
        errorCode: s.result?.error?.code ?? "",
      };
    }
    try {
      this.#options.audit.finish(command.commandId, command.outcome, command.finishedAtMs, results);
    } catch (err) {
      this.#options.logger.error("cannot write audit record", {
        err,
        command_id: command.commandId,
      });
    }
    this.#options.onFinished?.(command.kind, command.outcome);
    this.#options.logger.info("fleet command finished", {
      command_id: command.commandId,
      outcome: command.outcome,
    });
    this.#prune();
  }

  #prune(): void {
    const finished = [...this.#commands.values()].filter((c) => c.outcome !== "running");
    for (const c of finished.slice(0, Math.max(0, finished.length - this.#options.retained))) {
      this.#commands.delete(c.commandId);
    }
  }

  #emit(update: Omit<CommandUpdate, "$typeName">): void {
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

/** An edge's reported status as a share status; one this Control Plane does not know fails. */
function shareStatusOf(status: string): ShareStatus {
  const known = SHARE_STATUSES.find((s) => s === status);
  return known === undefined || known === "running" ? "failed" : known;
}
