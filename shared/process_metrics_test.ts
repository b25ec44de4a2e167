import assert from "node:assert/strict";
import { Registry } from "prom-client";
import { registerProcessMetrics } from "./process_metrics.ts";

function valueOf(text: string, name: string): number {
  const line = text.split("\n").find((l) => l.startsWith(`${name} `));
  assert.ok(line, `no sample of ${name} in:\n${text}`);
  return Number(line.slice(name.length + 1));
}

Deno.test("registerProcessMetrics() exposes CPU, memory, heap, fds and start time on scrape", async () => {
  const registry = new Registry();
  using _metrics = registerProcessMetrics(registry);
  const text = await registry.metrics();
  assert.ok(valueOf(text, "process_cpu_user_seconds_total") > 0);
  assert.ok(valueOf(text, "process_cpu_system_seconds_total") >= 0);
  assert.ok(valueOf(text, "process_resident_memory_bytes") > 1_000_000);
  assert.ok(valueOf(text, "nodejs_heap_size_used_bytes") > 0);
  assert.ok(valueOf(text, "nodejs_heap_size_total_bytes") > 0);
  assert.ok(valueOf(text, "nodejs_external_memory_bytes") >= 0);
  assert.ok(valueOf(text, "process_open_fds") > 0);
  const started = valueOf(text, "process_start_time_seconds");
  assert.ok(Math.abs(started - Date.now() / 1000) < 3600, `start time ${started}`);
  assert.equal(valueOf(text, "nodejs_eventloop_lag_seconds"), 0);
});

Deno.test("registerProcessMetrics() drops the default collectors that mislead under Deno", async () => {
  const registry = new Registry();
  using _metrics = registerProcessMetrics(registry);
  const text = await registry.metrics();
  for (const name of ["nodejs_active_handles_total", "nodejs_gc_duration_seconds"]) {
    assert.ok(!text.includes(name), `${name} is still exposed`);
  }
  assert.doesNotMatch(text, /nodejs_eventloop_lag_(min|max|p\d+)_seconds/);
  assert.ok(!text.includes("nodejs_version_info"));
});

Deno.test("registerProcessMetrics() reports a blocked event loop as lag", async () => {
  const registry = new Registry();
  using _metrics = registerProcessMetrics(registry, { tickMs: 20 });
  await new Promise((resolve) => setTimeout(resolve, 30));
  const end = performance.now() + 150;
  while (performance.now() < end) { /* block the loop */ }
  await new Promise((resolve) => setTimeout(resolve, 50));
  const lag = valueOf(await registry.metrics(), "nodejs_eventloop_lag_seconds");
  assert.ok(lag >= 0.1 && lag < 1, `lag ${lag}`);
});

Deno.test("registerProcessMetrics() rejects a non-positive tick", () => {
  assert.throws(
    () => registerProcessMetrics(new Registry(), { tickMs: 0 }),
    (err: unknown) =>
      err instanceof RangeError &&
      err.message === "Cannot sample event-loop lag as 'tickMs' must be positive: 0",
  );
});

Deno.test("registerProcessMetrics() shares one lag timer between registries of a process", async () => {
  const a = new Registry();
  const b = new Registry();
  using _a = registerProcessMetrics(a);
  using _b = registerProcessMetrics(b);
  for (const registry of [a, b]) {
    assert.ok(valueOf(await registry.metrics(), "nodejs_eventloop_lag_seconds") >= 0);
  }
});
