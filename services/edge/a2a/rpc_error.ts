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
  /**
   * Ours, from JSON-RPC's implementation-defined server-error range: A2A 1.0 has no code for
   * back-pressure ("not now, retry later"), and reusing one of its codes (-32004
   * UnsupportedOperation, say) would tell a client to give up instead of retrying.
   */
  OVERLOADED: -32000,
} as const;

/** Why a request was refused with {@linkcode RPC_CODE.OVERLOADED}, in the error's `data`. */
export type OverloadReason = "tenant_limit" | "store_full" | "overloaded";

/** An error that answers a JSON-RPC request with `code` and `message`. */
export class A2aRpcError extends Error {
  readonly code: number;
  readonly data: unknown;
  /** HTTP status of the answer; absent = 200, as JSON-RPC errors usually travel. */
  readonly httpStatus: number | undefined;
  /** Seconds for the answer's `Retry-After` header; absent = none. */
  readonly retryAfterSeconds: number | undefined;

  constructor(
    code: number,
    message: string,
    data?: unknown,
    http: { status?: number; retryAfterSeconds?: number } = {},
  ) {
    super(message);
    this.name = "A2aRpcError";
    this.code = code;
    this.data = data;
    this.httpStatus = http.status;
    this.retryAfterSeconds = http.retryAfterSeconds;
  }
}

/**
 * A -32000 "Overloaded" error answered with HTTP 429 and `Retry-After`: the request was refused
 * before any work was admitted and may be retried after `retryAfterSeconds`.
 */
export function overloaded(
  message: string,
  retryAfterSeconds: number,
  data: { reason: OverloadReason; limit?: string },
): A2aRpcError {
  const seconds = Math.max(1, Math.ceil(retryAfterSeconds));
  return new A2aRpcError(
    RPC_CODE.OVERLOADED,
    `Overloaded: ${message}`,
    { ...data, retryAfterSeconds: seconds },
    { status: 429, retryAfterSeconds: seconds },
  );
}

/** A -32602 error naming the offending parameter path. */
export function invalidParams(path: string, problem: string): A2aRpcError {
  return new A2aRpcError(RPC_CODE.INVALID_PARAMS, `Invalid params: '${path}' ${problem}`);
}

/** A -32001 error for a task id this agent does not know. */
export function taskNotFound(id: string): A2aRpcError {
  return new A2aRpcError(RPC_CODE.TASK_NOT_FOUND, `Task not found: '${id}'`);
}
