/**
 * The one error type IOP components throw and put on the wire: a stable `code`, whether a retry
 * of the same idempotent operation may succeed, and the original error as `cause`.
 * @module
 */

/** Stable error codes shared by every tier; the HTTP surfaces map each to a status. */
export const ERROR_CODES = [
  "INVALID_ARGUMENT",
  "NOT_FOUND",
  "UNAUTHENTICATED",
  "OVERLOADED",
  "UNAVAILABLE",
  "TIMEOUT",
  "CANCELLED",
  "BACKEND_ERROR",
  "NODE_LOST",
  "INTERNAL",
] as const;

/** One of {@linkcode ERROR_CODES}. */
export type ErrorCode = typeof ERROR_CODES[number];

/** What one error code means to whoever receives it. */
export interface ErrorKind {
  /** A retry of the same idempotent operation may succeed (the default of `retryable`). */
  retryable: boolean;
  /** Status of an HTTP answer carrying this error. */
  httpStatus: number;
  /** The `error.code` of an OpenAI-shaped answer. */
  openaiCode: string;
}

/**
 * Every error code's meaning, in one table: the compiler refuses a code without its row, so a
 * new code cannot reach a surface without a status, or a peer without a retry rule.
 */
export const ERROR_KINDS = {
  INVALID_ARGUMENT: { retryable: false, httpStatus: 400, openaiCode: "invalid_argument" },
  NOT_FOUND: { retryable: false, httpStatus: 404, openaiCode: "model_not_found" },
  UNAUTHENTICATED: { retryable: false, httpStatus: 401, openaiCode: "invalid_api_key" },
  OVERLOADED: { retryable: true, httpStatus: 429, openaiCode: "rate_limit_exceeded" },
  UNAVAILABLE: { retryable: true, httpStatus: 503, openaiCode: "unavailable" },
  TIMEOUT: { retryable: false, httpStatus: 504, openaiCode: "timeout" },
  CANCELLED: { retryable: false, httpStatus: 499, openaiCode: "cancelled" },
  BACKEND_ERROR: { retryable: false, httpStatus: 500, openaiCode: "backend_error" },
  NODE_LOST: { retryable: true, httpStatus: 503, openaiCode: "node_lost" },
  INTERNAL: { retryable: false, httpStatus: 500, openaiCode: "internal" },
} as const satisfies Record<ErrorCode, ErrorKind>;

/** The meaning of `code`; a code this build does not know reads as INTERNAL. */
export function errorKind(code: string): ErrorKind {
  return isErrorCode(code) ? ERROR_KINDS[code] : ERROR_KINDS.INTERNAL;
}

/** The HTTP status of an error code. */
export function httpStatusOf(code: string): number {
  return errorKind(code).httpStatus;
}

/** Options for {@linkcode IopError}. */
export interface IopErrorOptions {
  /** Defaults to true for OVERLOADED, UNAVAILABLE and NODE_LOST, false otherwise. */
  retryable?: boolean;
  cause?: unknown;
  /** Exit code of the process that failed, for CLI runs. */
  exitCode?: number;
}

/** An error with a stable code that callers and peers can act on. */
export class IopError extends Error {
  readonly code: ErrorCode;
  readonly retryable: boolean;
  readonly exitCode: number | undefined;

  constructor(code: ErrorCode, message: string, options: IopErrorOptions = {}) {
    super(message, { cause: options.cause });
    this.name = "IopError";
    this.code = code;
    this.retryable = options.retryable ?? ERROR_KINDS[code].retryable;
    this.exitCode = options.exitCode;
  }
}

/** Converts anything thrown into an IopError, keeping IopErrors as they are. */
export function toIopError(err: unknown, fallback: ErrorCode = "INTERNAL"): IopError {
  if (err instanceof IopError) return err;
  if (err instanceof DOMException && err.name === "AbortError") {
    return new IopError("CANCELLED", "Operation was cancelled", { cause: err });
  }
  if (err instanceof DOMException && err.name === "TimeoutError") {
    return new IopError("TIMEOUT", err.message, { cause: err });
  }
  const message = err instanceof Error ? err.message : String(err);
  return new IopError(fallback, message, { cause: err });
}

/** Returns true for codes that are a known IOP error code. */
export function isErrorCode(code: string): code is ErrorCode {
  return (ERROR_CODES as readonly string[]).includes(code);
}

/** OVERLOADED with the number of seconds after which a retry may be admitted. */
export class OverloadedError extends IopError {
  /** Seconds a client should wait before retrying (HTTP `Retry-After`). */
  readonly retryAfterSeconds: number;

  constructor(message: string, retryAfterSeconds: number) {
    super("OVERLOADED", message);
    this.name = "OverloadedError";
    this.retryAfterSeconds = retryAfterSeconds;
  }
}

/**
 * Ends an exhaustive switch: its argument must have been narrowed to `never`, so a case added to
 * a union (a new envelope message, say) fails to compile until it is handled.
 */
export function unhandled(value: never, what: string): never {
  const label = (value as { case?: unknown } | undefined)?.case ?? value;
  throw new IopError("INTERNAL", `Cannot handle ${what} '${String(label)}'`);
}
