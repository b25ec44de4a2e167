/**
 * Edge capacity: one Edge process with NODES simulated nodes connected and heartbeating (real
 * NodeCores with the mock adapter and the real node wire client, all in this process, history
 * kept in memory), then waves of concurrent streaming OpenAI requests through a provider pool
 * spread over every node. Reports the Edge's resident memory and CPU use per stage.
 *
 * Run: `deno run -A bench/edge_fleet_bench.ts [nodes] [max_concurrent_streams]`
 * @module
 */
import { createLogger } from "../shared/log.ts";
import { mockAdapterFactory } from "../services/node/adapters/mock.ts";
import { buildAdapterRegistry } from "../services/node/adapters/registry.ts";
import { NodeCore } from "../services/node/node.ts";
import type { RunStore } from "../services/node/ports.ts";
import { type EdgeClient, startEdgeClient } from "../services/node/transport/edge_client.ts";
import { procUsage, spawnService, waitJson } from "./bench_util.ts";
import { freePort } from "../tests/util.ts";

const NODES = Number(Deno.args[0] ?? 1000);
const MAX_STREAMS = Number(Deno.args[1] ?? 4000);
const TOKENS = 20;
const TOKEN_DELAY_MS = 100;

const memoryStore = (): RunStore => ({
  startRun() {},
  completeRun() {},
  history: () => [],
  markInterrupted: () => 0,
  close() {},
});

const dir = await Deno.makeTempDir({ prefix: "iop_fleet_bench_" });
const httpPort = freePort();
const wirePort = freePort();
const ids = Array.from({ length: NODES }, (_, i) => `sim-${String(i).padStart(4, "0")}`);
const edge = await spawnService(
  "edge",
  {
    edge: { id: "fleet-edge" },
    http: { host: "127.0.0.1", port: httpPort },
    wire: { host: "127.0.0.1", port: wirePort, heartbeat_interval_ms: 2000 },
    control_plane: { address: "" },
    nodes: ids.map((id) => ({
      id,
      token: `${id}-token`,
      adapters: [{ name: "mock", kind: "mock", tokens: TOKENS, token_delay_ms: TOKEN_DELAY_MS }],
      providers: [{
        id: `${id}-p`,
        adapter: "mock",
        target: "sim",
        model_group: "sim",
        max_concurrency: 64,
      }],
    })),
    models: [{ name: "sim", route: "pool", queue: { max_length: 0, max_wait_ms: 1000 } }],
  },
  dir,
  "edge",
);
const edgeUrl = `http://127.0.0.1:${httpPort}`;
await waitJson(`${edgeUrl}/healthz`, () => true);
const idle = await procUsage(edge.pid);

const logger = createLogger("bench.node", { level: "error" });
const clients: EdgeClient[] = [];
const t0 = performance.now();
for (const id of ids) {
  const core = new NodeCore({
    nodeId: id,
    store: memoryStore(),
    logger,
    buildAdapters: (configs) => buildAdapterRegistry(configs, { mock: mockAdapterFactory }),
  });
  clients.push(startEdgeClient({
    edgeAddress: `127.0.0.1:${wirePort}`,
    nodeId: id,
    token: `${id}-token`,
    version: "bench",
    core,
    logger,
    backoffInitialMs: 500,
    backoffMaxMs: 5000,
  }));
}
await waitJson(
  `${edgeUrl}/readyz`,
  (b) => (b as { nodes_connected: number }).nodes_connected === NODES,
  120_000,
);
const connectSeconds = (performance.now() - t0) / 1000;

// Heartbeats only, for a while.
const hbStart = await procUsage(edge.pid);
await new Promise((r) => setTimeout(r, 10_000));
const hbEnd = await procUsage(edge.pid);

interface Wave {
  streams: number;
  ok: number;
  failed: number;
  rssMiB: number;
  cpuPct: number;
  seconds: number;
}

async function stream(): Promise<boolean> {
  const res = await fetch(`${edgeUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      model: "sim",
      messages: [{ role: "user", content: "x" }],
      stream: true,
    }),
  });
  if (!res.ok) {
    await res.body?.cancel();
    return false;
  }
  const text = await res.text();
  return text.endsWith("data: [DONE]\n\n");
}

async function wave(streams: number): Promise<Wave> {
  const before = await procUsage(edge.pid);
  const start = performance.now();
  let peakRss = before.rssMiB;
  const sampler = setInterval(async () => {
    peakRss = Math.max(peakRss, (await procUsage(edge.pid)).rssMiB);
  }, 250);
  const results = await Promise.all(
    Array.from({ length: streams }, () => stream().catch(() => false)),
  );
  clearInterval(sampler);
  const seconds = (performance.now() - start) / 1000;
  const after = await procUsage(edge.pid);
  return {
    streams,
    ok: results.filter(Boolean).length,
    failed: results.filter((r) => !r).length,
    rssMiB: peakRss,
    cpuPct: ((after.cpuSeconds - before.cpuSeconds) / seconds) * 100,
    seconds,
  };
}

const waves: Wave[] = [];
for (let n = 500; n <= MAX_STREAMS; n *= 2) {
  const w = await wave(n);
  waves.push(w);
  if (w.failed > 0) break;
}

const f1 = (n: number) => n.toFixed(1);
console.log(
  `\nEdge with ${NODES} simulated nodes (heartbeat 2 s); streams of ${TOKENS} tokens x ${TOKEN_DELAY_MS} ms\n`,
);
console.log("| stage | Edge RSS MiB | Edge CPU % | notes |");
console.log("| --- | --- | --- | --- |");
console.log(`| idle, no nodes | ${f1(idle.rssMiB)} | - | |`);
console.log(
  `| ${NODES} nodes heartbeating | ${f1(hbEnd.rssMiB)} | ${
    f1((hbEnd.cpuSeconds - hbStart.cpuSeconds) / 10 * 100)
  } | all registered in ${f1(connectSeconds)} s |`,
);
for (const w of waves) {
  console.log(
    `| ${w.streams} concurrent streams | ${f1(w.rssMiB)} (peak) | ${
      f1(w.cpuPct)
    } | ${w.ok} ok, ${w.failed} failed, wave ${f1(w.seconds)} s |`,
  );
}

for (const c of clients) await c.stop();
await edge.kill();
await Deno.remove(dir, { recursive: true });
