import assert from "node:assert/strict";
import { RefreshLimiter } from "./refresh_limiter.ts";

function limiter(minIntervalMs: number) {
  const clock = { now: 10_000 };
  return { clock, limiter: new RefreshLimiter({ minIntervalMs, now: () => clock.now }) };
}

Deno.test("run() lets one refresh per key through per interval and serves the rest from it", async () => {
  const { clock, limiter: l } = limiter(5_000);
  let runs = 0;
  const refresh = () => Promise.resolve(void runs++);
  assert.deepEqual(await l.run("fleet", refresh), {
    performed: true,
    lastAtMs: 10_000,
    nextAtMs: 15_000,
  });
  clock.now = 14_999;
  assert.deepEqual(await l.run("fleet", refresh), {
    performed: false,
    lastAtMs: 10_000,
    nextAtMs: 15_000,
  });
  assert.equal((await l.run("edge:a", refresh)).performed, true, "keys are limited apart");
  clock.now = 15_000;
  assert.equal((await l.run("fleet", refresh)).performed, true);
  assert.equal(runs, 3);
});

Deno.test("run() within the interval waits for the refresh in flight", async () => {
  const { limiter: l } = limiter(5_000);
  let finish: () => void = () => {};
  const first = l.run("fleet", () => new Promise<void>((resolve) => finish = resolve));
  let secondDone = false;
  const second = l.run("fleet", () => Promise.reject(new Error("must not run"))).then((o) => {
    secondDone = true;
    return o;
  });
  await Promise.resolve();
  assert.equal(secondDone, false, "waits while the first is in flight");
  finish();
  assert.equal((await first).performed, true);
  assert.equal((await second).performed, false);
});

Deno.test("run() with a failing refresh still limits, and an interval of 0 limits nothing", async () => {
  const { limiter: l } = limiter(5_000);
  const failing = await l.run("fleet", () => Promise.reject(new Error("edge gone")));
  assert.equal(failing.performed, true);
  assert.equal((await l.run("fleet", () => Promise.resolve())).performed, false);
  const { limiter: open } = limiter(0);
  assert.equal((await open.run("fleet", () => Promise.resolve())).performed, true);
  assert.equal((await open.run("fleet", () => Promise.resolve())).performed, true);
});
