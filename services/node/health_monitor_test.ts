import assert from "node:assert/strict";
import { IopError } from "../../shared/errors.ts";
import { HealthMonitor, type HealthState, probeOnFailure } from "./health_monitor.ts";
import type { Adapter, ProbeResult } from "./ports.ts";

/** An adapter whose probe answers what `state.result` says, counting its probes. */
function fakeAdapter(name: string, result: ProbeResult) {
  const state = { result, probes: 0 };
  const adapter: Adapter = {
    name,
    kind: "mock",
    capabilities: () => Promise.reject(new Error("unused")),
    execute: () => Promise.reject(new IopError("UNAVAILABLE", "backend down")),
    probe: () => {
      state.probes++;
      return Promise.resolve(state.result);
    },
  };
  return { adapter, state };
}

function recorder(monitor: HealthMonitor) {
  const changes: [string, HealthState][] = [];
  monitor.onChange((key, state) => changes.push([key, state]));
  return changes;
}

Deno.test("track probes every adapter and listeners hear only changes", async () => {
  const monitor = new HealthMonitor({ intervalMs: 0 });
  const changes = recorder(monitor);
  const a = fakeAdapter("a", { healthy: true, detail: "up" });
  monitor.track([a.adapter]);
  assert.deepEqual([...(await monitor.settled())], [["a", { healthy: true, detail: "up" }]]);
  await monitor.checkAll();
  assert.equal(a.state.probes, 2);
  assert.deepEqual(changes, [["a", { healthy: true, detail: "up" }]]);
  a.state.result = { healthy: false, detail: "GET failed: connection refused" };
  await monitor.checkAll();
  assert.deepEqual(changes.at(-1), ["a", {
    healthy: false,
    detail: "GET failed: connection refused",
  }]);
  assert.equal(monitor.anyHealthy(), false);
});

Deno.test("per-target health is keyed <adapter>/<target> and a vanished target is forgotten", async () => {
  const monitor = new HealthMonitor({ intervalMs: 0 });
  const cli = fakeAdapter("cli", {
    healthy: true,
    detail: "1 of 2",
    targets: {
      ok: { healthy: true, detail: "runs /bin/sh" },
      gone: { healthy: false, detail: "x" },
    },
  });
  monitor.track([cli.adapter]);
  await monitor.settled();
  assert.deepEqual([...monitor.current().keys()].sort(), ["cli", "cli/gone", "cli/ok"]);
  cli.state.result = {
    healthy: true,
    detail: "1 of 1",
    targets: { ok: cli.state.result.targets!.ok! },
  };
  await monitor.checkAll();
  assert.deepEqual([...monitor.current().keys()].sort(), ["cli", "cli/ok"]);
});

Deno.test("a new config forgets removed adapters and ignores answers of replaced instances", async () => {
  const monitor = new HealthMonitor({ intervalMs: 0 });
  const slow = Promise.withResolvers<ProbeResult>();
  const old: Adapter = {
    ...fakeAdapter("a", { healthy: true, detail: "" }).adapter,
    probe: () => slow.promise,
  };
  monitor.track([old, fakeAdapter("b", { healthy: true, detail: "b" }).adapter]);
  const fresh = fakeAdapter("a", { healthy: false, detail: "new instance down" });
  monitor.track([fresh.adapter]);
  slow.resolve({ healthy: true, detail: "stale answer" });
  const picture = await monitor.settled();
  assert.deepEqual([...picture], [["a", { healthy: false, detail: "new instance down" }]]);
});

Deno.test("an adapter without a probe counts as healthy; a throwing probe as unhealthy", async () => {
  const monitor = new HealthMonitor({ intervalMs: 0 });
  const plain: Adapter = { ...fakeAdapter("plain", { healthy: true, detail: "" }).adapter };
  delete plain.probe;
  const broken: Adapter = {
    ...fakeAdapter("broken", { healthy: true, detail: "" }).adapter,
    probe: () => Promise.reject(new Error("boom")),
  };
  monitor.track([plain, broken]);
  const picture = await monitor.settled();
  assert.deepEqual(picture.get("plain"), { healthy: true, detail: "no health probe" });
  assert.deepEqual(picture.get("broken"), { healthy: false, detail: "health probe failed: boom" });
  assert.equal(monitor.anyHealthy(), true);
});

Deno.test("probeOnFailure reports UNAVAILABLE failures but not cancellations or bad input", async () => {
  const failed: string[] = [];
  let error: unknown = new IopError("UNAVAILABLE", "Cannot reach the model server");
  const factories = probeOnFailure({
    mock: (config) => ({
      ...fakeAdapter(config.name, { healthy: true, detail: "" }).adapter,
      execute: () => Promise.reject(error),
    }),
  }, (adapter) => failed.push(adapter));
  const adapter = factories.mock!(
    { name: "m", enabled: true, kind: "mock", settings: {} } as never,
  );
  const spec = {} as Parameters<Adapter["execute"]>[0];
  const sink = {} as Parameters<Adapter["execute"]>[1];
  await assert.rejects(adapter.execute(spec, sink, { signal: new AbortController().signal }));
  assert.deepEqual(failed, ["m"]);
  error = new IopError("INVALID_ARGUMENT", "bad");
  await assert.rejects(adapter.execute(spec, sink, { signal: new AbortController().signal }));
  const aborted = new AbortController();
  aborted.abort();
  error = new IopError("UNAVAILABLE", "closed");
  await assert.rejects(adapter.execute(spec, sink, { signal: aborted.signal }));
  assert.deepEqual(failed, ["m"]);
});

Deno.test("periodic probes run every intervalMs until stopped", async () => {
  const monitor = new HealthMonitor({ intervalMs: 20 });
  const a = fakeAdapter("a", { healthy: true, detail: "" });
  monitor.track([a.adapter]);
  await monitor.settled();
  monitor.start();
  await new Promise((r) => setTimeout(r, 75));
  monitor.stop();
  const seen = a.state.probes;
  assert.ok(seen >= 3, `probes: ${seen}`);
  await new Promise((r) => setTimeout(r, 45));
  assert.equal(a.state.probes, seen);
});
