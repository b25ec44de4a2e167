/**
 * The fleet's Prometheus check: polls Prometheus' HTTP API until every tier's scrape job is up
 * and serves one of its own `iop_` series, for the container fleet suite to call once the fleet
 * runs (compose/fleet.yaml `prometheus`, scrape config deploy/prometheus/prometheus.yml).
 * @module
 */

/** One scrape job of Prometheus to wait for. */
export interface ScrapedTier {
  /** The `job` label (`cp`, `edge`, `node` in deploy/prometheus/prometheus.yml). */
  job: string;
  /** A series the job's targets must serve; defaults per job, see {@linkcode TIER_SERIES}. */
  series?: string;
  /** How many targets of the job must be up and serve the series (default 1). */
  instances?: number;
}

/** The series each tier of the fleet always serves, by job name. */
export const TIER_SERIES: Readonly<Record<string, string>> = {
  cp: "iop_cp_edges_connected",
  edge: "iop_edge_nodes_connected",
  node: "iop_node_runs_in_flight",
};

/** The tiers of compose/fleet.yaml: one Control Plane, two edges, three nodes. */
export const FLEET_TIERS: readonly ScrapedTier[] = [
  { job: "cp", instances: 1 },
  { job: "edge", instances: 2 },
  { job: "node", instances: 3 },
];

/** Options of {@linkcode assertPrometheusScrapesEveryTier}. */
export interface ScrapeCheckOptions {
  /** How long to keep polling before failing (default 60 s: a few 5 s scrape rounds). */
  timeoutMs?: number;
  /** Pause between polls (default 1 s). */
  everyMs?: number;
}

interface Sample {
  metric: Record<string, string>;
  value: [number, string];
}

/** Runs one instant query; throws when Prometheus answers anything but a vector. */
async function query(baseUrl: string, promql: string): Promise<Sample[]> {
  const url = new URL("/api/v1/query", baseUrl);
  url.searchParams.set("query", promql);
  const res = await fetch(url, { signal: AbortSignal.timeout(5_000) });
  const body = await res.json() as {
    status: string;
    error?: string;
    data?: { resultType: string; result: Sample[] };
  };
  if (body.status !== "success" || body.data?.resultType !== "vector") {
    throw new Error(`Cannot query ${promql}: HTTP ${res.status}, ${body.error ?? body.status}`);
  }
  return body.data.result;
}

/** What keeps `tier` from counting as scraped, or undefined once it does. */
async function missingOf(baseUrl: string, tier: ScrapedTier): Promise<string | undefined> {
  const want = tier.instances ?? 1;
  const job = JSON.stringify(tier.job);
  const targets = await query(baseUrl, `up{job=${job}}`);
  const up = targets.filter((s) => s.value[1] === "1").map((s) => s.metric.instance);
  const down = targets.filter((s) => s.value[1] !== "1").map((s) => s.metric.instance);
  if (up.length < want) {
    const detail = down.length > 0 ? ` (down: ${down.join(", ")})` : "";
    return `job ${tier.job}: ${up.length} of ${want} targets up${detail}`;
  }
  const series = tier.series ?? TIER_SERIES[tier.job];
  if (series === undefined) return undefined;
  const serving = await query(baseUrl, `count by (instance) (${series}{job=${job}})`);
  if (serving.length < want) {
    const have = serving.map((s) => s.metric.instance).join(", ") || "none";
    return `job ${tier.job}: ${series} from ${serving.length} of ${want} targets (${have})`;
  }
  return undefined;
}

/**
 * Resolves once Prometheus at `baseUrl` (e.g. `http://127.0.0.1:19090`) has every tier's job up
 * and holding its `iop_` series; otherwise fails after the timeout naming each missing tier.
 */
export async function assertPrometheusScrapesEveryTier(
  baseUrl: string,
  tiers: readonly ScrapedTier[] = FLEET_TIERS,
  options: ScrapeCheckOptions = {},
): Promise<void> {
  const timeoutMs = options.timeoutMs ?? 60_000;
  const deadline = performance.now() + timeoutMs;
  let missing: string[] = [];
  while (true) {
    try {
      missing = (await Promise.all(tiers.map((tier) => missingOf(baseUrl, tier))))
        .filter((m) => m !== undefined);
    } catch (err) {
      missing = [`Prometheus API unreachable: ${err instanceof Error ? err.message : err}`];
    }
    if (missing.length === 0) return;
    if (performance.now() > deadline) {
      throw new Error(
        `Prometheus at ${baseUrl} does not scrape every tier after ${timeoutMs} ms: ` +
          missing.join("; "),
      );
    }
    await new Promise((resolve) => setTimeout(resolve, options.everyMs ?? 1_000));
  }
}
