import assert from "node:assert/strict";
import { heartbeatGroup, nextBeatDelay, startHeartbeat } from "./heartbeat.ts";

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

Deno.test({
  name: "heartbeatGroup() beats every link about every interval, those due together in one task",
  sanitizeOps: true,
  async fn() {
    const group = heartbeatGroup();
    const sent = new Array<number>(20).fill(0);
    let tasks = 0;
    let inTask = false;
    const beats = sent.map((_, i) => {
      const hb = group.start({
        intervalMs: 40,
        send: () => {
          sent[i]!++;
          hb.seen(); // the peer answers
          if (inTask) return;
          inTask = true;
          tasks++;
          queueMicrotask(() => void (inTask = false));
        },
        onDead: () => assert.fail(`link ${i} declared dead`),
      });
      return hb;
    });
    await ticks(5, 40);
    for (const hb of beats) hb.stop();
    for (const [i, n] of sent.entries()) assert.ok(n >= 3 && n <= 7, `link ${i} sent ${n}`);
    const total = sent.reduce((a, b) => a + b, 0);
    assert.ok(tasks <= total / 2, `${total} beats took ${tasks} tasks`);
  },
});

Deno.test({
  name: "heartbeatGroup() declares a silent link dead, once, and goes on beating the others",
  sanitizeOps: true,
  async fn() {
    const group = heartbeatGroup();
    let heardSent = 0;
    let heardSentAtDeath = -1;
    const deaths: number[] = [];
    const heard = group.start({
      intervalMs: 20,
      send: () => {
        heardSent++;
        heard.seen();
      },
      onDead: () => assert.fail("the answering link was declared dead"),
    });
    const silent = group.start({
      intervalMs: 20,
      send: () => {},
      onDead: (ms) => {
        deaths.push(ms);
        heardSentAtDeath = heardSent;
      },
    });
    await ticks(8, 20);
    silent.stop();
    heard.stop();
    assert.equal(deaths.length, 1);
    assert.ok(deaths[0]! >= 60, `dead after ${deaths[0]} ms`);
    assert.ok(heardSent > heardSentAtDeath, "no beat after the other link died");
  },
});
