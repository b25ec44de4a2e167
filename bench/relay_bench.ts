/**
 * Relay overhead of the Edge: a fast OpenAI-compatible upstream is called directly, then through
 * Edge → Node → upstream (real Edge and Node processes, a provider-pool route), at concurrency
 * 1, 16 and 64. Prints median and p99 latency (non-streaming) and time to first chunk
 * (streaming) for both paths, and their ratios and differences.
 *
 * Run: `deno run -A bench/relay_bench.ts [requests_per_level] [--separate-upstream]`
 * @module
 */
import { startFakeOpenAI } from "../shared/testing/fake_openai.ts";
import { percentile, spawnService, waitJson } from "./bench_util.ts";
import { freePort } from "../tests/util.ts";

const SEPARATE = Deno.args.includes("--separate-upstream");
const PER_LEVEL = Number(Deno.args.find((a) => !a.startsWith("--")) ?? 2000);
const LEVELS = [1, 16, 64];

const upstream = SEPARATE ? await spawnUpstream() : startFakeOpenAI({
  models: ["fast"],
  defaults: { reply: "Hello from the fast upstream" },
});

/**
 * With `--separate-upstream` the upstream runs in its own process, as a real model server does,
 * so the direct path also crosses a process boundary and the difference is the relay alone.
 */
async function spawnUpstream(): Promise<{ url: string; close(): Promise<void> }> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", new URL("./fake_upstream.ts", import.meta.url).pathname],
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  while (!text.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) throw new Error("the upstream process exited before printing its URL");
    text += value;
  }
  reader.releaseLock();
  void child.stdout.cancel().catch(() => {});
  return {
    url: text.split("\n")[0]!.trim(),
    close: async () => {
      child.kill("SIGTERM");
      await child.status;
    },
  };
}
const dir = await Deno.makeTempDir({ prefix: "iop_relay_bench_" });
const httpPort = freePort();
const wirePort = freePort();
const edge = await spawnService(
  "edge",
  {
    edge: { id: "bench-edge" },
    http: { host: "127.0.0.1", port: httpPort },
    wire: { host: "127.0.0.1", port: wirePort },
    control_plane: { address: "" },
    nodes: [{
      id: "bench-node",
      token: "bench-node-token",
      adapters: [{ name: "up", kind: "openai_compat", base_url: `${upstream.url}/v1` }],
      providers: [{
        id: "bench-up",
        adapter: "up",
        target: "fast",
        model_group: "fast",
        max_concurrency: 256,
      }],
    }],
    models: [{ name: "fast", route: "pool" }],
  },
  dir,
  "edge",
);
const node = await spawnService(
  "node",
  {
    node: { id: "bench-node", token: "bench-node-token" },
    edge: { address: `127.0.0.1:${wirePort}` },
    http: { host: "127.0.0.1", port: freePort() },
    history: { path: `${dir}/history.db` },
    policy: { adapter_kinds: ["openai_compat"], backend_hosts: [new URL(upstream.url).host] },
  },
  dir,
  "node",
);

const edgeUrl = `http://127.0.0.1:${httpPort}`;
await waitJson(
  `${edgeUrl}/readyz`,
  (b) => (b as { nodes_connected: number }).nodes_connected === 1,
);

const body = (stream: boolean) =>
  JSON.stringify({ model: "fast", messages: [{ role: "user", content: "ping" }], stream });

/** One request; returns ms to the full answer (non-stream) or to the first content chunk. */
async function once(base: string, stream: boolean): Promise<number> {
  const start = performance.now();
  const res = await fetch(`${base}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: body(stream),
  });
  if (!res.ok) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  if (!stream) {
    await res.json();
    return performance.now() - start;
  }
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let buffered = "";
  let first = NaN;
  while (true) {
    const { value, done } = await reader.read();
    if (done) break;
    buffered += value;
    if (Number.isNaN(first) && /"content":"[^"]/.test(buffered)) first = performance.now() - start;
  }
  return first;
}

async function level(base: string, stream: boolean, concurrency: number): Promise<number[]> {
  const out: number[] = [];
  let left = PER_LEVEL;
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (left-- > 0) out.push(await once(base, stream));
  }));
  return out;
}

// Warm both paths (JIT, connection pools, the node's adapter).
for (const base of [upstream.url, edgeUrl]) {
  await level(base, false, 8);
  await level(base, true, 8);
}

const f = (n: number) => n.toFixed(3);
const rows: string[] = [];
for (const stream of [false, true]) {
  for (const c of LEVELS) {
    const direct = await level(upstream.url, stream, c);
    const relayed = await level(edgeUrl, stream, c);
    const [d50, d99, r50, r99] = [
      percentile(direct, 50),
      percentile(direct, 99),
      percentile(relayed, 50),
      percentile(relayed, 99),
    ];
    rows.push(
      `| ${stream ? "stream TTFC" : "non-stream"} | ${c} | ${f(d50)} | ${f(r50)} | ${
        (r50 / d50).toFixed(2)
      }x (+${f(r50 - d50)}) | ${f(d99)} | ${f(r99)} | ${(r99 / d99).toFixed(2)}x (+${
        f(r99 - d99)
      }) |`,
    );
  }
}
console.log(
  `\nRelay overhead, ${PER_LEVEL} requests per level (ms), upstream ${
    SEPARATE ? "in its own process" : "in the benchmark's process"
  }\n`,
);
console.log(
  "| mode | conc | direct p50 | relay p50 | p50 ratio (delta) | direct p99 | relay p99 | p99 ratio (delta) |",
);
console.log("| --- | --- | --- | --- | --- | --- | --- | --- |");
for (const r of rows) console.log(r);

await node.kill();
await edge.kill();
await upstream.close();
await Deno.remove(dir, { recursive: true });
