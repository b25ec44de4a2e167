/**
 * A2A 1.0 JSON: `TASK_STATE_*` and `ROLE_*` enum strings, parts as a oneof of
 * `text | raw | url | data`, stream events as `{task}` / `{statusUpdate}` / `{artifactUpdate}`.
 * @module
 */
import type { A2aOperation, Dialect, ListParams, SendParams, TaskPage } from "./dialect.ts";
import {
  isObject,
  type JsonObject,
  nonEmptyArray,
  object,
  optBool,
  optInt,
  optMetadata,
  optObject,
  optStr,
  str,
} from "./params.ts";
import { invalidParams } from "./rpc_error.ts";
import type {
  A2aArtifact,
  A2aMessage,
  A2aPart,
  A2aStatus,
  A2aTask,
  TaskState,
  TaskUpdate,
} from "./task_model.ts";

const STATE_TO_V1: Record<TaskState, string> = {
  "submitted": "TASK_STATE_SUBMITTED",
  "working": "TASK_STATE_WORKING",
  "input-required": "TASK_STATE_INPUT_REQUIRED",
  "auth-required": "TASK_STATE_AUTH_REQUIRED",
  "completed": "TASK_STATE_COMPLETED",
  "canceled": "TASK_STATE_CANCELED",
  "failed": "TASK_STATE_FAILED",
  "rejected": "TASK_STATE_REJECTED",
};
const V1_TO_STATE = new Map(
  Object.entries(STATE_TO_V1).map(([k, v]) => [v, k as TaskState]),
);

const METHODS = new Map<string, A2aOperation>([
  ["SendMessage", "send"],
  ["SendStreamingMessage", "stream"],
  ["GetTask", "get"],
  ["ListTasks", "list"],
  ["CancelTask", "cancel"],
  ["SubscribeToTask", "subscribe"],
  ["CreateTaskPushNotificationConfig", "push_config"],
  ["GetTaskPushNotificationConfig", "push_config"],
  ["ListTaskPushNotificationConfigs", "push_config"],
  ["DeleteTaskPushNotificationConfig", "push_config"],
  ["GetExtendedAgentCard", "extended_card"],
]);

function decodePart(value: unknown, path: string): A2aPart {
  const p = object(value, path);
  const metadata = optMetadata(p, path);
  const meta = metadata ? { metadata } : {};
  const present = ["text", "raw", "url", "data"].filter((k) => p[k] !== undefined && p[k] !== null);
  if (present.length !== 1) {
    throw invalidParams(path, "must have exactly one of 'text', 'raw', 'url' or 'data'");
  }
  const mediaType = optStr(p, "mediaType", path);
  const filename = optStr(p, "filename", path);
  switch (present[0]) {
    case "text":
      if (typeof p.text !== "string") throw invalidParams(`${path}.text`, "must be a string");
      return { kind: "text", text: p.text, ...meta };
    case "raw":
      if (typeof p.raw !== "string") throw invalidParams(`${path}.raw`, "must be base64 text");
      return { kind: "file", raw: p.raw, mediaType, filename, ...meta };
    case "url":
      return { kind: "file", url: str(p, "url", path), mediaType, filename, ...meta };
    default:
      return { kind: "data", data: p.data, ...meta };
  }
}

function decodeMessage(value: unknown, path: string): A2aMessage {
  const m = object(value, path);
  const role = m.role;
  if (role !== "ROLE_USER") throw invalidParams(`${path}.role`, "must be 'ROLE_USER'");
  const metadata = optMetadata(m, path);
  return {
    messageId: str(m, "messageId", path),
    role: "user",
    parts: nonEmptyArray(m, "parts", path).map((p, i) => decodePart(p, `${path}.parts[${i}]`)),
    contextId: optStr(m, "contextId", path),
    taskId: optStr(m, "taskId", path),
    ...(metadata ? { metadata } : {}),
  };
}

function encodePart(part: A2aPart): JsonObject {
  const meta = part.metadata ? { metadata: part.metadata } : {};
  switch (part.kind) {
    case "text":
      return { text: part.text, ...meta };
    case "data":
      return { data: part.data, ...meta };
    case "file":
      return {
        ...(part.raw !== undefined ? { raw: part.raw } : { url: part.url ?? "" }),
        ...(part.mediaType ? { mediaType: part.mediaType } : {}),
        ...(part.filename ? { filename: part.filename } : {}),
        ...meta,
      };
  }
}

function encodeMessage(m: A2aMessage): JsonObject {
  return {
    messageId: m.messageId,
    ...(m.contextId ? { contextId: m.contextId } : {}),
    ...(m.taskId ? { taskId: m.taskId } : {}),
    role: m.role === "user" ? "ROLE_USER" : "ROLE_AGENT",
    parts: m.parts.map(encodePart),
    ...(m.metadata ? { metadata: m.metadata } : {}),
  };
}

function encodeStatus(s: A2aStatus): JsonObject {
  return {
    state: STATE_TO_V1[s.state],
    ...(s.message ? { message: encodeMessage(s.message) } : {}),
    timestamp: new Date(s.timestampMs).toISOString(),
  };
}

function encodeArtifact(a: A2aArtifact): JsonObject {
  return {
    artifactId: a.artifactId,
    ...(a.name ? { name: a.name } : {}),
    parts: a.parts.map(encodePart),
  };
}

function encodeTask(t: A2aTask): JsonObject {
  return {
    id: t.id,
    contextId: t.contextId,
    status: encodeStatus(t.status),
    artifacts: t.artifacts.map(encodeArtifact),
    history: t.history.map(encodeMessage),
    ...(t.metadata ? { metadata: t.metadata } : {}),
  };
}

function params(value: unknown): JsonObject {
  if (value === undefined) return {};
  if (!isObject(value)) throw invalidParams("params", "must be an object");
  return value;
}

/** The A2A 1.0 dialect. */
export const V1_DIALECT: Dialect = {
  version: "1.0",
  methods: METHODS,
  decodeSend(raw): SendParams {
    const p = params(raw);
    const config = optObject(p, "configuration", "params") ?? {};
    return {
      message: decodeMessage(p.message, "params.message"),
      blocking: !(optBool(config, "returnImmediately", "params.configuration") ?? false),
      historyLength: optInt(config, "historyLength", "params.configuration"),
    };
  },
  decodeTaskQuery(raw) {
    const p = params(raw);
    return { id: str(p, "id", "params"), historyLength: optInt(p, "historyLength", "params") };
  },
  decodeTaskId(raw) {
    return { id: str(params(raw), "id", "params") };
  },
  decodeList(raw): ListParams {
    const p = params(raw);
    const status = optStr(p, "status", "params");
    let state: TaskState | undefined;
    if (status !== "" && status !== "TASK_STATE_UNSPECIFIED") {
      state = V1_TO_STATE.get(status);
      if (!state) throw invalidParams("params.status", `is not a task state: '${status}'`);
    }
    const pageSize = optInt(p, "pageSize", "params") ?? 50;
    if (pageSize < 1 || pageSize > 100) {
      throw invalidParams("params.pageSize", "must be between 1 and 100");
    }
    const after = optStr(p, "statusTimestampAfter", "params");
    const afterMs = after === "" ? undefined : Date.parse(after);
    if (afterMs !== undefined && Number.isNaN(afterMs)) {
      throw invalidParams("params.statusTimestampAfter", "must be an RFC 3339 timestamp");
    }
    return {
      contextId: optStr(p, "contextId", "params"),
      state,
      pageSize,
      pageToken: optStr(p, "pageToken", "params"),
      historyLength: optInt(p, "historyLength", "params"),
      includeArtifacts: optBool(p, "includeArtifacts", "params") ?? false,
      statusTimestampAfterMs: afterMs,
    };
  },
  encodeSendResult: (task) => ({ task: encodeTask(task) }),
  encodeTask,
  encodePage: (page: TaskPage) => ({
    tasks: page.tasks.map(encodeTask),
    nextPageToken: page.nextPageToken,
    pageSize: page.pageSize,
    totalSize: page.totalSize,
  }),
  encodeStreamTask: (task) => ({ task: encodeTask(task) }),
  encodeStreamUpdate(u: TaskUpdate) {
    if (u.kind === "status") {
      return {
        statusUpdate: { taskId: u.taskId, contextId: u.contextId, status: encodeStatus(u.status) },
      };
    }
    return {
      artifactUpdate: {
        taskId: u.taskId,
        contextId: u.contextId,
        artifact: encodeArtifact(u.artifact),
        append: u.append,
        lastChunk: u.lastChunk,
      },
    };
  },
};
