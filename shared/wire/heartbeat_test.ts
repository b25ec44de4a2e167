import assert from "node:assert/strict";
import { nextBeatDelay, startHeartbeat } from "./heartbeat.ts";

function fakeClock() {
  let t = 1_000;
  return { now: () => t, advance: (ms: number) => void (t += ms) };
}

function ticks(n: number, intervalMs: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, n * intervalMs + intervalMs / 2));
}

Deno.test({
  name: "startHeartbeat() sends every interval while the peer is heard",
  sanitizeOps: true,
  async fn() {
    const clock = fakeClock();
    let sent = 0;
    let dead = false;
    const hb = startHeartbeat({
      intervalMs: 10,
      now: clock.now,
      send: () => {
        sent++;
        clock.advance(10);
        hb.seen();
      },
      onDead: () => void (dead = true),
    });
    await ticks(5, 10);
    hb.stop();
    assert.ok(sent >= 3, `sent ${sent}`);
    assert.equal(dead, false);
  },
});

Deno.test({
  name: "startHeartbeat() declares the peer dead after missedLimit silent intervals, once",
  sanitizeOps: true,
  async fn() {
    const clock = fakeClock();
    const deaths: number[] = [];
    const hb = startHeartbeat({
      intervalMs: 10,
      missedLimit: 3,
      now: clock.now,
      send: () => clock.advance(10),
      onDead: (silent) => deaths.push(silent),
    });
    await ticks(6, 10);
    hb.stop();
    assert.equal(deaths.length, 1);
    assert.ok(deaths[0]! >= 30);
  },
});

Deno.test("nextBeatDelay() spreads beats over ±10 % of the interval", () => {
  assert.equal(nextBeatDelay(2000, 0), 1800);
  assert.equal(nextBeatDelay(2000, 0.5), 2000);
  assert.ok(nextBeatDelay(2000, 0.999999) < 2200 && nextBeatDelay(2000, 0.999999) > 2199);
});
