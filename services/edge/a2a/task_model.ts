/**
 * The A2A task model the Edge keeps, independent of the protocol version a client speaks: the
 * 1.0 and 0.3 codecs translate it to and from their JSON shapes. Types and small helpers only.
 * @module
 */
import { ANONYMOUS_TENANT, DEFAULT_TENANT } from "../tenants/tenant.ts";

/** Task states, in A2A 0.3 spelling (the 1.0 codec maps them to `TASK_STATE_*`). */
export type TaskState =
  | "submitted"
  | "working"
  | "input-required"
  | "auth-required"
  | "completed"
  | "canceled"
  | "failed"
  | "rejected";

/** One piece of message or artifact content. */
export type A2aPart =
  | { kind: "text"; text: string; metadata?: Record<string, unknown> }
  | { kind: "data"; data: unknown; metadata?: Record<string, unknown> }
  | {
    kind: "file";
    /** Exactly one of `url` and `raw` (base64) is set. */
    url?: string;
    raw?: string;
    mediaType: string;
    filename: string;
    metadata?: Record<string, unknown>;
  };

/** A message from the client (`user`) or from the agent. */
export interface A2aMessage {
  messageId: string;
  role: "user" | "agent";
  parts: A2aPart[];
  /** Empty when the client did not give one. */
  contextId: string;
  /** Empty when the client did not give one. */
  taskId: string;
  metadata?: Record<string, unknown>;
}

/** An output of a task. */
export interface A2aArtifact {
  artifactId: string;
  name: string;
  parts: A2aPart[];
}

/** Where a task stands. */
export interface A2aStatus {
  state: TaskState;
  message?: A2aMessage;
  timestampMs: number;
}

/** A task: one A2A request run as one IOP run. */
export interface A2aTask {
  id: string;
  contextId: string;
  /** The published agent that owns the task. */
  agentId: string;
  /**
   * The tenant that created the task; only it may read, cancel, watch or continue the task or
   * its context. {@linkcode LEGACY_OWNER} for a task stored before tenants existed.
   */
  owner: string;
  status: A2aStatus;
  artifacts: A2aArtifact[];
  history: A2aMessage[];
  createdAtMs: number;
  /** The IOP run executing the task; empty before dispatch. */
  runId: string;
  metadata?: Record<string, unknown>;
}

/**
 * The owner of tasks stored before tenants existed (the store's migration gives old rows this
 * value). Such a task belongs to the callers that could reach it then: the tenant
 * {@linkcode DEFAULT_TENANT} that the older `http.api_keys` stand for, and {@linkcode
 * ANONYMOUS_TENANT} of an Edge without keys; tenants from the `tenants` list never see it.
 */
export const LEGACY_OWNER = "";

/** True when the tenant named `tenant` owns `task` (see {@linkcode LEGACY_OWNER}). */
export function ownedBy(task: Pick<A2aTask, "owner">, tenant: string): boolean {
  if (task.owner === LEGACY_OWNER) return tenant === DEFAULT_TENANT || tenant === ANONYMOUS_TENANT;
  return task.owner === tenant;
}

/** A change of a task that streams carry. */
export type TaskUpdate =
  | { kind: "status"; taskId: string; contextId: string; status: A2aStatus; final: boolean }
  | {
    kind: "artifact";
    taskId: string;
    contextId: string;
    artifact: A2aArtifact;
    append: boolean;
    lastChunk: boolean;
  };

const TERMINAL: ReadonlySet<TaskState> = new Set(["completed", "canceled", "failed", "rejected"]);

/** True for states after which a task never changes again. */
export function isTerminalState(state: TaskState): boolean {
  return TERMINAL.has(state);
}

/** True for states at which a stream closes: terminal or waiting on the client. */
export function isFinalState(state: TaskState): boolean {
  return TERMINAL.has(state) || state === "input-required" || state === "auth-required";
}

/** A task with its history cut to the last `historyLength` messages (undefined keeps all). */
export function withHistory(task: A2aTask, historyLength: number | undefined): A2aTask {
  if (historyLength === undefined) return task;
  return { ...task, history: historyLength === 0 ? [] : task.history.slice(-historyLength) };
}

/** The prompt a run gets from a message: its text parts, with other parts described inline. */
export function promptOf(message: A2aMessage): string {
  return message.parts.map((part) => {
    switch (part.kind) {
      case "text":
        return part.text;
      case "data":
        return JSON.stringify(part.data);
      case "file":
        if (part.raw !== undefined && part.mediaType.startsWith("text/")) {
          return new TextDecoder().decode(Uint8Array.from(atob(part.raw), (c) => c.charCodeAt(0)));
        }
        return `[file ${part.filename || part.url || "(unnamed)"}${
          part.mediaType ? ` (${part.mediaType})` : ""
        }]`;
    }
  }).join("\n");
}

/** An agent message with one text part. */
export function agentText(
  text: string,
  task: { id: string; contextId: string },
  metadata?: Record<string, unknown>,
): A2aMessage {
  return {
    messageId: crypto.randomUUID(),
    role: "agent",
    parts: [{ kind: "text", text }],
    contextId: task.contextId,
    taskId: task.id,
    ...(metadata ? { metadata } : {}),
  };
}
