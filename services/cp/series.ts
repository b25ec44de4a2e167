/**
 * The Control Plane's time series of edge reports, kept for its dashboard's charts: a bounded
 * ring per edge of samples, each the change between two status reports (rates per second, and
 * latency and time-to-first-output percentiles of the runs that ended in between) plus the
 * gauges of the newer one, per pool and for the whole edge. Reports come more often than
 * samples (after events, on refresh): one closer than 80 % of the sample interval to the last
 * sample is skipped, which loses nothing, as the counters are cumulative. Nothing is persisted.
 * @module
 */
import type { EdgeStatusResponse, PoolCounters } from "../../proto/gen/iop/v1/control_pb.ts";
import { countsDelta, histogramQuantile, perSecond, sumCounts } from "./series_math.ts";

/** One point of a chart line: rates over the interval, gauges at its end. */
export interface SeriesPoint {
  requestsPerS: number;
  tokensPerS: number;
  failedPerS: number;
  queueDepth: number;
  runsInFlight: number;
  /** Null when no run ended in the interval. */
  latencyP50Ms: number | null;
  latencyP95Ms: number | null;
  /** Null when no run printed its first output in the interval. */
  ttftP50Ms: number | null;
  ttftP95Ms: number | null;
}

/** One sample of an edge: the whole edge and each of its pools. */
export interface SeriesSample {
  /** When the Control Plane received the newer report. */
  atMs: number;
  /** The length of the interval the rates cover. */
  intervalMs: number;
  edge: SeriesPoint;
  pools: Record<string, SeriesPoint>;
}

/** Options of {@linkcode SeriesStore}. */
export interface SeriesStoreOptions {
  /** The interval between samples the Control Plane asks for (ms). */
  sampleIntervalMs: number;
  /** How far back samples are kept (ms), e.g. 15 minutes. */
  windowMs: number;
}

/** The counters of the report a sample was last taken from. */
interface Base {
  atMs: number;
  startedAtMs: bigint;
  bounds: number[];
  pools: Map<string, Tally>;
}

interface Tally {
  finished: number;
  failed: number;
  tokensOut: number;
  latency: number[];
  ttft: number[];
}

interface Ring {
  base: Base | undefined;
  samples: SeriesSample[];
}

/** Per-edge rings of samples. */
export class SeriesStore {
  readonly #rings = new Map<string, Ring>();
  readonly #listeners = new Set<(edgeId: string, sample: SeriesSample) => void>();
  readonly #options: SeriesStoreOptions;

  constructor(options: SeriesStoreOptions) {
    if (!(options.sampleIntervalMs > 0) || !(options.windowMs >= options.sampleIntervalMs)) {
      throw new RangeError(
        "Cannot keep series as 'windowMs' must be at least 'sampleIntervalMs' > 0: current " +
          `values are ${options.windowMs} and ${options.sampleIntervalMs}`,
      );
    }
    this.#options = options;
  }

  /** The most samples an edge keeps. */
  get capacity(): number {
    return Math.ceil(this.#options.windowMs / this.#options.sampleIntervalMs) + 1;
  }

  /** The sample interval and window, for clients. */
  get options(): Readonly<SeriesStoreOptions> {
    return this.#options;
  }

  /** Calls `listener` with every new sample. */
  subscribe(listener: (edgeId: string, sample: SeriesSample) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * Takes an edge's status report received at `atMs`; returns the sample it made, or undefined
   * (the first report, or one too close to the last sample).
   */
  record(edgeId: string, status: EdgeStatusResponse, atMs: number): SeriesSample | undefined {
    if (!status.edge) return undefined; // a node query's answer, not a report
    let ring = this.#rings.get(edgeId);
    if (!ring) this.#rings.set(edgeId, ring = { base: undefined, samples: [] });
    const previous = ring.base;
    if (previous && atMs - previous.atMs < this.#options.sampleIntervalMs * 0.8) return undefined;
    const base = baseOf(status, atMs);
    ring.base = base;
    if (!previous) return undefined;
    // A restarted edge counts from zero again.
    const restarted = previous.startedAtMs !== base.startedAtMs;
    const sample = sampleOf(restarted ? undefined : previous, base, status, atMs - previous.atMs);
    ring.samples.push(sample);
    const oldest = atMs - this.#options.windowMs;
    while (
      ring.samples.length > this.capacity || (ring.samples[0] && ring.samples[0].atMs < oldest)
    ) ring.samples.shift();
    for (const listener of this.#listeners) {
      try {
        listener(edgeId, sample);
      } catch {
        // A broken subscriber must not stop the others.
      }
    }
    return sample;
  }

  /** An edge's samples, oldest first, newer than `sinceMs` when given; undefined when unknown. */
  samples(edgeId: string, sinceMs = 0): SeriesSample[] | undefined {
    return this.#rings.get(edgeId)?.samples.filter((s) => s.atMs > sinceMs);
  }

  /** Ids of the edges with a ring. */
  edgeIds(): string[] {
    return [...this.#rings.keys()].sort();
  }
}

function baseOf(status: EdgeStatusResponse, atMs: number): Base {
  const num = (v: bigint) => Number(v);
  return {
    atMs,
    startedAtMs: status.edge?.startedAtMs ?? 0n,
    bounds: [...status.bucketBoundsMs],
    pools: new Map(status.pools.map((p: PoolCounters) => [p.pool, {
      finished: num(p.runsFinished),
      failed: num(p.runsFailed),
      tokensOut: num(p.tokensOut),
      latency: p.latencyBuckets.map(num),
      ttft: p.ttftBuckets.map(num),
    }])),
  };
}

function sampleOf(
  previous: Base | undefined,
  current: Base,
  status: EdgeStatusResponse,
  elapsedMs: number,
): SeriesSample {
  const gauges = new Map(status.pools.map((p) => [p.pool, p]));
  const pools: Record<string, SeriesPoint> = {};
  const deltas: Delta[] = [];
  for (const [pool, now] of current.pools) {
    const before = previous?.pools.get(pool);
    // A counter that went down means the edge restarted under the same start time: from zero.
    const fresh = before !== undefined && now.finished < before.finished;
    const d = delta(now, fresh ? undefined : before);
    deltas.push(d);
    const gauge = gauges.get(pool);
    pools[pool] = pointOf(d, current.bounds, elapsedMs, gauge?.queued ?? 0, gauge?.inFlight ?? 0);
  }
  const total: Delta = {
    finished: deltas.reduce((n, d) => n + d.finished, 0),
    failed: deltas.reduce((n, d) => n + d.failed, 0),
    tokensOut: deltas.reduce((n, d) => n + d.tokensOut, 0),
    latency: sumCounts(deltas.map((d) => d.latency)),
    ttft: sumCounts(deltas.map((d) => d.ttft)),
  };
  const queued = status.pools.reduce((n, p) => n + p.queued, 0);
  const edge = pointOf(total, current.bounds, elapsedMs, queued, status.edge?.runsInFlight ?? 0);
  return { atMs: current.atMs, intervalMs: elapsedMs, edge, pools };
}

type Delta = Tally;

function delta(now: Tally, before: Tally | undefined): Delta {
  return {
    finished: Math.max(0, now.finished - (before?.finished ?? 0)),
    failed: Math.max(0, now.failed - (before?.failed ?? 0)),
    tokensOut: Math.max(0, now.tokensOut - (before?.tokensOut ?? 0)),
    latency: countsDelta(now.latency, before?.latency),
    ttft: countsDelta(now.ttft, before?.ttft),
  };
}

function pointOf(
  d: Delta,
  bounds: readonly number[],
  elapsedMs: number,
  queueDepth: number,
  runsInFlight: number,
): SeriesPoint {
  const round = (v: number | null) => v === null ? null : Math.round(v * 10) / 10;
  const rate = (n: number) => Math.round(perSecond(n, elapsedMs) * 1000) / 1000;
  return {
    requestsPerS: rate(d.finished),
    tokensPerS: rate(d.tokensOut),
    failedPerS: rate(d.failed),
    queueDepth,
    runsInFlight,
    latencyP50Ms: round(histogramQuantile(bounds, d.latency, 0.5)),
    latencyP95Ms: round(histogramQuantile(bounds, d.latency, 0.95)),
    ttftP50Ms: round(histogramQuantile(bounds, d.ttft, 0.5)),
    ttftP95Ms: round(histogramQuantile(bounds, d.ttft, 0.95)),
  };
}
