/**
 * Cumulative run counters per pool, for the Control Plane's charts: runs started, finished and
 * failed, output tokens, and latency and time-to-first-output histograms. They are fed from the
 * service's event bus (`run_started`, `run_finished`), so the request path pays nothing per
 * token: one map update when a run starts and one when it ends. A pool is the model group of the
 * provider that ran it (its id when it has none), or `<adapter>/<target>` for a run no provider
 * stands for.
 * @module
 */
import type { ActiveRun } from "../active_run.ts";
import type { TerminalRunEvent } from "../../../shared/run.ts";
import type { EdgeService } from "../service.ts";

/** Upper bounds (ms) of the latency and time-to-first-output buckets; a last one is unbounded. */
export const BUCKET_BOUNDS_MS: readonly number[] = [
  1,
  2,
  5,
  10,
  25,
  50,
  100,
  250,
  500,
  1_000,
  2_500,
  5_000,
  10_000,
  30_000,
  60_000,
  300_000,
];

/** Runs started but not seen finishing that are tracked at most (a bound, not a limit on runs). */
const PENDING_KEPT = 10_000;

/** One pool's counters; the bucket arrays have one entry per bound plus the unbounded one. */
export interface PoolTally {
  pool: string;
  runsStarted: number;
  runsFinished: number;
  runsFailed: number;
  tokensOut: number;
  latencyBuckets: number[];
  ttftBuckets: number[];
}

/** How one run ended, as the counters take it. */
export interface FinishedRun {
  status: "completed" | "failed" | "cancelled";
  latencyMs: number;
  /** Dispatch to first output; undefined when the run printed nothing. */
  ttftMs?: number;
  tokensOut: number;
}

/** The counters of every pool that ran something. */
export class RunCounters {
  readonly #pools = new Map<string, PoolTally>();

  /** Counts a run dispatched to `pool`. */
  started(pool: string): void {
    this.#tally(pool).runsStarted++;
  }

  /** Counts a run of `pool` that ended. */
  finished(pool: string, run: FinishedRun): void {
    const t = this.#tally(pool);
    t.runsFinished++;
    if (run.status === "failed") t.runsFailed++;
    t.tokensOut += Math.max(0, run.tokensOut);
    t.latencyBuckets[bucketOf(run.latencyMs)]!++;
    if (run.ttftMs !== undefined) t.ttftBuckets[bucketOf(run.ttftMs)]!++;
  }

  /** Copies of every pool's counters, ordered by pool name. */
  snapshot(): PoolTally[] {
    return [...this.#pools.values()].sort((a, b) => a.pool.localeCompare(b.pool)).map((t) => ({
      ...t,
      latencyBuckets: [...t.latencyBuckets],
      ttftBuckets: [...t.ttftBuckets],
    }));
  }

  #tally(pool: string): PoolTally {
    let t = this.#pools.get(pool);
    if (!t) {
      const empty = () => new Array<number>(BUCKET_BOUNDS_MS.length + 1).fill(0);
      t = {
        pool,
        runsStarted: 0,
        runsFinished: 0,
        runsFailed: 0,
        tokensOut: 0,
        latencyBuckets: empty(),
        ttftBuckets: empty(),
      };
      this.#pools.set(pool, t);
    }
    return t;
  }
}

/** The index of the bucket a duration falls in (its bound is the first one ≥ it). */
export function bucketOf(ms: number): number {
  const i = BUCKET_BOUNDS_MS.findIndex((bound) => ms <= bound);
  return i === -1 ? BUCKET_BOUNDS_MS.length : i;
}

/** The pool of a run: its node's provider for the adapter+target, else `<adapter>/<target>`. */
export function poolOf(
  service: Pick<EdgeService, "config">,
  run: { nodeId: string; adapter: string; target: string },
): string {
  const node = service.config.nodes.find((n) => n.id === run.nodeId);
  const provider = node?.providers.find((p) =>
    p.adapter === run.adapter && p.target === run.target
  );
  if (provider) return provider.modelGroup || provider.id;
  return run.target ? `${run.adapter}/${run.target}` : run.adapter;
}

/**
 * Feeds `counters` from the service's bus until the returned function is called. Tokens and
 * time to first output come from the run's own handle (its terminal usage and the
 * `firstOutputAtMs` the service's run keeps), read once when the run ends.
 */
export function countRuns(
  service: Pick<EdgeService, "config" | "subscribe" | "getRun">,
  counters: RunCounters,
): () => void {
  const pending = new Map<string, { pool: string; handle: ReturnType<EdgeService["getRun"]> }>();
  return service.subscribe((event) => {
    if (event.type === "run_started") {
      const pool = poolOf(service, event);
      counters.started(pool);
      if (pending.size >= PENDING_KEPT) pending.delete(pending.keys().next().value!);
      pending.set(event.runId, { pool, handle: service.getRun(event.runId) });
    } else if (event.type === "run_finished") {
      const entry = pending.get(event.runId);
      pending.delete(event.runId);
      const pool = entry?.pool ?? poolOf(service, event);
      // A run that failed before it was sent never published run_started.
      if (!entry) counters.started(pool);
      const base = { status: event.status, latencyMs: Math.max(0, event.durationMs) };
      const handle = entry?.handle;
      if (!handle) {
        counters.finished(pool, { ...base, tokensOut: 0 });
        return;
      }
      void handle.done.then((terminal) =>
        counters.finished(pool, { ...base, ...runExtras(handle, terminal) })
      );
    }
  });
}

/** Output tokens and time to first output of a finished run, from what its handle kept. */
function runExtras(
  handle: Pick<ActiveRun, "startedAtMs" | "firstOutputAtMs">,
  terminal: TerminalRunEvent,
): { tokensOut: number; ttftMs?: number } {
  const tokensOut = terminal.type === "completed" ? terminal.usage?.outputTokens ?? 0 : 0;
  if (handle.firstOutputAtMs <= 0) return { tokensOut };
  return { tokensOut, ttftMs: Math.max(0, handle.firstOutputAtMs - handle.startedAtMs) };
}
