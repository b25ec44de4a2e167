/**
 * Domain agents: edge-configured automations (e.g. a build/deploy agent) whose named commands
 * each map to an `adapter + target` (typically a CLI profile) run through the normal service
 * path. The Edge owns their state (ready / busy / error / unavailable) and their logs and
 * artifacts; only state, progress and result summaries travel upward to a Control Plane.
 *
 * An agent is `unavailable` while some command of it has no connected, non-draining node that
 * can run its `adapter + target` (`reachability.ts`); the state follows node registrations,
 * disconnections, applied configs, adapter health and reloads, and turns `ready` again when a
 * node can (the failure of an earlier command is then history, in `lastStatus`).
 * @module
 */
import { IopError } from "../../../shared/errors.ts";
import { runInput } from "../../../shared/run.ts";
import type { AgentRecord } from "../config.ts";
import type { EdgeEvent } from "../ports.ts";
import type { EdgeService } from "../service.ts";
import { unreachableReason } from "./reachability.ts";
import { type RunOutcome, type RunProgress, runToOutcome } from "./run_outcome.ts";

/**
 * A domain agent's state: ready for a command, running one, its last command failed, or a
 * command of it has no node that can run it now.
 */
export type AgentState = "ready" | "busy" | "error" | "unavailable";

/** Edge events after which a command's reachability may have changed. */
const REACHABILITY_EVENTS: ReadonlySet<EdgeEvent["type"]> = new Set([
  "node_registered",
  "node_disconnected",
  "node_drain_changed",
  "node_config_applied",
  "adapter_health",
  "config_reloaded",
]);

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

  /** Follows the service's node events for reachability; see {@linkcode DomainAgents.refresh}. */
  constructor(service: EdgeService, options: { now?: () => number } = {}) {
    this.#service = service;
    this.#now = options.now ?? Date.now;
    service.subscribe((event) => {
      if (!REACHABILITY_EVENTS.has(event.type)) return;
      // Publishers change the session before they publish, so it is current here.
      this.refresh();
    });
    this.refresh();
  }

  /**
   * Re-evaluates which agents can run their commands now, publishing each change; called on
   * node events, by `list`, and by whoever changes what routing sees without an event (drain).
   */
  refresh(): void {
    for (const record of this.#records()) {
      const live = this.#liveOf(record.id);
      if (live.state === "busy") continue;
      const why = this.#unreachable(record);
      if (why !== undefined) {
        if (live.state !== "unavailable" || live.detail !== why) {
          this.#set(record.id, "unavailable", why);
        }
      } else if (live.state === "unavailable") {
        this.#set(record.id, "ready", "");
      }
    }
  }

  /** Every configured domain agent with its state. */
  list(): AgentView[] {
    this.refresh();
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
    const why = this.#reasonFor(step);
    if (why !== undefined) {
      this.refresh();
      throw new IopError(
        "UNAVAILABLE",
        `Cannot run '${command}' of agent '${agentId}' as no node can run it now: ${why}`,
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
    this.refresh();
    return outcome;
  }

  /** Why some command of the agent cannot run now, command by command; undefined when all can. */
  #unreachable(record: AgentRecord): string | undefined {
    const reasons = record.commands.flatMap((c) => {
      const why = this.#reasonFor(c);
      return why === undefined ? [] : [`${c.name} cannot run: ${why}`];
    });
    return reasons.length === 0 ? undefined : reasons.join("; ");
  }

  #reasonFor(step: { adapter: string; target: string }): string | undefined {
    return unreachableReason(step, {
      sessions: this.#service.sessions(),
      records: this.#service.nodeStore.list(),
    });
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
