/**
 * The arithmetic of the Control Plane's charts: differences of cumulative counters between two
 * edge reports, rates per second, and quantiles of a bucketed histogram (linear inside a
 * bucket, as Prometheus' `histogram_quantile` does).
 * @module
 */

/**
 * The `q`-quantile (0 < q ≤ 1) of a histogram whose `counts[i]` observations fall at or below
 * `bounds[i]` (and above `bounds[i-1]`); `counts` may have one more entry, the unbounded
 * bucket, whose observations count as the largest bound. Null when the histogram is empty.
 */
export function histogramQuantile(
  bounds: readonly number[],
  counts: readonly number[],
  q: number,
): number | null {
  if (!(q > 0 && q <= 1)) {
    throw new RangeError(
      `Cannot compute a quantile as 'q' must be in (0, 1]: current value is ${q}`,
    );
  }
  const total = counts.reduce((a, b) => a + b, 0);
  if (total <= 0) return null;
  const rank = q * total;
  let below = 0;
  for (let i = 0; i < counts.length; i++) {
    const count = counts[i] ?? 0;
    if (count > 0 && below + count >= rank) {
      if (i >= bounds.length) return bounds[bounds.length - 1] ?? 0;
      const lower = i === 0 ? 0 : bounds[i - 1]!;
      const upper = bounds[i]!;
      return lower + (upper - lower) * ((rank - below) / count);
    }
    below += count;
  }
  return bounds[bounds.length - 1] ?? 0;
}

/** `current - previous` per entry; a missing previous entry counts as 0, a negative one as 0. */
export function countsDelta(
  current: readonly number[],
  previous: readonly number[] | undefined,
): number[] {
  return current.map((c, i) => Math.max(0, c - (previous?.[i] ?? 0)));
}

/** Entry-wise sum of histograms of the same bounds. */
export function sumCounts(histograms: readonly (readonly number[])[]): number[] {
  const sum: number[] = [];
  for (const h of histograms) h.forEach((c, i) => sum[i] = (sum[i] ?? 0) + c);
  return sum;
}

/** `delta` per second over `elapsedMs`; 0 when no time passed. */
export function perSecond(delta: number, elapsedMs: number): number {
  return elapsedMs > 0 ? delta / (elapsedMs / 1000) : 0;
}
