/**
 * Plumbing of the chaos and soak suite (`chaos_test.ts`): starts compose/fleet.yaml under a
 * project of its own with an override it writes at run time (every published port on a free
 * loopback port; edge-a, and any service running edge-a's config file, on a config derived from
 * compose/config/edge-a.yaml with an A2A agent and a `deploy` CLI profile), injects faults with
 * the docker CLI and records when each one held, samples every container's resident memory from
 * /proc, reads the nodes' histories through the Control Plane, scans container logs for
 * crashes, and renders the closing figures. Every wait is a poll against a deadline.
 * @module
 */
import { parse, stringify } from "yaml";
import { docker, FLEET_CP_READ, getJson, ROOT, run } from "./fleet_harness.ts";
import { freePort, until } from "./util.ts";

/** The public model of the `deploy` CLI profile added to edge-a, and its steps. */
export const DEPLOY_MODEL = "deploy";
export const DEPLOY_STEPS = 16;

/** The A2A agent added to edge-a (mock adapter): `/a2a/chaos`. */
export const A2A_AGENT = "chaos";

/** What the `deploy` profile prints for `tag` (a line each 0.5 s): the deterministic reply. */
export function deployReply(tag: string): string {
  const steps = Array.from({ length: DEPLOY_STEPS }, (_, i) => `deploy ${tag} step ${i + 1}\n`);
  return `deploy ${tag} start\n${steps.join("")}deploy ${tag} done\n`;
}

/** What the mock adapter answers: the prompt's words, then `tok<i>` up to `tokens` tokens. */
export function mockReply(prompt: string, tokens: number): string {
  const words = prompt.split(/\s+/).filter((w) => w !== "");
  return Array.from({ length: tokens }, (_, i) => words[i] ?? `tok${i}`).join(" ");
}

/** The edge-a config of the suite: the fleet's own plus an A2A agent and the deploy profile. */
async function chaosEdgeAConfig(): Promise<string> {
  const raw = parse(await Deno.readTextFile(`${ROOT}/compose/config/edge-a.yaml`));
  for (const node of raw.nodes as { adapters: { kind: string; profiles?: unknown[] }[] }[]) {
    const cli = node.adapters.find((a) => a.kind === "cli");
    if (!cli?.profiles) throw new Error("compose/config/edge-a.yaml: a node has no CLI profiles");
    // The nodes share one adapters list (a YAML alias): add the profile once.
    if (cli.profiles.some((p) => (p as { name: string }).name === DEPLOY_MODEL)) continue;
    cli.profiles.push({
      name: DEPLOY_MODEL,
      description: "A deploy: a start line, one step line each 0.5 s, a done line.",
      command: "sh",
      args: [
        "-c",
        'echo "deploy $1 start"; i=1; while [ $i -le $2 ]; do echo "deploy $1 step $i"; ' +
        'i=$((i+1)); sleep 0.5; done; echo "deploy $1 done"',
        "deploy",
        "{prompt}",
        String(DEPLOY_STEPS),
      ],
      timeout_ms: 120_000,
    });
  }
  if (raw.models.some((m: { name: string }) => m.name === DEPLOY_MODEL)) {
    throw new Error(
      `compose/config/edge-a.yaml: the suite adds the model '${DEPLOY_MODEL}' itself`,
    );
  }
  raw.models.push({ name: DEPLOY_MODEL, route: "direct", adapter: "cli", target: DEPLOY_MODEL });
  raw.agents = [...(raw.agents ?? []), {
    id: A2A_AGENT,
    name: "Chaos agent",
    description: "Answers with the mock adapter's generated text.",
    kind: "a2a",
    adapter: "mock",
    target: "demo",
    skills: [{ id: "chat", name: "Chat", description: "Replies to a message.", tags: ["demo"] }],
  }];
  return stringify(raw, { aliasDuplicateObjects: false, lineWidth: 0 });
}

/** One container of the project, as `docker compose ps -a` lists it. */
export interface ServiceContainer {
  service: string;
  id: string;
  state: string;
}

/** The started chaos fleet. */
export interface ChaosFleet {
  project: string;
  edgeAUrl: string;
  edgeBUrl: string;
  cpUrl: string;
  /** The loopback URL of a service's published port. */
  url(service: string): string;
  /** Container id of a compose service (one replica each; stable across restarts). */
  containerId(service: string): string;
  /** Every container of the project, one-shot ones included. */
  containers(): Promise<ServiceContainer[]>;
  /** Full name of a compose network (`<project>_<name>`). */
  network(name: string): string;
  dumpLogs(): Promise<void>;
  /** Removes containers, networks, volumes and the suite's files; safe after a failed start. */
  down(): Promise<void>;
}

/** A service of `docker compose config --format json`, as far as the override reads it. */
interface ComposeService {
  ports?: { target: number; host_ip?: string }[];
  volumes?: { type: string; source?: string; target: string }[];
}

/**
 * The override of compose/fleet.yaml the suite runs with: every published port moved to a free
 * loopback port (`!override`, so a service added to the fleet never collides with the fleet
 * suite's ports), and every service that mounts compose/config/edge-a.yaml (edge-a, and its
 * standby when the fleet has one) given the derived config instead.
 */
async function chaosOverride(
  edgeAConfig: string,
): Promise<{ yaml: string; urls: Map<string, string> }> {
  const config = await run("docker", [
    "compose",
    "-f",
    `${ROOT}/compose/fleet.yaml`,
    "config",
    "--format",
    "json",
  ]);
  if (config.code !== 0) throw new Error(`docker compose config failed: ${config.stderr}`);
  const services = JSON.parse(config.stdout).services as Record<string, ComposeService>;
  const urls = new Map<string, string>();
  const lines = ["services:"];
  for (const [name, service] of Object.entries(services)) {
    const body: string[] = [];
    if (service.ports?.length) {
      body.push("    ports: !override");
      for (const [i, p] of service.ports.entries()) {
        const port = freePort();
        if (i === 0) urls.set(name, `http://127.0.0.1:${port}`);
        body.push(`      - "127.0.0.1:${port}:${p.target}"`);
      }
    }
    const edgeA = (service.volumes ?? []).find((v) =>
      v.type === "bind" && v.source === `${ROOT}/compose/config/edge-a.yaml`
    );
    if (edgeA) {
      // Replaces the base mount of the same target (compose merges volumes by target).
      body.push("    volumes:", `      - "${edgeAConfig}:${edgeA.target}:ro"`);
    }
    if (body.length) lines.push(`  ${name}:`, ...body);
  }
  return { yaml: `${lines.join("\n")}\n`, urls };
}

/** Starts the fleet with the chaos override and waits until every service is healthy. */
export async function startChaosFleet(): Promise<ChaosFleet> {
  const project = `iop-chaos-${crypto.randomUUID().slice(0, 8)}`;
  const dir = await Deno.makeTempDir({ prefix: "iop-chaos-" });
  const edgeAConfig = `${dir}/edge-a.yaml`;
  await Deno.writeTextFile(edgeAConfig, await chaosEdgeAConfig());
  const override = await chaosOverride(edgeAConfig);
  await Deno.writeTextFile(`${dir}/chaos.yaml`, override.yaml);
  const files = ["-f", `${ROOT}/compose/fleet.yaml`, "-f", `${dir}/chaos.yaml`];
  const compose = (args: string[], timeoutMs = 120_000) =>
    run("docker", ["compose", "-p", project, ...files, ...args], timeoutMs);
  const containers = async (): Promise<ServiceContainer[]> => {
    const ps = await compose(["ps", "-a", "--format", "json"]);
    if (ps.code !== 0) throw new Error(`docker compose ps failed: ${ps.stderr.trim()}`);
    // One JSON object per line (compose v2.2x), or one array (older v2).
    const text = ps.stdout.trim();
    const rows = text.startsWith("[")
      ? JSON.parse(text)
      : text.split("\n").filter(Boolean).map((l) => JSON.parse(l));
    return (rows as { Service: string; ID: string; State: string }[]).map((r) => ({
      service: r.Service,
      id: r.ID,
      state: r.State,
    }));
  };
  const dumpLogs = async () => {
    const logs = await compose(["logs", "--no-color", "--tail", "40"]);
    console.log(`---- chaos fleet logs (${project}) ----\n${logs.stdout}${logs.stderr}`);
  };
  const down = async () => {
    const r = await compose(["down", "--volumes", "--timeout", "2"]);
    if (r.code !== 0) console.error(`chaos: compose down failed: ${r.stderr.trim()}`);
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  };
  const upSince = performance.now();
  const waiting = setInterval(() => {
    const s = Math.round((performance.now() - upSince) / 1000);
    console.log(`chaos: waiting for ${project}'s containers to be healthy (${s} s)`);
  }, 10_000);
  let ids: Map<string, string>;
  try {
    const up = await compose(
      ["up", "-d", "--wait", "--wait-timeout", "150"],
      180_000,
    );
    if (up.code !== 0) throw new Error(`docker compose up failed (${up.code}): ${up.stderr}`);
    ids = new Map((await containers()).map((c) => [c.service, c.id]));
  } catch (err) {
    await dumpLogs();
    await down();
    throw err;
  } finally {
    clearInterval(waiting);
  }
  const url = (service: string) => {
    const u = override.urls.get(service);
    if (!u) throw new Error(`chaos: the service '${service}' publishes no port`);
    return u;
  };
  return {
    project,
    edgeAUrl: url("edge-a"),
    edgeBUrl: url("edge-b"),
    cpUrl: url("cp"),
    url,
    containerId(service) {
      const id = ids.get(service);
      if (!id) throw new Error(`chaos: the project has no service '${service}'`);
      return id;
    },
    containers,
    network: (name) => `${project}_${name}`,
    dumpLogs,
    down,
  };
}

// ---------------------------------------------------------------------------------------------
// Faults

/** A fault: kill -9 then start, SIGSTOP then SIGCONT, a network cut, or a restart. */
export type Fault =
  | { kind: "kill"; service: string; outageMs: number }
  | { kind: "pause"; service: string; outageMs: number }
  | {
    kind: "disconnect";
    service: string;
    network: string;
    outageMs: number;
    /**
     * Whether the cut also cuts the service's clients off: Docker publishes a container's
     * ports through one of its networks, so cutting that one breaks its clients' connections.
     */
    cutsClients: boolean;
  }
  | { kind: "restart"; service: string };

/** When a fault held, from its injection until its service was given back (performance.now). */
export interface FaultWindow {
  fault: Fault;
  fromMs: number;
  toMs: number;
}

/** A short name of a fault, for the figures. */
export function faultName(f: Fault): string {
  return f.kind === "disconnect"
    ? `disconnect ${f.service} from ${f.network}`
    : `${f.kind} ${f.service}`;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * Injects `fault` and undoes it after its outage. A pause stops every process of the container
 * but its init with SIGSTOP (`docker kill -s STOP` would stop only the init, PID 1, whose
 * children run on), and continues them with SIGCONT.
 */
export async function injectFault(fleet: ChaosFleet, fault: Fault): Promise<FaultWindow> {
  const id = fleet.containerId(fault.service);
  const fromMs = performance.now();
  switch (fault.kind) {
    case "kill":
      await docker(["kill", "-s", "KILL", id]);
      await sleep(fault.outageMs);
      await docker(["start", id]);
      break;
    case "pause":
      await docker(["exec", id, "sh", "-c", "kill -STOP -1"]);
      await sleep(fault.outageMs);
      await docker(["exec", id, "sh", "-c", "kill -CONT -1"]);
      break;
    case "disconnect": {
      const network = fleet.network(fault.network);
      await docker(["network", "disconnect", network, id]);
      await sleep(fault.outageMs);
      // The service name stays resolvable on the network (compose set it as an alias).
      await docker(["network", "connect", "--alias", fault.service, network, id]);
      break;
    }
    case "restart":
      await docker(["restart", "--time", "5", id], 60_000);
      break;
  }
  return { fault, fromMs, toMs: performance.now() };
}

// ---------------------------------------------------------------------------------------------
// Resident memory

/** The processes whose memory is the service's: Deno for the IOP tiers, Prometheus. */
const SERVICE_PROCESSES = new Set(["deno", "prometheus"]);

/** A container's start time (ms since the epoch) and whether it runs. */
export async function containerState(
  id: string,
): Promise<{ startedAtMs: number; running: boolean }> {
  const out = await docker(["inspect", "-f", "{{.State.StartedAt}} {{.State.Running}}", id]);
  const [started, running] = out.split(" ");
  return { startedAtMs: Date.parse(started ?? ""), running: running === "true" };
}

/** Resident bytes of a container's service processes, from /proc/<pid>/status (VmRSS). */
export async function residentBytes(id: string): Promise<number> {
  const out = await docker([
    "exec",
    id,
    "sh",
    "-c",
    'for f in /proc/[0-9]*/status; do cat "$f" 2>/dev/null; done',
  ], 15_000);
  let total = 0;
  let name = "";
  for (const line of out.split("\n")) {
    if (line.startsWith("Name:")) name = line.slice(5).trim();
    const m = line.match(/^VmRSS:\s+(\d+) kB/);
    if (m && SERVICE_PROCESSES.has(name)) total += Number(m[1]) * 1024;
  }
  return total;
}

/** One service's resident memory over the soak, measured from its warm-up (or last restart). */
export interface RssTrack {
  service: string;
  /** When the container last started (ms since the epoch). */
  startedAtMs: number;
  restarts: number;
  /** First sample once warm; undefined until then. */
  baseline?: number;
  last?: number;
  /** Largest sample since the baseline. */
  max?: number;
  samples: number;
}

/**
 * Tracks resident memory per service: a sample counts once the soak ran `warmMs` and the
 * container has been up `warmMs`; a restarted container starts a new baseline.
 */
export class RssTracker {
  readonly tracks = new Map<string, RssTrack>();
  constructor(readonly soakStartMs: number, readonly warmMs: number) {}

  /** Records a sample of `service` taken at `nowMs` (ms since the epoch). */
  add(service: string, startedAtMs: number, bytes: number, nowMs: number): void {
    let t = this.tracks.get(service);
    if (!t) {
      t = { service, startedAtMs, restarts: 0, samples: 0 };
      this.tracks.set(service, t);
    }
    if (t.startedAtMs !== startedAtMs) {
      t.startedAtMs = startedAtMs;
      t.restarts++;
      delete t.baseline;
      delete t.max;
      delete t.last;
    }
    const warm = nowMs - this.soakStartMs >= this.warmMs && nowMs - startedAtMs >= this.warmMs;
    if (!warm) return;
    t.samples++;
    t.baseline ??= bytes;
    t.last = bytes;
    t.max = Math.max(t.max ?? 0, bytes);
  }
}

/** Samples every running container of the fleet into `tracker`; a failed exec is skipped. */
export async function sampleRss(fleet: ChaosFleet, tracker: RssTracker): Promise<void> {
  const running = (await fleet.containers()).filter((c) => c.state === "running");
  await Promise.all(running.map(async (c) => {
    try {
      const state = await containerState(c.id);
      if (!state.running) return;
      tracker.add(c.service, state.startedAtMs, await residentBytes(c.id), Date.now());
    } catch {
      // Stopped or cut off between the listing and the sample: the next round measures it.
    }
  }));
}

// ---------------------------------------------------------------------------------------------
// Logs

/** What a crash or an unhandled failure of a Deno service prints. */
const CRASH_PATTERN = /uncaught|unhandled|panicked/i;

/** Log lines of every container of the project that tell of a crash or unhandled failure. */
export async function crashLines(fleet: ChaosFleet): Promise<{ service: string; line: string }[]> {
  const found: { service: string; line: string }[] = [];
  for (const c of await fleet.containers()) {
    const logs = await run("docker", ["logs", c.id], 60_000);
    for (const line of `${logs.stdout}\n${logs.stderr}`.split("\n")) {
      if (CRASH_PATTERN.test(line)) found.push({ service: c.service, line: line.slice(0, 300) });
    }
  }
  return found;
}

// ---------------------------------------------------------------------------------------------
// Node histories through the Control Plane

/** A run of a node's history, as GET /edges/{id}/nodes/{node}/runs lists it. */
export interface HistoryRow {
  runId: string;
  adapter: string;
  target: string;
  status: string;
  outputSummary?: string;
  errorCode?: string;
}

/** Newest runs read per node and poll; polls come often enough that no run slips past. */
const HISTORY_LIMIT = 100;

/** Statuses a run ends in. */
export const TERMINAL_STATUSES: ReadonlySet<string> = new Set([
  "completed",
  "failed",
  "cancelled",
  "interrupted",
]);

/** Runs seen in the nodes' histories, merged over polls (a later poll's status wins). */
export class HistoryBook {
  readonly rows = new Map<string, HistoryRow & { node: string }>();
  polls = 0;
  /** Why reads failed (the Control Plane restarting, an edge or node away), and how often. */
  readonly failures = new Map<string, number>();

  #fail(what: string, err: unknown): void {
    const why = `${what}: ${(err as Error).message.replace(/\d{3,}/g, "N").slice(0, 80)}`;
    this.failures.set(why, (this.failures.get(why) ?? 0) + 1);
  }

  /** Reads the newest runs of every node each edge reports, through the Control Plane. */
  async poll(cpUrl: string): Promise<void> {
    this.polls++;
    let edges;
    try {
      ({ edges } = await getJson<{
        edges: {
          edgeId: string;
          connected?: boolean;
          status?: { nodes?: { id: string; connected?: boolean }[] };
        }[];
      }>(`${cpUrl}/edges`, FLEET_CP_READ));
    } catch (err) {
      return this.#fail("GET /edges", err);
    }
    for (const edge of edges.filter((e) => e.connected)) {
      // A standby lists the nodes it could serve; only a connected node answers.
      for (const node of (edge.status?.nodes ?? []).filter((n) => n.connected)) {
        try {
          const res = await fetch(
            `${cpUrl}/edges/${edge.edgeId}/nodes/${node.id}/runs?limit=${HISTORY_LIMIT}`,
            { headers: FLEET_CP_READ, signal: AbortSignal.timeout(15_000) },
          );
          if (!res.ok) throw new Error(`HTTP ${res.status} ${await res.text()}`);
          const { runs } = await res.json() as { runs: HistoryRow[] };
          for (const r of runs) this.rows.set(r.runId, { ...r, node: node.id });
        } catch (err) {
          this.#fail(`${node.id} via ${edge.edgeId}`, err);
        }
      }
    }
  }

  /** The rows whose output names each `cx<n>` tag as a whole word. */
  byTag(): Map<string, (HistoryRow & { node: string })[]> {
    const tagged = new Map<string, (HistoryRow & { node: string })[]>();
    for (const row of this.rows.values()) {
      for (const tag of new Set((row.outputSummary ?? "").match(/\bcx\d+\b/g) ?? [])) {
        tagged.set(tag, [...(tagged.get(tag) ?? []), row]);
      }
    }
    return tagged;
  }
}

/** Waits until every node the Control Plane knows on both edges is connected. */
export function untilFleetWhole(fleet: ChaosFleet, edges: Record<string, string[]>, ms: number) {
  return until(
    "every edge attached to the Control Plane with all its nodes",
    async () => {
      const { edges: views } = await getJson<{
        edges: {
          edgeId: string;
          connected?: boolean;
          status?: { nodes?: { id: string; connected?: boolean }[] };
        }[];
      }>(`${fleet.cpUrl}/edges`, FLEET_CP_READ);
      return Object.entries(edges).every(([edgeId, nodes]) => {
        const v = views.find((e) => e.edgeId === edgeId);
        const up = (v?.status?.nodes ?? []).filter((n) => n.connected).map((n) => n.id);
        return v?.connected === true && nodes.every((n) => up.includes(n));
      });
    },
    ms,
    250,
  );
}

// ---------------------------------------------------------------------------------------------
// Figures

function mib(bytes: number | undefined): string {
  return bytes === undefined ? "-" : `${(bytes / 1024 / 1024).toFixed(1)}`;
}

/** Renders rows as an aligned text table with a header. */
export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i]!)).join("  ").trimEnd();
  return [line(header), line(widths.map((w) => "-".repeat(w))), ...rows.map(line)].join("\n");
}

/** The RSS table: start (baseline once warm), end, max and growth per service. */
export function rssTable(tracks: Iterable<RssTrack>): string {
  const rows = [...tracks].sort((a, b) => a.service.localeCompare(b.service)).map((t) => {
    const growth = t.baseline && t.max !== undefined
      ? `${(((t.max - t.baseline) / t.baseline) * 100).toFixed(1)} %`
      : "-";
    return [
      t.service,
      mib(t.baseline),
      mib(t.last),
      mib(t.max),
      growth,
      String(t.restarts),
      String(t.samples),
    ];
  });
  return table(
    ["service", "RSS start MiB", "end MiB", "max MiB", "max growth", "restarts", "samples"],
    rows,
  );
}
