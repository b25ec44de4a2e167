/**
 * Edge capacity under a fleet: one Edge process, NODES simulated nodes dialled into it (real
 * NodeCores with the mock adapter and the real node wire client, all in this process, history
 * kept in memory) and STREAMS real HTTP clients in a third process (this file in `--clients`
 * mode: node:http on keep-alive sockets) streaming `POST /v1/chat/completions` through a
 * provider pool spread over every node. Everything listens on 127.0.0.1. The node wire runs TLS
 * as shipped (certificates made in the temp dir); `--plaintext` runs it without, for comparison.
 *
 * Stages: the Edge idle with no node; NODES connected and only heartbeating for 10 s (RSS, CPU
 * and the idle cost per node, (RSS with nodes − RSS idle) / NODES); then DURATION seconds with
 * STREAMS streams in flight throughout. The mock emits one token every 50 ms (20 tokens/s); a
 * stream lasts 15 s and each client starts a new one when its last ends, the last one cut with
 * `max_tokens` to end with the stage (clients start over 2 s, and their first streams are cut to
 * staggered lengths, so streams end and start evenly instead of in waves). The Edge, this
 * process, the client process and the whole machine are sampled from /proc every second.
 *
 * Prints a markdown table, each figure with its target where it has one: Edge CPU % (100 % =
 * one core; mean and worst second after the ramp, target < 100 %) and peak RSS (< 512 MiB), the
 * idle cost per node (≤ 32 KiB), tokens/s delivered to the clients after the ramp, streams
 * completed and failed (non-200, an error frame, no `[DONE]`, a wrong token count, a socket
 * error or timeout; target 0), and the gap between consecutive tokens of one stream at its
 * client: p50/p99 of (gap − 50 ms, clamped at 0), the delay added on top of the mock's pace,
 * and the p99 gap. For context it adds the CPU and event-loop lag of the node simulator and the
 * client process: they share the machine with the Edge and their lag is part of the measured
 * delay, so that delay bounds what the Edge adds from above; and the CPU of everything else on
 * the machine, which competes too. Exits 1 when any stream failed. It also gives the Edge's CPU
 * per token delivered, and what 2,000 streams at 20 tokens/s would take at that cost.
 *
 * `--floor` puts the minimal relay of `fleet_floor.ts` in the Edge's place and plain TCP links
 * in the nodes' (plaintext, no heartbeats), under the same clients: the CPU per token any Deno
 * process of this shape pays, against which the Edge's is judged.
 *
 * Run: `deno run -A bench/edge_fleet_bench.ts [--nodes 1000] [--streams 2000] [--duration 60]
 * [--plaintext | --floor]`
 * @module
 */
import { ensureFleetCertificates, type FleetCertificates } from "../deploy/fleet_certs.ts";
import http from "node:http";
import { parseArgs } from "node:util";
import { createLogger, type Logger } from "../shared/log.ts";
import { mockAdapterFactory } from "../services/node/adapters/mock.ts";
import { buildAdapterRegistry } from "../services/node/adapters/registry.ts";
import { NodeCore } from "../services/node/node.ts";
import { DEFAULT_NODE_POLICY } from "../services/node/policy.ts";
import type { RunStore } from "../services/node/ports.ts";
import { type EdgeClient, startEdgeClient } from "../services/node/transport/edge_client.ts";
import {
  lines,
  machineUsage,
  MsHistogram,
  probeLoopLag,
  type Proc,
  type ProcFigures,
  procUsage,
  sampleEverySecond,
  spawnScript,
  spawnService,
  waitJson,
  within,
} from "./bench_util.ts";
import { freePort } from "../tests/util.ts";
import { connectFloorLink } from "./fleet_floor.ts";

/** The mock's pace: one token every 50 ms, 20 tokens/s per stream. */
const TOKEN_DELAY_MS = 50;
/** Tokens of a full stream: 15 s at 20 tokens/s. */
const TOKENS = 300;
/** Clients start spread over this long, so that the streams' token ticks do not coincide. */
const RAMP_MS = 2000;
const HEARTBEAT_IDLE_MS = 10_000;
/** A stream that receives nothing for this long fails (and its socket is destroyed). */
const STREAM_IDLE_TIMEOUT_MS = 10_000;
/** A client waits this long after a failed stream before its next, so failures cannot spin. */
const FAILURE_PAUSE_MS = 1000;

interface Options {
  nodes: number;
  streams: number;
  duration: number;
  /** Client mode: run the HTTP clients against `url` and report on stdout. */
  clients: boolean;
  url: string;
  /** Run the node wire without TLS (shipped configs use TLS), to see what TLS costs. */
  plaintext: boolean;
  /** Run the minimal relay of `fleet_floor.ts` in the Edge's place, to see the floor. */
  floor: boolean;
}

function parseOptions(args: string[]): Options {
  const { values } = parseArgs({
    args,
    strict: true,
    options: {
      nodes: { type: "string", default: "1000" },
      streams: { type: "string", default: "2000" },
      duration: { type: "string", default: "60" },
      clients: { type: "boolean", default: false },
      plaintext: { type: "boolean", default: false },
      floor: { type: "boolean", default: false },
      url: { type: "string", default: "" },
    },
  });
  const integer = (name: "nodes" | "streams" | "duration", min: number) => {
    const raw = values[name];
    const n = Number(raw);
    if (!Number.isSafeInteger(n) || n < min) {
      throw new RangeError(
        `Cannot run the bench as '--${name}' must be an integer of at least ${min}: current value is '${raw}'`,
      );
    }
    return n;
  };
  return {
    nodes: integer("nodes", 1),
    streams: integer("streams", 1),
    // Longer than the ramp, so that there is a steady window to measure.
    duration: integer("duration", 2 * RAMP_MS / 1000),
    clients: values.clients,
    url: values.url,
    plaintext: values.plaintext || values.floor,
    floor: values.floor,
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, Math.max(0, ms)));

// ---------------------------------------------------------------------------------------------
// Client mode: STREAMS loops of streaming requests, reported as one JSON line on stdout.

/** What the client process prints as its last stdout line. */
interface ClientReport {
  /** From the first request to the end of the last stream. */
  seconds: number;
  started: number;
  completed: number;
  failed: number;
  failures: Record<string, number>;
  /** The first failure of each kind, in full. */
  examples: Record<string, string>;
  tokens: number;
  /** Tokens/s received from when every client has started (after the ramp) to the stage's end. */
  steadyTokensPerSecond: number;
  /** Percentiles are null (NaN before JSON) when there was no sample. */
  gapP50Ms: number | null;
  gapP99Ms: number | null;
  gapMaxMs: number;
  firstTokenP99Ms: number | null;
  lagP99Ms: number | null;
  lagMaxMs: number;
}

interface ClientStats {
  started: number;
  completed: number;
  failures: Map<string, number>;
  examples: Map<string, string>;
  tokens: number;
  /** Tokens received in this window (`performance.now()` times) count as steady. */
  steady: { from: number; to: number };
  steadyTokens: number;
  gaps: MsHistogram;
  firstToken: MsHistogram;
}

interface ChatChunk {
  error?: unknown;
  choices?: { delta?: { content?: string } }[];
}

/** One streamed completion of `maxTokens` tokens; resolves to a failure `kind: detail` or "". */
function streamOnce(
  target: { url: URL; agent: http.Agent },
  maxTokens: number,
  stats: ClientStats,
): Promise<string> {
  const body = JSON.stringify({
    model: "sim",
    stream: true,
    max_tokens: maxTokens,
    messages: [{ role: "user", content: "x" }],
  });
  return new Promise((resolve) => {
    let settled = false;
    const finish = (failure: string) => {
      if (settled) return;
      settled = true;
      resolve(failure);
    };
    const sentAt = performance.now();
    const req = http.request({
      host: target.url.hostname,
      port: target.url.port,
      path: "/v1/chat/completions",
      method: "POST",
      agent: target.agent,
      headers: { "content-type": "application/json", "content-length": String(body.length) },
    }, (res) => {
      res.setEncoding("utf8");
      if (res.statusCode !== 200) {
        let text = "";
        res.on("data", (t: string) => void (text = (text + t).slice(0, 300)));
        res.on("end", () => finish(`status: HTTP ${res.statusCode} ${text}`));
        res.on("close", () => finish(`status: HTTP ${res.statusCode}`));
        return;
      }
      let buffered = "";
      let received = 0;
      let lastAt = 0;
      let done = false;
      let errorFrame = "";
      const onLine = (line: string) => {
        if (!line.startsWith("data: ")) return;
        const data = line.slice(6);
        if (data === "[DONE]") return void (done = true);
        const chunk = JSON.parse(data) as ChatChunk;
        if (chunk.error !== undefined) return void (errorFrame = JSON.stringify(chunk.error));
        if (!chunk.choices?.[0]?.delta?.content) return;
        const now = performance.now();
        if (received === 0) stats.firstToken.add(now - sentAt);
        else stats.gaps.add(now - lastAt);
        lastAt = now;
        received++;
        stats.tokens++;
        if (now >= stats.steady.from && now <= stats.steady.to) stats.steadyTokens++;
      };
      res.on("data", (text: string) => {
        buffered += text;
        try {
          for (let nl = buffered.indexOf("\n"); nl >= 0; nl = buffered.indexOf("\n")) {
            onLine(buffered.slice(0, nl));
            buffered = buffered.slice(nl + 1);
          }
        } catch (err) {
          req.destroy();
          finish(`parse: ${err instanceof Error ? err.message : String(err)}`);
        }
      });
      res.on("end", () => {
        if (errorFrame) finish(`error_frame: ${errorFrame}`);
        else if (!done) finish("no_done: the stream ended without [DONE]");
        else if (received !== maxTokens) finish(`token_count: ${received} of ${maxTokens}`);
        else finish("");
      });
      res.on("error", (err) => finish(`socket: ${err.message}`));
      res.on("close", () => finish("socket: closed before the end of the stream"));
    });
    req.setTimeout(STREAM_IDLE_TIMEOUT_MS, () => {
      req.destroy(new Error(`no data for ${STREAM_IDLE_TIMEOUT_MS} ms`));
    });
    req.on("error", (err) => finish(`socket: ${err.message}`));
    req.end(body);
  });
}

/** Client `i`: streams back to back from its start slot until `endAt`. */
async function clientLoop(
  i: number,
  o: Options,
  target: { url: URL; agent: http.Agent },
  times: { startAt: number; endAt: number },
  stats: ClientStats,
): Promise<void> {
  await sleep(times.startAt + (i / o.streams) * RAMP_MS - performance.now());
  // The first stream is cut to a share of a full one that grows with i, so streams end (and
  // the next start) evenly over time rather than in one wave every 15 s.
  let cap = Math.max(1, Math.round(((i + 0.5) / o.streams) * TOKENS));
  while (true) {
    const tokens = Math.min(cap, Math.floor((times.endAt - performance.now()) / TOKEN_DELAY_MS));
    if (tokens < 1) return;
    cap = TOKENS;
    stats.started++;
    const failure = await streamOnce(target, tokens, stats);
    if (failure === "") {
      stats.completed++;
      continue;
    }
    const kind = failure.slice(0, failure.indexOf(":"));
    stats.failures.set(kind, (stats.failures.get(kind) ?? 0) + 1);
    if (!stats.examples.has(kind)) stats.examples.set(kind, failure);
    await sleep(FAILURE_PAUSE_MS);
  }
}

async function runClients(o: Options): Promise<void> {
  const url = new URL(o.url);
  const agent = new http.Agent({ keepAlive: true, maxSockets: o.streams + 64 });
  const stats: ClientStats = {
    started: 0,
    completed: 0,
    failures: new Map(),
    examples: new Map(),
    tokens: 0,
    steady: { from: Infinity, to: Infinity },
    steadyTokens: 0,
    gaps: new MsHistogram(),
    firstToken: new MsHistogram(),
  };
  const lag = probeLoopLag();
  console.log("started");
  const startAt = performance.now();
  const times = { startAt, endAt: startAt + o.duration * 1000 };
  stats.steady = { from: startAt + RAMP_MS, to: times.endAt };
  await Promise.all(
    Array.from({ length: o.streams }, (_, i) => clientLoop(i, o, { url, agent }, times, stats)),
  );
  const seconds = (performance.now() - startAt) / 1000;
  const clientLag = lag.stop();
  agent.destroy();
  const report: ClientReport = {
    seconds,
    started: stats.started,
    completed: stats.completed,
    failed: stats.started - stats.completed,
    failures: Object.fromEntries(stats.failures),
    examples: Object.fromEntries(stats.examples),
    tokens: stats.tokens,
    steadyTokensPerSecond: stats.steadyTokens / (o.duration - RAMP_MS / 1000),
    gapP50Ms: stats.gaps.percentile(50),
    gapP99Ms: stats.gaps.percentile(99),
    gapMaxMs: stats.gaps.max,
    firstTokenP99Ms: stats.firstToken.percentile(99),
    lagP99Ms: clientLag.percentile(99),
    lagMaxMs: clientLag.max,
  };
  console.log(JSON.stringify(report));
}

// ---------------------------------------------------------------------------------------------
// Bench mode: the Edge process, the simulated nodes in this process, the client process.

const memoryStore = (): RunStore => ({
  startRun() {},
  completeRun() {},
  history: () => [],
  runOutput: () => undefined,
  markInterrupted: () => 0,
  close() {},
});

function edgeConfig(
  o: Options,
  ids: string[],
  httpPort: number,
  wirePort: number,
  certs: FleetCertificates | undefined,
) {
  // Twice the even share per node, so a stream never waits for a slot a finished one frees.
  const perNode = Math.max(4, 2 * Math.ceil(o.streams / o.nodes));
  return {
    edge: { id: "fleet-edge" },
    http: { host: "127.0.0.1", port: httpPort },
    wire: {
      host: "127.0.0.1",
      port: wirePort,
      heartbeat_interval_ms: 2000,
      ...(certs
        ? {
          tls: {
            cert: certs.certFor("edge", "fleet-edge"),
            key: certs.keyFor("edge", "fleet-edge"),
          },
        }
        : { insecure_plaintext: true }),
    },
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
        max_concurrency: perNode,
      }],
    })),
    models: [{
      name: "sim",
      route: "pool",
      queue: { max_length: o.streams, max_wait_ms: 30_000 },
    }],
  };
}

function connectNode(
  id: string,
  wirePort: number,
  logger: Logger,
  certs: FleetCertificates | undefined,
): EdgeClient {
  const core = new NodeCore({
    nodeId: id,
    store: memoryStore(),
    logger,
    buildAdapters: (configs) => buildAdapterRegistry(configs, { mock: mockAdapterFactory }),
    policy: DEFAULT_NODE_POLICY, // the simulated nodes run mock adapters only
  });
  return startEdgeClient({
    edgeAddress: `127.0.0.1:${wirePort}`,
    tls: certs
      ? { file: "bench", path: "edge", caFile: certs.ca, serverName: "", certFile: "", keyFile: "" }
      : undefined,
    nodeId: id,
    token: `${id}-token`,
    version: "bench",
    core,
    logger,
    backoffInitialMs: 500,
    backoffMaxMs: 5000,
  });
}

/**
 * Scrapes the Edge's own event-loop lag gauge (the largest delay of its 1 s timer over the last
 * 15 ticks) every 5 s; `stop` returns the worst seen, in ms. A scrape the Edge is too busy to
 * answer in time is skipped: the next one covers its window.
 */
function watchEdgeLag(edgeUrl: string): { stop(): Promise<number> } {
  let worstMs = 0;
  const scrape = async () => {
    try {
      const res = await fetch(`${edgeUrl}/metrics`, { signal: AbortSignal.timeout(4000) });
      const m = /^nodejs_eventloop_lag_seconds (\S+)$/m.exec(await res.text());
      if (m) worstMs = Math.max(worstMs, Number(m[1]) * 1000);
    } catch { /* skipped; see above */ }
  };
  const timer = setInterval(scrape, 5000);
  return {
    async stop() {
      clearInterval(timer);
      await scrape();
      return worstMs;
    },
  };
}

/** Runs the client process's load while sampling; returns its report and the figures. */
async function sustain(child: Deno.ChildProcess, edgePid: number, edgeUrl: string, o: Options) {
  const out = lines(child.stdout);
  const first = await within("the clients to start", 30_000, out.next());
  if (first.value !== "started") {
    throw new Error(`Cannot run the clients as they did not start: got '${first.value ?? ""}'`);
  }
  const sampler = sampleEverySecond(
    [edgePid, Deno.pid, child.pid].map((pid) => () => procUsage(pid)).concat(machineUsage),
    performance.now() + RAMP_MS,
  );
  const lag = probeLoopLag();
  const edgeLag = watchEdgeLag(edgeUrl);
  let last: IteratorResult<string>;
  let nodeLag: MsHistogram;
  let edgeLagMaxMs: number;
  let figures: ProcFigures[];
  try {
    last = await within("the clients' report", (o.duration + 120) * 1000, out.next());
  } finally {
    nodeLag = lag.stop();
    edgeLagMaxMs = await edgeLag.stop();
    figures = await sampler.stop();
  }
  if (last.done) throw new Error("Cannot read the clients' report as their process ended early");
  await within("the client process to exit", 10_000, child.status);
  return {
    report: JSON.parse(last.value) as ClientReport,
    edge: figures[0]!,
    nodes: figures[1]!,
    clients: figures[2]!,
    machine: figures[3]!,
    nodeLagP99Ms: nodeLag.percentile(99),
    nodeLagMaxMs: nodeLag.max,
    edgeLagMaxMs,
  };
}

async function runBench(o: Options): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "iop_fleet_bench_" });
  const httpPort = freePort();
  const wirePort = freePort();
  const edgeUrl = `http://127.0.0.1:${httpPort}`;
  const ids = Array.from({ length: o.nodes }, (_, i) => `sim-${String(i).padStart(4, "0")}`);
  const links: { stop(): unknown }[] = [];
  let edge: Proc | undefined;
  let child: Deno.ChildProcess | undefined;
  try {
    const certs = o.plaintext
      ? undefined
      : await ensureFleetCertificates(`${dir}/certs`, [{ role: "edge", id: "fleet-edge" }]);
    edge = o.floor
      ? spawnScript(new URL("./fleet_floor.ts", import.meta.url).pathname, [
        `--http-port=${httpPort}`,
        `--wire-port=${wirePort}`,
      ])
      : await spawnService("edge", edgeConfig(o, ids, httpPort, wirePort, certs), dir, "edge");
    await waitJson(`${edgeUrl}/healthz`, () => true);
    const idle = await procUsage(edge.pid);

    const logger = createLogger("bench.node", { level: "error" });
    const t0 = performance.now();
    for (const id of ids) {
      if (!o.floor) links.push(connectNode(id, wirePort, logger, certs));
      else links.push({ stop: connectFloorLink(wirePort, TOKEN_DELAY_MS) });
    }
    await waitJson(
      `${edgeUrl}/readyz`,
      (b) => (b as { nodes_connected: number }).nodes_connected === o.nodes,
      120_000,
    );
    const connectSeconds = (performance.now() - t0) / 1000;
    const hbStart = await procUsage(edge.pid);
    await sleep(HEARTBEAT_IDLE_MS);
    const hbEnd = await procUsage(edge.pid);

    child = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        new URL(import.meta.url).pathname,
        "--clients",
        `--url=${edgeUrl}`,
        `--streams=${o.streams}`,
        `--duration=${o.duration}`,
      ],
      stdin: "null",
      stdout: "piped",
      stderr: "inherit",
    }).spawn();
    const run = await sustain(child, edge.pid, edgeUrl, o);
    printTable(o, {
      idleRssMiB: idle.rssMiB,
      nodesRssMiB: hbEnd.rssMiB,
      heartbeatCpuPct: (hbEnd.cpuSeconds - hbStart.cpuSeconds) / (HEARTBEAT_IDLE_MS / 1000) * 100,
      connectSeconds,
      ...run,
    });
    if (run.report.failed > 0) {
      console.error("failures:", run.report.failures, run.report.examples);
      Deno.exitCode = 1;
    }
  } finally {
    try {
      child?.kill("SIGKILL");
    } catch { /* already exited */ }
    await child?.status;
    await Promise.all(links.map((l) => l.stop()));
    await edge?.kill();
    await Deno.remove(dir, { recursive: true });
  }
}

function printTable(
  o: Options,
  r: {
    idleRssMiB: number;
    nodesRssMiB: number;
    heartbeatCpuPct: number;
    connectSeconds: number;
    report: ClientReport;
    edge: ProcFigures;
    nodes: ProcFigures;
    clients: ProcFigures;
    machine: ProcFigures;
    nodeLagP99Ms: number;
    nodeLagMaxMs: number;
    edgeLagMaxMs: number;
  },
): void {
  // A percentile of no samples is NaN, which the client's JSON report turns into null.
  const f1 = (n: number | null) => (n !== null && Number.isFinite(n) ? n.toFixed(1) : "-");
  const mark = (ok: boolean) => (ok ? "✅" : "❌");
  const perNodeKiB = (r.nodesRssMiB - r.idleRssMiB) * 1024 / o.nodes;
  const c = r.report;
  const extra = (gap: number | null) => (gap === null ? null : Math.max(0, gap - TOKEN_DELAY_MS));
  const us = r.edge.cpuPct / 100 / c.steadyTokensPerSecond * 1e6;
  const targetTokensPerSecond = 2000 * 1000 / TOKEN_DELAY_MS;
  const rows: [string, string, string][] = [
    ["nodes connected", `${o.nodes} in ${f1(r.connectSeconds)} s`, ""],
    ["Edge RSS idle, no node (MiB)", f1(r.idleRssMiB), ""],
    [`Edge RSS, ${o.nodes} nodes heartbeating (MiB)`, f1(r.nodesRssMiB), ""],
    ["Edge CPU, nodes heartbeating (%)", f1(r.heartbeatCpuPct), ""],
    ["idle cost per connected node (KiB)", f1(perNodeKiB), `≤ 32 ${mark(perNodeKiB <= 32)}`],
    ["Edge CPU, streaming, mean (%)", f1(r.edge.cpuPct), `< 100 ${mark(r.edge.cpuPct < 100)}`],
    ["Edge CPU, streaming, worst second (%)", f1(r.edge.worstCpuPct), ""],
    ["Edge CPU per token delivered (µs)", f1(us), ""],
    [
      `cores for ${targetTokensPerSecond} tokens/s at that cost`,
      Number.isFinite(us) ? (us * targetTokensPerSecond / 1e6).toFixed(2) : "-",
      "< 1",
    ],
    [
      "Edge peak RSS, streaming (MiB)",
      f1(r.edge.peakRssMiB),
      `< 512 ${mark(r.edge.peakRssMiB < 512)}`,
    ],
    [
      "tokens/s delivered, steady",
      f1(c.steadyTokensPerSecond),
      `${o.streams * 1000 / TOKEN_DELAY_MS} paced`,
    ],
    ["tokens delivered, whole stage", `${c.tokens} in ${f1(c.seconds)} s`, ""],
    ["streams completed", `${c.completed} of ${c.started}`, ""],
    ["failures", String(c.failed), `0 ${mark(c.failed === 0)}`],
    ["delay added between tokens p50 (ms)", f1(extra(c.gapP50Ms)), ""],
    ["delay added between tokens p99 (ms)", f1(extra(c.gapP99Ms)), ""],
    ["gap between tokens p99 / max (ms)", `${f1(c.gapP99Ms)} / ${f1(c.gapMaxMs)}`, "50 paced"],
    ["first token p99 (ms)", f1(c.firstTokenP99Ms), ""],
    [
      "node simulator CPU mean (%) / RSS (MiB)",
      `${f1(r.nodes.cpuPct)} / ${f1(r.nodes.peakRssMiB)}`,
      "",
    ],
    ["Edge event-loop lag, worst (ms)", f1(r.edgeLagMaxMs), ""],
    [
      "node simulator event-loop lag p99 / max (ms)",
      `${f1(r.nodeLagP99Ms)} / ${f1(r.nodeLagMaxMs)}`,
      "",
    ],
    [
      "client process CPU mean (%) / RSS (MiB)",
      `${f1(r.clients.cpuPct)} / ${f1(r.clients.peakRssMiB)}`,
      "",
    ],
    ["client event-loop lag p99 / max (ms)", `${f1(c.lagP99Ms)} / ${f1(c.lagMaxMs)}`, ""],
    [
      "other processes CPU mean (%)",
      f1(Math.max(0, r.machine.cpuPct - r.edge.cpuPct - r.nodes.cpuPct - r.clients.cpuPct)),
      `machine ${f1(r.machine.cpuPct)} of ${100 * navigator.hardwareConcurrency}`,
    ],
  ];
  console.log(
    `\n${
      o.floor ? "The floor relay in the Edge's place (rows named Edge are its)" : "One Edge"
    }, ` +
      `${o.nodes} ${o.floor ? "plain TCP links" : "simulated nodes (heartbeat 2 s)"}, ` +
      `${o.streams} concurrent streams for ` +
      `${o.duration} s at ${
        1000 / TOKEN_DELAY_MS
      } tokens/s each (${navigator.hardwareConcurrency} cores)\n`,
  );
  console.log("| figure | value | target |");
  console.log("| --- | --- | --- |");
  for (const [name, value, target] of rows) console.log(`| ${name} | ${value} | ${target} |`);
}

const options = parseOptions(Deno.args);
if (options.clients) await runClients(options);
else await runBench(options);
