/**
 * Process metrics every tier exposes next to its own: CPU seconds, resident memory, V8 heap and
 * external memory, open file descriptors and start time (prom-client's default collectors, which
 * read `/proc/self` and `node:process` when scraped), plus an event-loop lag gauge of our own.
 *
 * Under Deno 2.9.6 a few default collectors mislead or fail `promtool check metrics`, so they are
 * removed: the `nodejs_eventloop_lag_*` family (Deno's `monitorEventLoopDelay` does not see a
 * blocked loop), `nodejs_active_{handles,requests,resources}_total` (gauges named like counters),
 * `nodejs_gc_duration_seconds` (Deno emits no GC performance entries) and `nodejs_version_info`
 * (it reports the Node compatibility version, not Deno's). `nodejs_eventloop_lag_seconds` is
 * replaced by the drift of one unref'd 1 s timer: the largest delay seen over the last 15 ticks,
 * so a loop blocked between two scrapes still shows.
 * @module
 */
import { collectDefaultMetrics, Gauge, type Registry } from "prom-client";

/** Default collectors dropped under Deno; see the module doc for why. */
const DROPPED = [
  "nodejs_eventloop_lag_seconds",
  "nodejs_eventloop_lag_min_seconds",
  "nodejs_eventloop_lag_max_seconds",
  "nodejs_eventloop_lag_mean_seconds",
  "nodejs_eventloop_lag_stddev_seconds",
  "nodejs_eventloop_lag_p50_seconds",
  "nodejs_eventloop_lag_p90_seconds",
  "nodejs_eventloop_lag_p99_seconds",
  "nodejs_active_handles",
  "nodejs_active_handles_total",
  "nodejs_active_requests",
  "nodejs_active_requests_total",
  "nodejs_active_resources",
  "nodejs_active_resources_total",
  "nodejs_gc_duration_seconds",
  "nodejs_version_info",
];

/**
 * How often prom-client's own lag collector samples. Its metrics are dropped, but its sampler
 * runs regardless, every 10 ms by default: a hundred wake-ups a second, which were most of what
 * an idle Edge or Node cost. Once a minute it costs nothing.
 */
const DROPPED_LAG_SAMPLE_MS = 60_000;

/** Options of {@linkcode registerProcessMetrics}. */
export interface ProcessMetricsOptions {
  /** Period of the event-loop lag timer in ms (default 1000). */
  tickMs?: number;
  /** How many recent ticks the lag gauge reports the largest of (default 15). */
  window?: number;
}

/** A running lag timer and how many registries read it. */
interface LagSampler {
  max(): number;
  stop(): void;
  refs: number;
}

/** The default-sized sampler, shared by every registry of the process (the loop is one). */
let shared: LagSampler | undefined;

/**
 * Registers the process metrics in `registry`; every value is computed when scraped. Returns a
 * handle that releases the lag timer (one unref'd timer per process, so a service may ignore it).
 */
export function registerProcessMetrics(
  registry: Registry,
  options: ProcessMetricsOptions = {},
): Disposable {
  const tickMs = options.tickMs ?? 1000;
  if (!(tickMs > 0)) {
    throw new RangeError(`Cannot sample event-loop lag as 'tickMs' must be positive: ${tickMs}`);
  }
  collectDefaultMetrics({
    register: registry,
    eventLoopMonitoringPrecision: DROPPED_LAG_SAMPLE_MS,
  });
  for (const name of DROPPED) registry.removeSingleMetric(name);
  const custom = options.tickMs !== undefined || options.window !== undefined;
  const lag = custom
    ? startLagSampler(tickMs, options.window ?? 15)
    : (shared ??= startLagSampler(tickMs, 15));
  lag.refs++;
  new Gauge({
    name: "nodejs_eventloop_lag_seconds",
    help: "Largest event-loop delay over the last ticks of a periodic timer, in seconds.",
    registers: [registry],
    collect() {
      this.set(lag.max());
    },
  });
  let released = false;
  return {
    [Symbol.dispose]() {
      if (released) return;
      released = true;
      if (--lag.refs > 0) return;
      lag.stop();
      if (lag === shared) shared = undefined;
    },
  };
}

/** One unref'd interval timer recording how late each tick fired, in a small ring. */
function startLagSampler(tickMs: number, window: number): LagSampler {
  const recent = new Float64Array(Math.max(1, window));
  let next = 0;
  let expected = performance.now() + tickMs;
  const id = setInterval(() => {
    const now = performance.now();
    recent[next] = Math.max(0, now - expected) / 1000;
    next = (next + 1) % recent.length;
    expected = now + tickMs;
  }, tickMs);
  Deno.unrefTimer(id);
  return {
    max: () => recent.reduce((a, b) => Math.max(a, b), 0),
    stop: () => clearInterval(id),
    refs: 0,
  };
}
