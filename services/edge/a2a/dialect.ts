/**
 * What differs between A2A 1.0 and 0.3 on the same JSON-RPC endpoint: method names, how params
 * are read and how tasks, messages and stream events are written. The dispatcher is the same.
 * @module
 */
import type { A2aMessage, A2aTask, TaskState, TaskUpdate } from "./task_model.ts";

/** The operations both versions offer, whatever their method names. */
export type A2aOperation =
  | "send"
  | "stream"
  | "get"
  | "list"
  | "cancel"
  | "subscribe"
  | "push_config"
  | "extended_card";

/** A decoded send request. */
export interface SendParams {
  message: A2aMessage;
  /** False when the client asked for an immediate answer instead of waiting for the end. */
  blocking: boolean;
  historyLength: number | undefined;
}

/** A decoded list request. */
export interface ListParams {
  contextId: string;
  state: TaskState | undefined;
  pageSize: number;
  pageToken: string;
  historyLength: number | undefined;
  includeArtifacts: boolean;
  statusTimestampAfterMs: number | undefined;
}

/** A page of tasks. */
export interface TaskPage {
  tasks: A2aTask[];
  nextPageToken: string;
  pageSize: number;
  totalSize: number;
}

/** One protocol version's methods and JSON codec. */
export interface Dialect {
  readonly version: "1.0" | "0.3";
  /** Method name → operation. */
  readonly methods: ReadonlyMap<string, A2aOperation>;
  decodeSend(params: unknown): SendParams;
  decodeTaskQuery(params: unknown): { id: string; historyLength: number | undefined };
  decodeTaskId(params: unknown): { id: string };
  decodeList(params: unknown): ListParams;
  /** The result of a blocking or non-blocking send. */
  encodeSendResult(task: A2aTask): unknown;
  /** A task as GetTask / CancelTask return it. */
  encodeTask(task: A2aTask): unknown;
  encodePage(page: TaskPage): unknown;
  /** The first event of a stream: the task as it stands. */
  encodeStreamTask(task: A2aTask): unknown;
  encodeStreamUpdate(update: TaskUpdate): unknown;
}
