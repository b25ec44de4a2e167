/**
 * Liveness for a long-lived link: send a heartbeat every interval, and declare the peer dead when
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
}

/** A running heartbeat; `seen` records life from the peer, `stop` ends it. */
export interface Heartbeat {
  seen(): void;
  stop(): void;
}

/** Starts sending heartbeats and watching for the peer's silence. */
export function startHeartbeat(options: HeartbeatOptions): Heartbeat {
  const now = options.now ?? Date.now;
  const limitMs = options.intervalMs * (options.missedLimit ?? 3);
  let lastSeen = now();
  let stopped = false;
  const timer = setInterval(() => {
    const silent = now() - lastSeen;
    if (silent >= limitMs) {
      stop();
      options.onDead(silent);
      return;
    }
    options.send();
  }, options.intervalMs);
  const stop = () => {
    if (stopped) return;
    stopped = true;
    clearInterval(timer);
  };
  return {
    seen: () => {
      lastSeen = now();
    },
    stop,
  };
}
