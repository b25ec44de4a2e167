import assert from "node:assert/strict";
import { countsDelta, histogramQuantile, perSecond, sumCounts } from "./series_math.ts";

const BOUNDS = [10, 100, 1000];

Deno.test("histogramQuantile() interpolates inside the bucket that holds the rank", () => {
  // 10 observations at ≤10, 10 at (10,100]: the median is the top of the first bucket, p75 is
  // half-way through the second.
  assert.equal(histogramQuantile(BOUNDS, [10, 10, 0, 0], 0.5), 10);
  assert.equal(histogramQuantile(BOUNDS, [10, 10, 0, 0], 0.75), 55);
  assert.equal(histogramQuantile(BOUNDS, [0, 0, 4, 0], 0.5), 550);
  assert.equal(histogramQuantile(BOUNDS, [4, 0, 0, 0], 0.25), 2.5);
});

Deno.test("histogramQuantile() counts the unbounded bucket as the largest bound and an empty histogram as null", () => {
  assert.equal(histogramQuantile(BOUNDS, [0, 0, 0, 3], 0.95), 1000);
  assert.equal(histogramQuantile(BOUNDS, [1, 0, 0, 99], 0.5), 1000);
  assert.equal(histogramQuantile(BOUNDS, [0, 0, 0, 0], 0.5), null);
  assert.equal(histogramQuantile(BOUNDS, [], 0.5), null);
});

Deno.test("histogramQuantile() rejects a q outside (0, 1] with a RangeError naming it", () => {
  for (const q of [0, 1.5, Number.NaN]) {
    assert.throws(
      () => histogramQuantile(BOUNDS, [1], q),
      (err: unknown) => err instanceof RangeError && err.message.includes(`current value is ${q}`),
    );
  }
});

Deno.test("countsDelta() subtracts per bucket, treating a missing previous as zero and never going negative", () => {
  assert.deepEqual(countsDelta([5, 7, 9], [1, 7, 3]), [4, 0, 6]);
  assert.deepEqual(countsDelta([5, 7], undefined), [5, 7]);
  assert.deepEqual(countsDelta([5, 7, 2], [1]), [4, 7, 2]);
  assert.deepEqual(countsDelta([1], [3]), [0]);
});

Deno.test("sumCounts() adds histograms entry by entry and perSecond() divides by the elapsed seconds", () => {
  assert.deepEqual(sumCounts([[1, 2, 3], [4, 5, 6], [1]]), [6, 7, 9]);
  assert.deepEqual(sumCounts([]), []);
  assert.equal(perSecond(10, 5_000), 2);
  assert.equal(perSecond(10, 0), 0);
});
