/**
 * Domain agents: edge-configured automations (e.g. a build/deploy agent) whose named commands
 * each map to an `adapter + target` (typically a CLI profile) run through the normal service
 * path. The Edge owns their state (ready / busy / error) and their logs and artifacts; only
 * state, progress and result summaries travel upward to a Control Plane.
 * @module
 */
import { IopError } from "../../../shared/errors.ts";
import { runInput } from "../../../shared/run.ts";
import type { AgentRecord } from "../config.ts";
import type { EdgeService } from "../service.ts";
import { type RunOutcome, type RunProgress, runToOutcome } from "./run_outcome.ts";

/** A domain agent's state: ready for a command, running one, or its last command failed. */
export type AgentState = "ready" | "busy" | "error";

/** What the Edge reports about one domain agent. */
export interface AgentView {
  id: string;
  name: string;
  description: string;
  state: AgentState;
  commands: string[];
  detail: string;
  lastCommand: string;
  lastStatus: string;
  lastFinishedAtMs: number;
}

/** A change of an agent's state. */
export interface AgentStateChange {
  agentId: string;
  state: AgentState;
  detail: string;
}

interface Live {
  state: AgentState;
  detail: string;
  lastCommand: string;
  lastStatus: string;
  lastFinishedAtMs: number;
}

/** Options of {@linkcode DomainAgents.execute}. */
export interface AgentExecuteOptions {
  onProgress?: (progress: RunProgress) => void;
  signal?: AbortSignal;
}

/** The domain agents of one Edge, read from its configuration in force. */
export class DomainAgents {
  readonly #service: EdgeService;
  readonly #now: () => number;
  readonly #live = new Map<string, Live>();
  readonly #listeners = new Set<(change: AgentStateChange) => void>();

  constructor(service: EdgeService, options: { now?: () => number } = {}) {
    this.#service = service;
    this.#now = options.now ?? Date.now;
  }

  /** Every configured domain agent with its state. */
  list(): AgentView[] {
    return this.#records().map((r) => {
      const live = this.#liveOf(r.id);
      return {
        id: r.id,
        name: r.name,
        description: r.description,
        state: live.state,
        commands: r.commands.map((c) => c.name),
        detail: live.detail,
        lastCommand: live.lastCommand,
        lastStatus: live.lastStatus,
        lastFinishedAtMs: live.lastFinishedAtMs,
      };
    });
  }

  /** Subscribes to state changes; returns the unsubscribe function. */
  subscribe(listener: (change: AgentStateChange) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * Runs one named command of an agent to its end. Rejects with NOT_FOUND for an unknown agent
   * or command and OVERLOADED while the agent is busy with another command.
   */
  async execute(
    agentId: string,
    command: string,
    input: string,
    options: AgentExecuteOptions = {},
  ): Promise<RunOutcome> {
    const record = this.#records().find((r) => r.id === agentId);
    if (!record) throw new IopError("NOT_FOUND", `Cannot find domain agent '${agentId}'`);
    const step = record.commands.find((c) => c.name === command);
    if (!step) {
      const known = record.commands.map((c) => c.name).join(", ");
      throw new IopError(
        "NOT_FOUND",
        `Cannot run '${command}' as agent '${agentId}' has no such command: it has ${known}`,
      );
    }
    const live = this.#liveOf(agentId);
    if (live.state === "busy") {
      throw new IopError(
        "OVERLOADED",
        `Cannot run '${command}' as agent '${agentId}' is busy: ${live.detail}`,
      );
    }
    this.#set(agentId, "busy", `running ${command}`);
    live.lastCommand = command;
    const outcome = await runToOutcome(
      this.#service,
      runInput({
        adapter: step.adapter,
        target: step.target,
        prompt: input,
        metadata: { agent: agentId, agent_command: command },
      }),
      { ...options, now: this.#now },
    );
    live.lastStatus = outcome.status;
    live.lastFinishedAtMs = this.#now();
    if (outcome.status === "failed") {
      this.#set(agentId, "error", `${command} failed: ${outcome.error?.message ?? "unknown"}`);
    } else {
      this.#set(agentId, "ready", "");
    }
    return outcome;
  }

  #records(): AgentRecord[] {
    return this.#service.config.agents.filter((a) => a.kind === "domain");
  }

  #liveOf(agentId: string): Live {
    let live = this.#live.get(agentId);
    if (!live) {
      live = { state: "ready", detail: "", lastCommand: "", lastStatus: "", lastFinishedAtMs: 0 };
      this.#live.set(agentId, live);
    }
    return live;
  }

  #set(agentId: string, state: AgentState, detail: string): void {
    const live = this.#liveOf(agentId);
    live.state = state;
    live.detail = detail;
    for (const listener of this.#listeners) listener({ agentId, state, detail });
  }
}
