/**
 * Turns a failure while a service starts (a port already taken, a file it cannot open) into
 * one log line that says what to do, and exit code 2, instead of an uncaught stack trace.
 * @module
 */
import type { Logger } from "./log.ts";

/**
 * Runs one startup step; on failure (a throw, or a rejection when the step returns a promise)
 * logs what the step was and exits the process with 2.
 */
export function startupStep<T>(logger: Logger, step: string, fn: () => T): T {
  try {
    const result = fn();
    if (result instanceof Promise) {
      return result.catch((err) => startupFailed(logger, step, err)) as T;
    }
    return result;
  } catch (err) {
    startupFailed(logger, step, err);
  }
}

/** Logs why the service cannot start and exits with code 2. */
export function startupFailed(logger: Logger, step: string, err: unknown): never {
  const code = (err as { code?: unknown } | null)?.code;
  const hint = err instanceof Deno.errors.AddrInUse || code === "EADDRINUSE"
    ? "the address is already in use: stop the other process or set another port"
    : err instanceof Deno.errors.PermissionDenied || code === "EACCES"
    ? "permission denied"
    : undefined;
  logger.error(`cannot start: ${step}`, { err, ...(hint ? { hint } : {}) });
  Deno.exit(2);
}
