/**
 * Small helpers of the multi-process and cross-tier suites.
 * @module
 */

/** A TCP port on 127.0.0.1 that was free a moment ago (bound, then released). */
export function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

/**
 * Polls `check` until it returns something other than undefined or false (state of another
 * process raises no event to await); fails after `timeoutMs` naming what was awaited and the
 * last error seen.
 */
export async function until<T>(
  what: string,
  check: () => T | undefined | false | Promise<T | undefined | false>,
  timeoutMs = 10_000,
  everyMs = 25,
): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  let last = "";
  while (true) {
    try {
      const value = await check();
      if (value !== undefined && value !== false) return value;
    } catch (err) {
      last = `: ${err instanceof Error ? err.message : String(err)}`;
    }
    if (performance.now() > deadline) {
      throw new Error(`Timed out after ${timeoutMs} ms waiting for ${what}${last}`);
    }
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}
