/**
 * A2A 0.3 JSON: slash method names, objects tagged with `kind`, lowercase states, file parts as
 * `{kind:"file", file:{bytes|uri}}`, and status events carrying the `final` flag.
 * @module
 */
import type { A2aOperation, Dialect, ListParams, SendParams } from "./dialect.ts";
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
import { A2aRpcError, invalidParams, RPC_CODE } from "./rpc_error.ts";
import type {
  A2aArtifact,
  A2aMessage,
  A2aPart,
  A2aStatus,
  A2aTask,
  TaskUpdate,
} from "./task_model.ts";

const METHODS = new Map<string, A2aOperation>([
  ["message/send", "send"],
  ["message/stream", "stream"],
  ["tasks/get", "get"],
  ["tasks/cancel", "cancel"],
  ["tasks/resubscribe", "subscribe"],
  ["tasks/pushNotificationConfig/set", "push_config"],
  ["tasks/pushNotificationConfig/get", "push_config"],
  ["tasks/pushNotificationConfig/list", "push_config"],
  ["tasks/pushNotificationConfig/delete", "push_config"],
  ["agent/getAuthenticatedExtendedCard", "extended_card"],
]);

function decodePart(value: unknown, path: string): A2aPart {
  const p = object(value, path);
  const metadata = optMetadata(p, path);
  const meta = metadata ? { metadata } : {};
  switch (p.kind) {
    case "text":
      if (typeof p.text !== "string") throw invalidParams(`${path}.text`, "must be a string");
      return { kind: "text", text: p.text, ...meta };
    case "data":
      return { kind: "data", data: object(p.data, `${path}.data`), ...meta };
    case "file": {
      const f = object(p.file, `${path}.file`);
      const fpath = `${path}.file`;
      const mediaType = optStr(f, "mimeType", fpath);
      const filename = optStr(f, "name", fpath);
      if (typeof f.bytes === "string") {
        return { kind: "file", raw: f.bytes, mediaType, filename, ...meta };
      }
      return { kind: "file", url: str(f, "uri", fpath), mediaType, filename, ...meta };
    }
    default:
      throw invalidParams(`${path}.kind`, "must be 'text', 'file' or 'data'");
  }
}

function decodeMessage(value: unknown, path: string): A2aMessage {
  const m = object(value, path);
  if (m.kind !== "message") throw invalidParams(`${path}.kind`, "must be 'message'");
  if (m.role !== "user") throw invalidParams(`${path}.role`, "must be 'user'");
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
      return { kind: "text", text: part.text, ...meta };
    case "data":
      return isObject(part.data) ? { kind: "data", data: part.data, ...meta } : {
        kind: "data",
        data: { value: part.data },
        metadata: { ...meta.metadata, data_part_compat: true },
      };
    case "file":
      return {
        kind: "file",
        file: {
          ...(part.raw !== undefined ? { bytes: part.raw } : { uri: part.url ?? "" }),
          ...(part.mediaType ? { mimeType: part.mediaType } : {}),
          ...(part.filename ? { name: part.filename } : {}),
        },
        ...meta,
      };
  }
}

function encodeMessage(m: A2aMessage): JsonObject {
  return {
    kind: "message",
    messageId: m.messageId,
    role: m.role,
    parts: m.parts.map(encodePart),
    ...(m.contextId ? { contextId: m.contextId } : {}),
    ...(m.taskId ? { taskId: m.taskId } : {}),
    ...(m.metadata ? { metadata: m.metadata } : {}),
  };
}

function encodeStatus(s: A2aStatus): JsonObject {
  return {
    state: s.state,
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
    kind: "task",
    id: t.id,
    contextId: t.contextId,
    status: encodeStatus(t.status),
    artifacts: t.artifacts.map(encodeArtifact),
    history: t.history.map(encodeMessage),
    ...(t.metadata ? { metadata: t.metadata } : {}),
  };
}

function params(value: unknown): JsonObject {
  if (!isObject(value)) throw invalidParams("params", "must be an object");
  return value;
}

/** The A2A 0.3 dialect. */
export const V03_DIALECT: Dialect = {
  version: "0.3",
  methods: METHODS,
  decodeSend(raw): SendParams {
    const p = params(raw);
    const config = optObject(p, "configuration", "params") ?? {};
    return {
      message: decodeMessage(p.message, "params.message"),
      blocking: optBool(config, "blocking", "params.configuration") ?? true,
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
  decodeList(): ListParams {
    throw new A2aRpcError(RPC_CODE.METHOD_NOT_FOUND, "Method not found: A2A 0.3 has no task list");
  },
  encodeSendResult: encodeTask,
  encodeTask,
  encodePage: (page) => ({ tasks: page.tasks.map(encodeTask), nextPageToken: page.nextPageToken }),
  encodeStreamTask: encodeTask,
  encodeStreamUpdate(u: TaskUpdate) {
    if (u.kind === "status") {
      return {
        kind: "status-update",
        taskId: u.taskId,
        contextId: u.contextId,
        status: encodeStatus(u.status),
        final: u.final,
      };
    }
    return {
      kind: "artifact-update",
      taskId: u.taskId,
      contextId: u.contextId,
      artifact: encodeArtifact(u.artifact),
      append: u.append,
      lastChunk: u.lastChunk,
    };
  },
};
