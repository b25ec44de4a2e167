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
  /** Injected for tests; defaults to `performance.now()`, which a stepped wall clock leaves alone. */
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

/** Starts sending heartbeats and watching for the peer's silence: a group of one link. */
export function startHeartbeat(options: HeartbeatOptions): Heartbeat {
  return heartbeatGroup(options).start(options);
}

/** What {@linkcode heartbeatGroup} takes per link: as {@linkcode startHeartbeat}, on its clock. */
export type LinkHeartbeatOptions = Omit<HeartbeatOptions, "now" | "random">;

/** The heartbeats of many links on one timer. */
export interface HeartbeatGroup {
  /** Starts the heartbeat of one link: the contract of {@linkcode startHeartbeat}. */
  start(options: LinkHeartbeatOptions): Heartbeat;
}

/** How early a beat may leave with others due soon after it, as a share of its interval. */
const GROUP_SLACK = 0.05;

interface GroupBeat {
  options: LinkHeartbeatOptions;
  limitMs: number;
  lastSeen: number;
  dueAt: number;
}

/**
 * The heartbeats of many links (an Edge's thousand nodes) on one timer instead of one each.
 * Every beat wakes the process, and a wake-up costs far more than the frame it sends: the
 * group's timer fires for the first beat due and sends every beat due within
 * {@linkcode GROUP_SLACK} of an interval after it too, each still placed at random over
 * ±10 % of its interval, so that links beat together in tens, not in lockstep. A link's silence
 * is judged at each of its beats, as on a timer of its own.
 */
export function heartbeatGroup(
  clock: Pick<HeartbeatOptions, "now" | "random"> = {},
): HeartbeatGroup {
  const now = clock.now ?? (() => performance.now());
  const random = clock.random ?? Math.random;
  const beats = new Set<GroupBeat>();
  let timer: ReturnType<typeof setTimeout> | undefined;
  let armedFor = Infinity;

  const arm = (at: number) => {
    if (timer !== undefined && armedFor <= at) return;
    clearTimeout(timer);
    armedFor = at;
    timer = setTimeout(sweep, Math.max(0, at - now()));
  };
  const sweep = () => {
    // The timer firing says its time has come, even to a clock a test holds still.
    const at = Math.max(now(), armedFor);
    timer = undefined;
    armedFor = Infinity;
    let next = Infinity;
    for (const beat of beats) {
      const { intervalMs } = beat.options;
      if (beat.dueAt <= at + intervalMs * GROUP_SLACK) {
        const silent = at - beat.lastSeen;
        if (silent >= beat.limitMs) {
          beats.delete(beat);
          beat.options.onDead(Math.round(silent)); // whole ms, as logs and errors print it
          continue;
        }
        beat.options.send();
        beat.dueAt = at + nextBeatDelay(intervalMs, random());
      }
      next = Math.min(next, beat.dueAt);
    }
    // A send or onDead above may have stopped every beat, and with it this timer's reason.
    if (beats.size > 0) arm(next);
  };

  return {
    start(options) {
      const beat: GroupBeat = {
        options,
        limitMs: options.intervalMs * (options.missedLimit ?? 3),
        lastSeen: now(),
        dueAt: now() + nextBeatDelay(options.intervalMs, random()),
      };
      beats.add(beat);
      arm(beat.dueAt);
      return {
        seen: () => {
          beat.lastSeen = now();
        },
        stop: () => {
          if (!beats.delete(beat) || beats.size > 0) return;
          clearTimeout(timer);
          timer = undefined;
          armedFor = Infinity;
        },
      };
    },
  };
}
