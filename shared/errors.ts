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

const RETRYABLE_BY_DEFAULT: ReadonlySet<ErrorCode> = new Set([
  "OVERLOADED",
  "UNAVAILABLE",
  "NODE_LOST",
]);

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
    this.retryable = options.retryable ?? RETRYABLE_BY_DEFAULT.has(code);
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
