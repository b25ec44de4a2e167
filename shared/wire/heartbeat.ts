/**
 * Liveness for a long-lived link: send a heartbeat about every interval, and declare the peer dead when
 * nothing at all was heard from it for `missedLimit` intervals. Any frame counts as a sign of
 * life, so a busy link needs no extra traffic to stay up.
 * @module
 */

/** Options of {@linkcode startHeartbeat}. */
export interface HeartbeatOptions {
  intervalMs: number;
  /** Intervals of silence after which the peer is dead; defaults to 3. */
  missedLimit?: number;
  /** Sends one heartbeat frame; errors are the connection's business, not the watchdog's. */
  send: () => void;
  /** Called once when the peer is declared dead. */
  onDead: (silentForMs: number) => void;
  /** Injected for tests; defaults to Date.now. */
  now?: () => number;
  /** Source of the ±10 % jitter in [0, 1); defaults to Math.random. */
  random?: () => number;
}

/** A running heartbeat; `seen` records life from the peer, `stop` ends it. */
export interface Heartbeat {
  seen(): void;
  stop(): void;
}

/** The delay before the next beat: `intervalMs` ±10 %, placed by `r` in [0, 1). */
export function nextBeatDelay(intervalMs: number, r: number): number {
  return intervalMs * (0.9 + 0.2 * r);
}

/** Starts sending heartbeats and watching for the peer's silence. */
export function startHeartbeat(options: HeartbeatOptions): Heartbeat {
  const now = options.now ?? Date.now;
  const random = options.random ?? Math.random;
  const limitMs = options.intervalMs * (options.missedLimit ?? 3);
  let lastSeen = now();
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  // Each beat lands at a random point of ±10 % around the interval, so that links opened
  // together (a fleet reconnecting after an Edge restart) do not beat in lockstep.
  const schedule = () => {
    timer = setTimeout(tick, nextBeatDelay(options.intervalMs, random()));
  };
  const tick = () => {
    const silent = now() - lastSeen;
    if (silent >= limitMs) {
      stop();
      options.onDead(silent);
      return;
    }
    options.send();
    schedule();
  };
  const stop = () => {
    if (stopped) return;
    stopped = true;
    clearTimeout(timer);
  };
  schedule();
  return {
    seen: () => {
      lastSeen = now();
    },
    stop,
  };
}
