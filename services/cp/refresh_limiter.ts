/**
 * Rate limit for status refreshes that ask edges for a fresh snapshot: at most one per key
 * (`fleet` for a fan-out to every edge, `edge:<id>` for one edge) per interval. A refresh asked
 * for within the interval is not refused: it waits for the one in flight, if any, and the caller
 * serves what the registry holds, saying it was not refreshed.
 * @module
 */

/** How a refresh request was handled. */
export interface RefreshOutcome {
  /** True when this call asked the edges; false when served from the last refresh. */
  performed: boolean;
  /** When the last refresh for this key started (ms since the epoch). */
  lastAtMs: number;
  /** The earliest time another refresh for this key will ask the edges. */
  nextAtMs: number;
}

/** Options of {@linkcode RefreshLimiter}. */
export interface RefreshLimiterOptions {
  /** 0 lets every refresh through. */
  minIntervalMs: number;
  /** Defaults to Date.now. */
  now?: () => number;
}

interface KeyState {
  lastAtMs: number;
  inFlight: Promise<void> | undefined;
}

/** Lets at most one refresh per key through per interval. */
export class RefreshLimiter {
  readonly #minIntervalMs: number;
  readonly #now: () => number;
  readonly #keys = new Map<string, KeyState>();

  constructor(options: RefreshLimiterOptions) {
    this.#minIntervalMs = options.minIntervalMs;
    this.#now = options.now ?? Date.now;
  }

  /**
   * Runs `refresh` unless one for `key` started less than the interval ago; then waits for that
   * one if it is still running. A failed refresh is not an error here: the caller serves what
   * the registry holds either way.
   */
  async run(key: string, refresh: () => Promise<void>): Promise<RefreshOutcome> {
    const now = this.#now();
    this.#forgetOld(now);
    const known = this.#keys.get(key);
    if (known && now - known.lastAtMs < this.#minIntervalMs) {
      await known.inFlight;
      return { performed: false, lastAtMs: known.lastAtMs, nextAtMs: this.#nextAt(known) };
    }
    const state: KeyState = { lastAtMs: now, inFlight: undefined };
    this.#keys.set(key, state);
    state.inFlight = refresh().catch(() => {}).finally(() => state.inFlight = undefined);
    await state.inFlight;
    return { performed: true, lastAtMs: now, nextAtMs: this.#nextAt(state) };
  }

  #nextAt(state: KeyState): number {
    return state.lastAtMs + this.#minIntervalMs;
  }

  /** Drops keys whose interval has passed, so edge ids asked about once do not pile up. */
  #forgetOld(now: number): void {
    for (const [key, state] of this.#keys) {
      if (!state.inFlight && now - state.lastAtMs >= this.#minIntervalMs) this.#keys.delete(key);
    }
  }
}
