/**
 * Tells a stream when it has been silent for a while, so that it can send a keep-alive (see
 * `http.sse_keepalive_ms`).
 * @module
 */

/** The keep-alive of an SSE stream: a comment, which every SSE parser skips. */
export const SSE_KEEP_ALIVE = ": keep-alive\n\n";

/** A running idle ticker. */
export interface IdleTicker {
  /** The stream just wrote: the silence starts again from now. */
  touch(): void;
  stop(): void;
}

/**
 * Calls `onIdle` each time `everyMs` pass without a `touch`. It keeps one timer, set again when
 * it fires, rather than one per `touch`: a stream touches it for every chunk it writes.
 */
export function idleTicker(everyMs: number, onIdle: () => void): IdleTicker {
  let touchedAt = performance.now();
  let timer: ReturnType<typeof setTimeout> | undefined;
  let stopped = false;
  const arm = (delay: number) => {
    timer = setTimeout(() => {
      if (stopped) return;
      const idle = performance.now() - touchedAt;
      if (idle < everyMs) return arm(everyMs - idle);
      onIdle();
      touchedAt = performance.now();
      arm(everyMs);
    }, delay);
  };
  arm(everyMs);
  return {
    touch: () => {
      touchedAt = performance.now();
    },
    stop: () => {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
