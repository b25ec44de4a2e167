/**
 * The Control Plane's configuration: one YAML file per environment plus `IOP_CP_*` overrides,
 * validated whole. It holds only the Control Plane's own settings and secrets (the edges it
 * admits with each one's credential, the named access tokens of its API, see
 * `access_config.ts`); nothing of any Edge's configuration.
 *
 * ```yaml
 * wire:
 *   edges: # each edge id with the one credential it must present (plain or sha256:…)
 *     - { id: edge-a, credential: "sha256:…" } # deno task hash-secret
 *     - { id: edge-b, credential: another-secret }
 * ```
 * @module
 */
import {
  applyEnvOverrides,
  ConfigError,
  ConfigReader,
  type EnvOverride,
  readYamlFile,
} from "../../shared/config.ts";
import { readStoredSecret, secretFingerprint } from "../../shared/secrets.ts";
import { type AccessConfig, applyAccessTokensOverride, parseAccess } from "./access_config.ts";
import { type LinkSecurity, type ListenTlsFiles, readListenTls } from "../../shared/wire/tls.ts";

/** The whole validated Control Plane configuration. */
export interface CpConfig {
  file: string;
  controlPlane: { id: string };
  http: { host: string; port: number };
  wire: {
    host: string;
    port: number;
    maxFrameBytes: number;
    heartbeatIntervalMs: number;
    helloTimeoutMs: number;
    /** Connections not yet past their hello (handshaking, logging in) allowed at once. */
    maxPendingConnections: number;
    /** `wire.tls` or `wire.insecure_plaintext`; the Control Plane refuses to start with neither. */
    security: LinkSecurity<ListenTlsFiles>;
    /**
     * The edges allowed to attach, each with the credential (plain or `sha256:<hex>`) that only
     * it may present; ids and credentials are unique. Empty admits no edge.
     */
    edges: EdgeGrant[];
  };
  /**
   * Named bearer tokens with roles, allowed browser origins and the refresh rate limit; the
   * deprecated `admin.tokens` are folded in as operate tokens `admin-1`, `admin-2`, ….
   */
  access: AccessConfig;
  audit: { path: string };
  registry: { eventsPerEdge: number; statusTimeoutMs: number };
  /**
   * `default_timeout_ms`: the deadline of a command that names none (sent to the edge, which
   * enforces it); `result_grace_ms`: how much longer the Control Plane waits for the edge's
   * answer before it records the share as unknown; `retained`: finished commands kept.
   */
  commands: { defaultTimeoutMs: number; resultGraceMs: number; retained: number };
  /**
   * The dashboard's charts: every `sample_interval_ms` the Control Plane asks each connected
   * edge for its status and keeps one sample per edge for `window_ms` (default 15 minutes).
   */
  series: { sampleIntervalMs: number; windowMs: number };
  /**
   * `drain_timeout_ms`: how long a stopping Control Plane waits for the results of fleet
   * commands in flight (taking no new command meanwhile) before it records the shares still
   * running as unknown (0 does not wait).
   */
  shutdown: { drainTimeoutMs: number };
}

/** Longest `shutdown.drain_timeout_ms`: a day. */
export const MAX_DRAIN_TIMEOUT_MS = 86_400_000;

/** One edge the Control Plane admits: its id and the credential that proves it. */
export interface EdgeGrant {
  id: string;
  /** Plain or `sha256:<64 hex>`; compare with `secretMatches`, never with `===`. */
  credential: string;
}

/**
 * Replaces `wire.edges` as `id=credential,id=credential` (a credential may contain `=` but not
 * `,`); set to an empty string to admit no edge.
 */
export const EDGES_ENV = "IOP_CP_EDGES";

/**
 * Environment variables that override Control Plane config keys (plus {@linkcode EDGES_ENV} and
 * `IOP_CP_ACCESS_TOKENS`, see `access_config.ts`).
 */
export const CP_ENV: readonly EnvOverride[] = [
  { env: "IOP_CP_ID", path: "control_plane.id", type: "string" },
  { env: "IOP_CP_HTTP_HOST", path: "http.host", type: "string" },
  { env: "IOP_CP_HTTP_PORT", path: "http.port", type: "number" },
  { env: "IOP_CP_WIRE_HOST", path: "wire.host", type: "string" },
  { env: "IOP_CP_WIRE_PORT", path: "wire.port", type: "number" },
  { env: "IOP_CP_HEARTBEAT_INTERVAL_MS", path: "wire.heartbeat_interval_ms", type: "number" },
  { env: "IOP_CP_WIRE_TLS_CERT", path: "wire.tls.cert", type: "string" },
  { env: "IOP_CP_WIRE_TLS_KEY", path: "wire.tls.key", type: "string" },
  { env: "IOP_CP_WIRE_TLS_CLIENT_CA", path: "wire.tls.client_ca", type: "string" },
  { env: "IOP_CP_WIRE_INSECURE_PLAINTEXT", path: "wire.insecure_plaintext", type: "boolean" },
  { env: "IOP_CP_ADMIN_TOKENS", path: "admin.tokens", type: "list" },
  { env: "IOP_CP_ALLOWED_ORIGINS", path: "access.allowed_origins", type: "list" },
  {
    env: "IOP_CP_REFRESH_MIN_INTERVAL_MS",
    path: "access.refresh_min_interval_ms",
    type: "number",
  },
  { env: "IOP_CP_AUDIT_PATH", path: "audit.path", type: "string" },
  { env: "IOP_CP_SHUTDOWN_DRAIN_TIMEOUT_MS", path: "shutdown.drain_timeout_ms", type: "number" },
];

/** Loads and validates the config file with environment overrides. */
export async function loadCpConfig(
  file: string,
  env?: (name: string) => string | undefined,
): Promise<CpConfig> {
  const read = env ?? ((name: string) => Deno.env.get(name));
  const raw = applyEnvOverrides(await readYamlFile(file), CP_ENV, read);
  applyEdgesOverride(raw, read);
  applyAccessTokensOverride(raw, read);
  return parseCpConfig(raw, file);
}

/** Writes `IOP_CP_EDGES` into `wire.edges`; refuses the removed `IOP_CP_EDGE_CREDENTIALS`. */
function applyEdgesOverride(
  raw: Record<string, unknown>,
  env: (name: string) => string | undefined,
): void {
  if (env("IOP_CP_EDGE_CREDENTIALS") !== undefined) {
    throw new ConfigError(
      "IOP_CP_EDGE_CREDENTIALS",
      "",
      `is no longer supported as each credential now belongs to one edge: ` +
        `set ${EDGES_ENV}=edge-a=<credential>,edge-b=<credential> instead`,
    );
  }
  const value = env(EDGES_ENV);
  if (value === undefined) return;
  const edges = value.split(",").map((s) => s.trim()).filter((s) => s !== "").map((entry, i) => {
    const eq = entry.indexOf("=");
    if (eq <= 0 || eq === entry.length - 1) {
      throw new ConfigError(
        EDGES_ENV,
        "",
        `entry ${i + 1} must be 'id=credential' (comma-separated entries)`,
      );
    }
    return { id: entry.slice(0, eq).trim(), credential: entry.slice(eq + 1).trim() };
  });
  const wire = raw.wire;
  if (typeof wire === "object" && wire !== null && !Array.isArray(wire)) {
    (wire as Record<string, unknown>).edges = edges;
  } else {
    raw.wire = { edges };
  }
}

/** Validates a raw config object; throws a ConfigError naming the bad key. */
export function parseCpConfig(raw: unknown, file: string): CpConfig {
  const root = new ConfigReader(file, raw);
  const cp = root.section("control_plane");
  const http = root.section("http");
  const wire = root.section("wire");
  const admin = root.section("admin");
  const audit = root.section("audit");
  const registry = root.section("registry");
  const commands = root.section("commands");
  const series = root.section("series");
  const shutdown = root.section("shutdown");
  const sampleIntervalMs = series.number("sample_interval_ms", 5_000, { min: 100 });
  const id = cp.nonEmpty("id", "cp-local");
  return {
    file,
    controlPlane: { id },
    http: {
      host: http.nonEmpty("host", "127.0.0.1"),
      port: http.number("port", 8090, { min: 0, max: 65535 }),
    },
    wire: {
      host: wire.nonEmpty("host", "127.0.0.1"),
      port: wire.number("port", 7200, { min: 0, max: 65535 }),
      maxFrameBytes: wire.number("max_frame_bytes", 1024 * 1024, { min: 1024 }),
      heartbeatIntervalMs: wire.number("heartbeat_interval_ms", 2000, { min: 50 }),
      helloTimeoutMs: wire.number("hello_timeout_ms", 10_000, { min: 100 }),
      maxPendingConnections: wire.number("max_pending_connections", 256, { min: 1 }),
      security: readListenTls(wire),
      edges: parseEdgeGrants(wire),
    },
    access: parseAccess(root.section("access"), admin),
    audit: { path: audit.nonEmpty("path", `.iop/${id}/audit.sqlite`) },
    registry: {
      eventsPerEdge: registry.number("events_per_edge", 200, { min: 1 }),
      statusTimeoutMs: registry.number("status_timeout_ms", 5_000, { min: 100 }),
    },
    commands: {
      defaultTimeoutMs: commands.number("default_timeout_ms", 600_000, { min: 100 }),
      resultGraceMs: commands.number("result_grace_ms", 5_000, { min: 0 }),
      retained: commands.number("retained", 500, { min: 1 }),
    },
    series: {
      sampleIntervalMs,
      windowMs: series.number("window_ms", 900_000, { min: sampleIntervalMs, max: 86_400_000 }),
    },
    shutdown: {
      drainTimeoutMs: shutdown.number("drain_timeout_ms", 20_000, {
        min: 0,
        max: MAX_DRAIN_TIMEOUT_MS,
      }),
    },
  };
}

function parseEdgeGrants(wire: ConfigReader): EdgeGrant[] {
  if (wire.has("edge_credentials")) {
    throw wire.error(
      "edge_credentials",
      "is no longer supported as each credential now belongs to one edge: list the edges " +
        "under wire.edges instead, e.g. edges: [{ id: edge-a, credential: <secret or sha256:…> }]",
    );
  }
  const grants = wire.list("edges").map((e) => ({
    id: e.nonEmpty("id"),
    credential: readStoredSecret(e, "credential"),
  }));
  const ids = new Map<string, number>();
  const credentials = new Map<string, number>();
  grants.forEach((grant, i) => {
    const firstId = ids.get(grant.id);
    if (firstId !== undefined) {
      throw wire.error(
        `edges[${i}].id`,
        `duplicate edge id '${grant.id}' (first at ${wire.path}.edges[${firstId}].id)`,
      );
    }
    ids.set(grant.id, i);
    const fingerprint = secretFingerprint(grant.credential);
    const firstCredential = credentials.get(fingerprint);
    if (firstCredential !== undefined) {
      throw wire.error(
        `edges[${i}].credential`,
        `is the same secret as ${wire.path}.edges[${firstCredential}].credential: ` +
          "each edge needs its own credential",
      );
    }
    credentials.set(fingerprint, i);
  });
  return grants;
}
