/**
 * The Node's own configuration: who it is, where its Edge is, where it keeps history, and its
 * policy (what the adapters the Edge pushes at registration may use on this host, and how many
 * runs it executes at once, `policy.max_active_runs`; see `policy.ts`). The adapters themselves
 * come from the Edge, not from this file.
 *
 * The Edge is `edge.address` (one `host:port`) or `edge.addresses` (several, the active Edge
 * first, then its standbys; `IOP_NODE_EDGE_ADDRESSES`, comma-separated); setting both is an
 * error. How the node moves between them, and back every `edge.failback_ms`, is
 * `transport/edge_addresses.ts`.
 * @module
 */
import {
  applyEnvOverrides,
  ConfigReader,
  type EnvOverride,
  readYamlFile,
} from "../../shared/config.ts";
import { DEFAULT_MAX_FRAME_BYTES } from "../../shared/wire/frame.ts";
import { splitAddress } from "../../shared/wire/link.ts";
import { type DialTlsFiles, type LinkSecurity, readDialTls } from "../../shared/wire/tls.ts";
import { DEFAULT_OUTPUT_CAP_BYTES, MAX_OUTPUT_CAP_BYTES } from "./output_cap.ts";
import { type NodePolicy, readNodePolicy } from "./policy.ts";
import { DEFAULT_RESUME_GRACE_MS } from "./transport/run_ledger.ts";

/** The validated Node configuration. */
export interface NodeConfig {
  file: string;
  node: { id: string; token: string };
  edge: {
    /** The first of `addresses`: the active Edge. */
    address: string;
    /** Every Edge address in failover order (one unless `edge.addresses` lists several). */
    addresses: string[];
    /** `failback_ms`: how often a node on a standby checks the first address; 0 = never. */
    failbackMs: number;
    maxFrameBytes: number;
    /**
     * `resume_grace_ms`: how long runs are held after the link to the Edge is lost, for it to
     * resume them on the next link (`transport/run_ledger.ts`); 0 cancels them at once.
     */
    resumeGraceMs: number;
    backoffInitialMs: number;
    backoffMaxMs: number;
    /** `edge.tls` or `edge.insecure_plaintext`; the Node refuses to start with neither. */
    security: LinkSecurity<DialTlsFiles>;
  };
  http: { host: string; port: number };
  /**
   * `output_cap_bytes`: most bytes of one run's whole output kept in the history (more is cut
   * and marked), at most {@linkcode MAX_OUTPUT_CAP_BYTES} so that it fits one reply frame.
   */
  history: { path: string; outputCapBytes: number };
  /** What configuration pushed by the Edge may use here; `mock` only without a section. */
  policy: NodePolicy;
  /** Adapter health probes (`health_monitor.ts`): period and limit of one probe. */
  health: { intervalMs: number; probeTimeoutMs: number };
  /**
   * `drain_timeout_ms`: how long a stopping node (SIGTERM, SIGINT) lets its runs in flight
   * finish before it cancels the rest; 0 cancels them at once. Keep it below the container's
   * stop grace period (compose gives nodes 30 s).
   */
  shutdown: { drainTimeoutMs: number };
}

/** Longest `shutdown.drain_timeout_ms`: a day (the wire carries it as a uint32). */
export const MAX_DRAIN_TIMEOUT_MS = 86_400_000;

/** Longest `edge.resume_grace_ms`: a day. */
export const MAX_RESUME_GRACE_MS = 86_400_000;

/** Default `edge.failback_ms`. */
export const DEFAULT_FAILBACK_MS = 30_000;

/** Shortest `edge.failback_ms` other than 0, so that the checks cannot run in a tight loop. */
export const MIN_FAILBACK_MS = 100;

/** Environment variables that override Node config keys. */
export const NODE_ENV: readonly EnvOverride[] = [
  { env: "IOP_NODE_ID", path: "node.id", type: "string" },
  { env: "IOP_NODE_TOKEN", path: "node.token", type: "string" },
  { env: "IOP_NODE_TOKEN_FILE", path: "node.token_file", type: "string" },
  { env: "IOP_NODE_EDGE_ADDRESS", path: "edge.address", type: "string" },
  { env: "IOP_NODE_EDGE_ADDRESSES", path: "edge.addresses", type: "list" },
  { env: "IOP_NODE_EDGE_FAILBACK_MS", path: "edge.failback_ms", type: "number" },
  { env: "IOP_NODE_EDGE_RESUME_GRACE_MS", path: "edge.resume_grace_ms", type: "number" },
  { env: "IOP_NODE_EDGE_TLS_CA", path: "edge.tls.ca", type: "string" },
  { env: "IOP_NODE_EDGE_TLS_SERVER_NAME", path: "edge.tls.server_name", type: "string" },
  { env: "IOP_NODE_EDGE_TLS_CERT", path: "edge.tls.cert", type: "string" },
  { env: "IOP_NODE_EDGE_TLS_KEY", path: "edge.tls.key", type: "string" },
  { env: "IOP_NODE_EDGE_INSECURE_PLAINTEXT", path: "edge.insecure_plaintext", type: "boolean" },
  { env: "IOP_NODE_HTTP_HOST", path: "http.host", type: "string" },
  { env: "IOP_NODE_HTTP_PORT", path: "http.port", type: "number" },
  { env: "IOP_NODE_HISTORY_PATH", path: "history.path", type: "string" },
  { env: "IOP_NODE_SHUTDOWN_DRAIN_TIMEOUT_MS", path: "shutdown.drain_timeout_ms", type: "number" },
];

/** Loads the Node config file, then applies environment overrides. */
export async function loadNodeConfig(
  file: string,
  env?: (name: string) => string | undefined,
): Promise<NodeConfig> {
  return parseNodeConfig(applyEnvOverrides(await readYamlFile(file), NODE_ENV, env), file);
}

/** Validates a raw Node config object. */
export function parseNodeConfig(raw: unknown, file: string): NodeConfig {
  const root = new ConfigReader(file, raw);
  const node = root.section("node");
  const edge = root.section("edge");
  const http = root.section("http");
  const history = root.section("history");
  const health = root.section("health");
  const shutdown = root.section("shutdown");
  const id = node.nonEmpty("id");
  const addresses = readEdgeAddresses(edge);
  return {
    file,
    node: { id, token: readToken(node) },
    edge: {
      address: addresses[0]!,
      addresses,
      failbackMs: readFailbackMs(edge),
      maxFrameBytes: edge.number("max_frame_bytes", DEFAULT_MAX_FRAME_BYTES, { min: 1024 }),
      resumeGraceMs: edge.number("resume_grace_ms", DEFAULT_RESUME_GRACE_MS, {
        min: 0,
        max: MAX_RESUME_GRACE_MS,
      }),
      backoffInitialMs: edge.number("backoff_initial_ms", 250, { min: 10 }),
      backoffMaxMs: edge.number("backoff_max_ms", 10_000, { min: 10 }),
      security: readDialTls(edge),
    },
    http: {
      host: http.nonEmpty("host", "127.0.0.1"),
      port: http.number("port", 9100, { min: 0, max: 65535 }),
    },
    history: {
      path: history.nonEmpty("path", `.iop/${id}/history.db`),
      outputCapBytes: history.number("output_cap_bytes", DEFAULT_OUTPUT_CAP_BYTES, {
        min: 0,
        max: MAX_OUTPUT_CAP_BYTES,
      }),
    },
    policy: readNodePolicy(root),
    health: {
      intervalMs: health.number("interval_ms", 15_000, { min: 0 }),
      probeTimeoutMs: health.number("probe_timeout_ms", 3_000, { min: 10 }),
    },
    shutdown: {
      drainTimeoutMs: shutdown.number("drain_timeout_ms", 25_000, {
        min: 0,
        max: MAX_DRAIN_TIMEOUT_MS,
      }),
    },
  };
}

/**
 * `edge.addresses` (a non-empty list of distinct `host:port`), or `edge.address` as a list of
 * one (default `127.0.0.1:7100`). At most one of the two may be set.
 */
function readEdgeAddresses(edge: ConfigReader): string[] {
  if (!edge.has("addresses")) {
    const address = edge.nonEmpty("address", "127.0.0.1:7100");
    checkAddress(edge, "address", address);
    return [address];
  }
  if (edge.has("address")) {
    throw edge.error(
      "addresses",
      "cannot be set together with edge.address (IOP_NODE_EDGE_ADDRESS): set only one",
    );
  }
  const addresses = edge.strings("addresses").map((a) => a.trim());
  if (addresses.length === 0) {
    throw edge.error("addresses", "must list at least one host:port");
  }
  addresses.forEach((address, i) => {
    checkAddress(edge, `addresses[${i}]`, address);
    if (addresses.indexOf(address) !== i) {
      throw edge.error(`addresses[${i}]`, `lists '${address}' a second time`);
    }
  });
  return addresses;
}

function checkAddress(edge: ConfigReader, key: string, address: string): void {
  try {
    splitAddress(address);
  } catch {
    throw edge.error(key, `must be host:port: current value is '${address}'`);
  }
}

/** `edge.failback_ms`: 0 (never) or at least {@linkcode MIN_FAILBACK_MS}. */
function readFailbackMs(edge: ConfigReader): number {
  const ms = edge.number("failback_ms", DEFAULT_FAILBACK_MS, { min: 0 });
  if (ms !== 0 && ms < MIN_FAILBACK_MS) {
    throw edge.error(
      "failback_ms",
      `must be 0 (never) or at least ${MIN_FAILBACK_MS}: current value is ${ms}`,
    );
  }
  return ms;
}

/**
 * `node.token`, or the contents of `node.token_file` (a Swarm or Kubernetes secret such as
 * `/run/secrets/iop-gpu-token`; surrounding whitespace, e.g. the newline `echo` leaves, is not
 * part of it). Exactly one of the two must be set.
 */
function readToken(node: ConfigReader): string {
  if (!node.has("token_file")) return node.nonEmpty("token");
  if (node.has("token")) {
    throw node.error(
      "token_file",
      "cannot be set together with node.token (IOP_NODE_TOKEN): set only one",
    );
  }
  const path = node.nonEmpty("token_file");
  let text: string;
  try {
    text = Deno.readTextFileSync(path);
  } catch (err) {
    throw node.error("token_file", `cannot read '${path}': ${(err as Error).message}`);
  }
  const token = text.trim();
  if (token === "") throw node.error("token_file", `file '${path}' holds no token`);
  return token;
}
