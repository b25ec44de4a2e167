/**
 * JSON-RPC and A2A error codes, and the error the A2A layer throws to answer a request with one.
 * @module
 */

/** Error codes of JSON-RPC 2.0 and of A2A (both versions use the same numbers). */
export const RPC_CODE = {
  PARSE_ERROR: -32700,
  INVALID_REQUEST: -32600,
  METHOD_NOT_FOUND: -32601,
  INVALID_PARAMS: -32602,
  INTERNAL_ERROR: -32603,
  TASK_NOT_FOUND: -32001,
  TASK_NOT_CANCELABLE: -32002,
  PUSH_NOTIFICATION_NOT_SUPPORTED: -32003,
  UNSUPPORTED_OPERATION: -32004,
  CONTENT_TYPE_NOT_SUPPORTED: -32005,
  VERSION_NOT_SUPPORTED: -32009,
} as const;

/** An error that answers a JSON-RPC request with `code` and `message`. */
export class A2aRpcError extends Error {
  readonly code: number;
  readonly data: unknown;

  constructor(code: number, message: string, data?: unknown) {
    super(message);
    this.name = "A2aRpcError";
    this.code = code;
    this.data = data;
  }
}

/** A -32602 error naming the offending parameter path. */
export function invalidParams(path: string, problem: string): A2aRpcError {
  return new A2aRpcError(RPC_CODE.INVALID_PARAMS, `Invalid params: '${path}' ${problem}`);
}

/** A -32001 error for a task id this agent does not know. */
export function taskNotFound(id: string): A2aRpcError {
  return new A2aRpcError(RPC_CODE.TASK_NOT_FOUND, `Task not found: '${id}'`);
}
