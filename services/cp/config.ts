/**
 * The Control Plane's configuration: one YAML file per environment plus `IOP_CP_*` overrides,
 * validated whole. It holds only the Control Plane's own settings and secrets (edge credentials
 * it accepts, admin tokens); nothing of any Edge's configuration.
 * @module
 */
import {
  applyEnvOverrides,
  ConfigReader,
  type EnvOverride,
  readYamlFile,
} from "../../shared/config.ts";

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
    /** Credentials an Edge may present; empty accepts any (development only). */
    edgeCredentials: string[];
  };
  /** Bearer tokens allowed to use write endpoints; empty disables them. */
  admin: { tokens: string[] };
  audit: { path: string };
  registry: { eventsPerEdge: number; statusTimeoutMs: number };
  commands: { defaultTimeoutMs: number; retained: number };
}

/** Environment variables that override Control Plane config keys. */
export const CP_ENV: readonly EnvOverride[] = [
  { env: "IOP_CP_ID", path: "control_plane.id", type: "string" },
  { env: "IOP_CP_HTTP_HOST", path: "http.host", type: "string" },
  { env: "IOP_CP_HTTP_PORT", path: "http.port", type: "number" },
  { env: "IOP_CP_WIRE_HOST", path: "wire.host", type: "string" },
  { env: "IOP_CP_WIRE_PORT", path: "wire.port", type: "number" },
  { env: "IOP_CP_HEARTBEAT_INTERVAL_MS", path: "wire.heartbeat_interval_ms", type: "number" },
  { env: "IOP_CP_EDGE_CREDENTIALS", path: "wire.edge_credentials", type: "list" },
  { env: "IOP_CP_ADMIN_TOKENS", path: "admin.tokens", type: "list" },
  { env: "IOP_CP_AUDIT_PATH", path: "audit.path", type: "string" },
];

/** Loads and validates the config file with environment overrides. */
export async function loadCpConfig(
  file: string,
  env?: (name: string) => string | undefined,
): Promise<CpConfig> {
  const raw = applyEnvOverrides(await readYamlFile(file), CP_ENV, env);
  return parseCpConfig(raw, file);
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
      edgeCredentials: wire.strings("edge_credentials").filter((c) => c !== ""),
    },
    admin: { tokens: admin.strings("tokens").filter((t) => t !== "") },
    audit: { path: audit.nonEmpty("path", `.iop/${id}/audit.sqlite`) },
    registry: {
      eventsPerEdge: registry.number("events_per_edge", 200, { min: 1 }),
      statusTimeoutMs: registry.number("status_timeout_ms", 5_000, { min: 100 }),
    },
    commands: {
      defaultTimeoutMs: commands.number("default_timeout_ms", 600_000, { min: 100 }),
      retained: commands.number("retained", 500, { min: 1 }),
    },
  };
}
