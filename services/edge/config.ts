/**
 * The Edge's configuration: one YAML file plus `IOP_EDGE_*` overrides, validated whole into an
 * immutable snapshot. A reload builds a new snapshot and swaps it in only when it is valid.
 * @module
 */
import {
  applyEnvOverrides,
  ConfigError,
  ConfigReader,
  type EnvOverride,
  readYamlFile,
} from "../../shared/config.ts";
import { isHashedSecret, secretFingerprint } from "../../shared/secrets.ts";
import { DEFAULT_MAX_FRAME_BYTES } from "../../shared/wire/frame.ts";
import {
  type DialTlsFiles,
  type LinkSecurity,
  type ListenTlsFiles,
  readDialTls,
  readListenTls,
} from "../../shared/wire/tls.ts";
import type { AdapterKindName, AdapterSettingsByKind } from "../../shared/adapter_kinds/catalog.ts";
import type { CliProfile } from "../../shared/adapter_kinds/cli.ts";
import { checkUnique, redactIfToken } from "./config_unique.ts";
import { readEnrollment } from "./nodes/enrollment_config.ts";
import { parseNode } from "./nodes/node_config.ts";
import { offers } from "./routing.ts";
import { readResponses, type ResponsesConfig } from "./store/responses_config.ts";
import { readTenants, type TenantRecord } from "./tenants/tenant.ts";

/**
 * An adapter instance a node record declares: its name, and its kind's settings flattened in
 * (`shared/adapter_kinds/` defines each kind's keys, defaults and rules).
 */
export type NodeAdapterRecord =
  & { name: string; enabled: boolean }
  & {
    [K in AdapterKindName]: { kind: K } & AdapterSettingsByKind[K];
  }[AdapterKindName];

/** A CLI profile a node record declares. */
export type CliProfileRecord = CliProfile;

/** A provider: one model served by one adapter on one node, a member of a model group's pool. */
export interface ProviderRecord {
  id: string;
  adapter: string;
  target: string;
  modelGroup: string;
  maxConcurrency: number;
}

/** A pre-registered node, or one that joined by an enrollment rule (`enrolledBy`). */
export interface NodeRecord {
  id: string;
  alias: string;
  /** The node's token; for an enrolled node, its rule's token (shared by the rule's nodes). */
  token: string;
  adapters: NodeAdapterRecord[];
  providers: ProviderRecord[];
  /** The enrollment rule the node joined by; absent for a node listed under `nodes`. */
  enrolledBy?: string;
}

/**
 * An `enrollment` rule: nodes not listed under `nodes` whose id matches `nodeIds` and who
 * present `token` join with a record built from `template` (`nodes/enrollment.ts`).
 */
export interface EnrollmentRule {
  /** Unique; the label of its metrics, and `iop://enroll/<name>` in its certificate. */
  name: string;
  /** Plain or `sha256:<hex>`; distinct from every other rule's and node's token. */
  token: string;
  /** Ids a node may claim under the rule (`*` wildcards). */
  nodeIds: string[];
  /** Nodes enrolled under the rule at once, connected or kept while disconnected. */
  maxNodes: number;
  /** How long a disconnected enrolled node keeps its record (status, sessions) before it goes. */
  retainDisconnectedMs: number;
  /** The `template` mapping as written (`{node}` not yet replaced); see `enrolledRecord` (`nodes/enrollment_config.ts`). */
  template: Readonly<Record<string, unknown>>;
  /** Key path of the rule in the config file (`enrollment[0]`), for errors. */
  path: string;
  /**
   * The template expanded for a sample id the rule admits: what the nodes it admits will serve,
   * for checks that must count them before they join (servable models, known model groups).
   */
  sample: NodeRecord;
}

/** A public model name and how it maps to `adapter + target`. */
export interface ModelRecord {
  name: string;
  aliases: string[];
  /** `pool`: served by providers whose model_group is this name; `direct`: one adapter+target. */
  route: "pool" | "direct";
  adapter: string;
  target: string;
  /**
   * Pool queue limits. `waitForProviderMs` (`wait_for_provider_ms`, default 10 s, at most
   * `max_wait_ms`): how long a request waits for a node of the pool to connect when none is
   * connected and accepting runs (a node restarting or replaced, a new Edge); 0 fails at once.
   */
  queue: { maxLength: number; maxWaitMs: number; waitForProviderMs: number };
  /**
   * What the model does, as its operator declares it: `chat` (generates; the default),
   * `embeddings` (answers `/v1/embeddings` and `/api/embed`), `vision` (takes images). A request
   * for something a model does not declare is refused 400 before dispatch.
   */
  capabilities: ModelCapability[];
}

/** One thing a model may declare it does (`models[].capabilities`). */
export type ModelCapability = "chat" | "embeddings" | "vision";

/** Every {@linkcode ModelCapability}, in documentation order. */
export const MODEL_CAPABILITIES: readonly ModelCapability[] = ["chat", "embeddings", "vision"];

/** An agent the Edge publishes (A2A) or runs as a domain automation. */
export interface AgentRecord {
  id: string;
  name: string;
  description: string;
  /** `a2a`: published over A2A; `domain`: an automation reported to the Control Plane. */
  kind: "a2a" | "domain";
  adapter: string;
  target: string;
  skills: { id: string; name: string; description: string; tags: string[] }[];
  /** Named commands of a domain agent, each a CLI profile or target. */
  commands: { name: string; adapter: string; target: string }[];
}

/**
 * The public HTTP listener and what it lets in (`services/edge/http/request_guard.ts` applies
 * the `allowedHosts`, `cors` and `allowMockMetadata` keys; README "Hostile clients").
 */
export interface EdgeHttpConfig {
  host: string;
  port: number;
  maxBodyBytes: number;
  /**
   * Extra `Host` names (optionally `name:port`) accepted besides the defaults (bind address,
   * loopback names, the host of `a2a.public_url`; with a wildcard bind also IP literals and
   * dotless names); `*` turns the check off (behind a proxy that checks Host itself).
   */
  allowedHosts: string[];
  /** Browser origins (`scheme://host[:port]`, or `*`) allowed to call; empty = CORS off. */
  cors: { allowedOrigins: string[] };
  /** Whether public clients may set the mock adapter's `mock.*` run metadata knobs. */
  allowMockMetadata: boolean;
  /**
   * Whether a chat image may be an http(s) link (`allow_image_links`, default false: `data:`
   * URLs only). A backend that takes links (vLLM, OpenAI-compatible) fetches them itself, from
   * its own network, so a link lets a client reach whatever that backend can.
   */
  allowImageLinks: boolean;
  /**
   * An OpenAI or A2A SSE stream idle this long gets a `: keep-alive` comment (`sse_keepalive_ms`,
   * default 15 s, as the SSE spec suggests for proxies with idle timeouts); 0 = none.
   */
  sseKeepaliveMs: number;
}

/** The whole validated Edge configuration. */
export interface EdgeConfig {
  file: string;
  edge: { id: string; labels: Record<string, string> };
  http: EdgeHttpConfig;
  wire: {
    host: string;
    port: number;
    maxFrameBytes: number;
    heartbeatIntervalMs: number;
    registerTimeoutMs: number;
    /** Connections not yet registered (handshaking, logging in) allowed at once. */
    maxPendingConnections: number;
    /** `wire.tls` or `wire.insecure_plaintext`; the Edge refuses to start with neither. */
    security: LinkSecurity<ListenTlsFiles>;
  };
  controlPlane: {
    address: string;
    credential: string;
    reconnectMaxMs: number;
    /** `control_plane.tls` or `control_plane.insecure_plaintext`. */
    security: LinkSecurity<DialTlsFiles>;
  };
  /**
   * `storePath`: the SQLite file keeping A2A tasks (default `.iop/<edge id>/a2a.db`);
   * `maxTasks`: tasks kept at most (oldest finished dropped first; a store full of unfinished
   * tasks refuses new ones); `maxTaskBytes`: output a task keeps, the rest is cut with a marker.
   */
  a2a: {
    taskRetentionMs: number;
    publicUrl: string;
    storePath: string;
    maxTasks: number;
    maxTaskBytes: number;
  };
  /** Stored Responses API responses (`services/edge/store/response_store.ts`). */
  responses: ResponsesConfig;
  /** How runs stream from their nodes (node.proto "Flow control" and "Resume"). */
  runs: RunsConfig;
  nodes: NodeRecord[];
  /** Rules admitting nodes not listed under `nodes` (empty: only listed nodes register). */
  enrollment: EnrollmentRule[];
  models: ModelRecord[];
  agents: AgentRecord[];
  /**
   * Who may call the public surfaces and within which limits (`tenants/tenant.ts`); the older
   * `http.api_keys` is the tenant `default`; with no key at all, the one tenant `anonymous`.
   */
  tenants: TenantRecord[];
}

/**
 * The `runs` section. `windowBytes`: event bytes a node may send a run ahead of what its client
 * took (sent to each node as it registers; 0 = no flow control). `stallTimeoutMs`: a run whose
 * client reads nothing this long while its stream is full is cancelled. `resumeGraceMs`: how long
 * a run whose node link dropped waits for the node to register again and resume it (0 = fail it
 * with NODE_LOST at once).
 */
export interface RunsConfig {
  windowBytes: number;
  stallTimeoutMs: number;
  resumeGraceMs: number;
}

/** Default of `runs.window_bytes`: 1 MiB. */
export const DEFAULT_RUN_WINDOW_BYTES = 1024 * 1024;

/** Environment variables that override Edge config keys. */
export const EDGE_ENV: readonly EnvOverride[] = [
  { env: "IOP_EDGE_ID", path: "edge.id", type: "string" },
  { env: "IOP_EDGE_HTTP_HOST", path: "http.host", type: "string" },
  { env: "IOP_EDGE_HTTP_PORT", path: "http.port", type: "number" },
  { env: "IOP_EDGE_API_KEYS", path: "http.api_keys", type: "list" },
  { env: "IOP_EDGE_HTTP_ALLOWED_HOSTS", path: "http.allowed_hosts", type: "list" },
  { env: "IOP_EDGE_CORS_ALLOWED_ORIGINS", path: "http.cors.allowed_origins", type: "list" },
  { env: "IOP_EDGE_HTTP_SSE_KEEPALIVE_MS", path: "http.sse_keepalive_ms", type: "number" },
  { env: "IOP_EDGE_WIRE_HOST", path: "wire.host", type: "string" },
  { env: "IOP_EDGE_WIRE_PORT", path: "wire.port", type: "number" },
  { env: "IOP_EDGE_HEARTBEAT_INTERVAL_MS", path: "wire.heartbeat_interval_ms", type: "number" },
  { env: "IOP_EDGE_WIRE_TLS_CERT", path: "wire.tls.cert", type: "string" },
  { env: "IOP_EDGE_WIRE_TLS_KEY", path: "wire.tls.key", type: "string" },
  { env: "IOP_EDGE_WIRE_TLS_CLIENT_CA", path: "wire.tls.client_ca", type: "string" },
  { env: "IOP_EDGE_WIRE_INSECURE_PLAINTEXT", path: "wire.insecure_plaintext", type: "boolean" },
  { env: "IOP_EDGE_CP_ADDRESS", path: "control_plane.address", type: "string" },
  { env: "IOP_EDGE_CP_CREDENTIAL", path: "control_plane.credential", type: "string" },
  { env: "IOP_EDGE_CP_TLS_CA", path: "control_plane.tls.ca", type: "string" },
  { env: "IOP_EDGE_CP_TLS_SERVER_NAME", path: "control_plane.tls.server_name", type: "string" },
  { env: "IOP_EDGE_CP_TLS_CERT", path: "control_plane.tls.cert", type: "string" },
  { env: "IOP_EDGE_CP_TLS_KEY", path: "control_plane.tls.key", type: "string" },
  {
    env: "IOP_EDGE_CP_INSECURE_PLAINTEXT",
    path: "control_plane.insecure_plaintext",
    type: "boolean",
  },
  { env: "IOP_EDGE_A2A_PUBLIC_URL", path: "a2a.public_url", type: "string" },
  { env: "IOP_EDGE_A2A_STORE_PATH", path: "a2a.store_path", type: "string" },
  { env: "IOP_EDGE_RESPONSES_STORE_PATH", path: "responses.store_path", type: "string" },
  { env: "IOP_EDGE_RUNS_WINDOW_BYTES", path: "runs.window_bytes", type: "number" },
  { env: "IOP_EDGE_RUNS_STALL_TIMEOUT_MS", path: "runs.stall_timeout_ms", type: "number" },
  { env: "IOP_EDGE_RUNS_RESUME_GRACE_MS", path: "runs.resume_grace_ms", type: "number" },
];

/** Loads and validates the Edge config file with environment overrides. */
export async function loadEdgeConfig(
  file: string,
  env?: (name: string) => string | undefined,
): Promise<EdgeConfig> {
  const raw = applyEnvOverrides(await readYamlFile(file), EDGE_ENV, env);
  return parseEdgeConfig(raw, file);
}

/** Validates a raw config object; throws {@linkcode ConfigError} naming the bad key. */
export function parseEdgeConfig(raw: unknown, file: string): EdgeConfig {
  const root = new ConfigReader(file, raw);
  const edge = root.section("edge");
  const http = root.section("http");
  const wire = root.section("wire");
  const cp = root.section("control_plane");
  const a2a = root.section("a2a");
  const nodes = root.list("nodes").map(parseNode);
  checkUnique(file, nodes.map((n, i) => [`nodes[${i}].id`, n.id]), "node id");
  checkUniqueTokens(file, nodes);
  checkUnique(
    file,
    nodes.map((n, i) => [`nodes[${i}].alias`, n.alias] as [string, string]).filter(([, a]) =>
      a !== ""
    ),
    "node alias",
  );
  const ids = new Set(nodes.map((n) => n.id));
  nodes.forEach((n, i) => {
    if (n.alias && n.alias !== n.id && ids.has(n.alias)) {
      throw new ConfigError(file, `nodes[${i}].alias`, `'${n.alias}' is already another node's id`);
    }
  });
  const providerIds = nodes.flatMap((n, i) =>
    n.providers.map((p, j) => [`nodes[${i}].providers[${j}].id`, p.id] as [string, string])
  );
  checkUnique(file, providerIds, "provider id");
  const enrollment = readEnrollment(root, raw, nodes);
  const models = root.list("models").map(parseModel);
  checkUnique(
    file,
    models.flatMap((
      m,
      i,
    ) => [
      [`models[${i}].name`, m.name] as [string, string],
      ...m.aliases.map((a, j) => [`models[${i}].aliases[${j}]`, a] as [string, string]),
    ]),
    "model name or alias",
  );
  // A model served only by nodes that enroll later is servable once they do.
  const servers = [...nodes, ...enrollment.map((rule) => rule.sample)];
  models.forEach((m, i) => checkServable(file, servers, m, `models[${i}]`));
  return {
    file,
    edge: { id: edge.nonEmpty("id", "edge-local"), labels: edge.stringMap("labels") },
    http: {
      host: http.nonEmpty("host", "127.0.0.1"),
      port: http.number("port", 8080, { min: 0, max: 65535 }),
      maxBodyBytes: readMaxBodyBytes(http, wire),
      allowedHosts: readAllowedHosts(http),
      cors: { allowedOrigins: readAllowedOrigins(http.section("cors")) },
      allowMockMetadata: http.boolean("allow_mock_metadata", false),
      allowImageLinks: http.boolean("allow_image_links", false),
      sseKeepaliveMs: http.number("sse_keepalive_ms", 15_000, { min: 0 }),
    },
    wire: {
      host: wire.nonEmpty("host", "127.0.0.1"),
      port: wire.number("port", 7100, { min: 0, max: 65535 }),
      maxFrameBytes: wire.number("max_frame_bytes", DEFAULT_MAX_FRAME_BYTES, { min: 1024 }),
      heartbeatIntervalMs: wire.number("heartbeat_interval_ms", 2000, { min: 50 }),
      registerTimeoutMs: wire.number("register_timeout_ms", 10_000, { min: 100 }),
      maxPendingConnections: wire.number("max_pending_connections", 256, { min: 1 }),
      security: readListenTls(wire),
    },
    controlPlane: {
      address: cp.string("address", ""),
      credential: cp.string("credential", ""),
      reconnectMaxMs: cp.number("reconnect_max_ms", 10_000, { min: 100 }),
      security: readDialTls(cp),
    },
    a2a: {
      taskRetentionMs: a2a.number("task_retention_ms", 3_600_000, { min: 1000 }),
      publicUrl: a2a.string("public_url", ""),
      storePath: a2a.nonEmpty("store_path", `.iop/${edge.nonEmpty("id", "edge-local")}/a2a.db`),
      maxTasks: a2a.number("max_tasks", 10_000, { min: 1 }),
      maxTaskBytes: a2a.number("max_task_bytes", 1024 * 1024, { min: 1024 }),
    },
    responses: readResponses(root.section("responses"), edge.nonEmpty("id", "edge-local")),
    runs: readRuns(root.section("runs")),
    nodes,
    enrollment,
    models,
    agents: root.list("agents").map(parseAgent),
    tenants: readTenants(root, http),
  };
}

/** The `runs` section ({@linkcode RunsConfig}). */
function readRuns(runs: ConfigReader): RunsConfig {
  return {
    // The wire carries it as a uint32.
    windowBytes: runs.number("window_bytes", DEFAULT_RUN_WINDOW_BYTES, {
      min: 0,
      max: 2 ** 32 - 1,
    }),
    stallTimeoutMs: runs.number("stall_timeout_ms", 30_000, { min: 1000 }),
    resumeGraceMs: runs.number("resume_grace_ms", 30_000, { min: 0 }),
  };
}

/**
 * `http.max_body_bytes`, below `wire.max_frame_bytes`: a request becomes a run that goes to its
 * node in one frame, so a body the listener takes but no frame can carry would only be refused
 * later, at dispatch; the Edge refuses the contradiction at load instead.
 */
function readMaxBodyBytes(http: ConfigReader, wire: ConfigReader): number {
  const body = http.number("max_body_bytes", 1024 * 1024, { min: 1024 });
  const frame = wire.number("max_frame_bytes", DEFAULT_MAX_FRAME_BYTES, { min: 1024 });
  if (body >= frame) {
    throw http.error(
      "max_body_bytes",
      `must be below wire.max_frame_bytes (${frame}), as a request's run goes to its node in ` +
        `one frame of at most that size: current value is ${body}`,
    );
  }
  return body;
}

/** `http.allowed_hosts`: `*`, or host names / IP literals with an optional port. */
function readAllowedHosts(http: ConfigReader): string[] {
  return http.strings("allowed_hosts").map((entry, i) => {
    const host = entry.trim().toLowerCase();
    if (host === "*") return host;
    const url = URL.parse(`http://${host}/`);
    if (!url || host === "" || /[/?#@\s]/.test(host)) {
      throw http.error(
        `allowed_hosts[${i}]`,
        `must be a host name or IP literal with an optional port: current value is '${entry}'`,
      );
    }
    return url.port === "" ? url.hostname : `${url.hostname}:${url.port}`;
  });
}

/** `http.cors.allowed_origins`: `*`, or origins as a browser sends them (`https://a.example`). */
function readAllowedOrigins(cors: ConfigReader): string[] {
  return cors.strings("allowed_origins").map((entry, i) => {
    const origin = entry.trim().replace(/\/+$/, "");
    if (origin === "*") return origin;
    const url = URL.parse(origin);
    if (!url || url.origin === "null" || url.origin !== origin.toLowerCase()) {
      throw cors.error(
        `allowed_origins[${i}]`,
        `must be an origin such as https://app.example.com (scheme, host, optional port; no path): current value is '${entry}'`,
      );
    }
    return url.origin;
  });
}

/** Tokens must differ as secrets: a plain token clashes with another node's hash of it too. */
function checkUniqueTokens(file: string, nodes: readonly NodeRecord[]): void {
  const seen = new Map<string, string>();
  nodes.forEach((n, i) => {
    const path = `nodes[${i}].token`;
    const fingerprint = secretFingerprint(n.token);
    const first = seen.get(fingerprint);
    if (first !== undefined) {
      const shown = isHashedSecret(n.token) ? "sha256:…" : redactIfToken("node token", n.token);
      throw new ConfigError(file, path, `duplicate node token '${shown}' (first at ${first})`);
    }
    seen.set(fingerprint, path);
  });
}

/**
 * Refuses a model no configured node could ever serve: a pool model needs a provider of its
 * model group, a direct model an enabled adapter that runs its target on some node (a listed
 * node, or an enrollment rule's template, for the nodes it admits later). (A reload
 * validates the whole file the same way, so such a model never reaches `/v1/models`.)
 */
function checkServable(
  file: string,
  nodes: readonly NodeRecord[],
  model: ModelRecord,
  path: string,
): void {
  if (model.route === "pool") {
    if (nodes.some((n) => n.providers.some((p) => p.modelGroup === model.name))) return;
    throw new ConfigError(
      file,
      `${path}.name`,
      `pool model '${model.name}' has no provider: no node declares a provider with model_group '${model.name}'`,
    );
  }
  if (nodes.some((n) => offers(n, model.adapter, model.target))) return;
  throw new ConfigError(
    file,
    `${path}.adapter`,
    `direct model '${model.name}' cannot be served: no node has an enabled adapter '${model.adapter}' that runs target '${model.target}'`,
  );
}

function parseModel(r: ConfigReader): ModelRecord {
  const route = r.oneOf("route", ["pool", "direct"] as const, r.has("adapter") ? "direct" : "pool");
  const queue = r.section("queue");
  return {
    name: r.nonEmpty("name"),
    aliases: r.strings("aliases"),
    route,
    adapter: route === "direct" ? r.nonEmpty("adapter") : r.string("adapter", ""),
    target: route === "direct" ? r.nonEmpty("target") : r.string("target", ""),
    queue: parseQueue(queue),
    capabilities: parseCapabilities(r),
  };
}

/** A pool's `queue` section; `wait_for_provider_ms` defaults to 10 s, at most `max_wait_ms`. */
function parseQueue(queue: ConfigReader): ModelRecord["queue"] {
  const maxWaitMs = queue.number("max_wait_ms", 30_000, { min: 0 });
  return {
    maxLength: queue.number("max_length", 64, { min: 0 }),
    maxWaitMs,
    waitForProviderMs: queue.number("wait_for_provider_ms", Math.min(10_000, maxWaitMs), {
      min: 0,
      max: maxWaitMs,
    }),
  };
}

function parseCapabilities(r: ConfigReader): ModelCapability[] {
  if (!r.has("capabilities")) return ["chat"];
  const listed = r.strings("capabilities");
  const unknown = listed.find((c) => !(MODEL_CAPABILITIES as readonly string[]).includes(c));
  if (unknown !== undefined) {
    throw r.error(
      "capabilities",
      `must list only ${MODEL_CAPABILITIES.join(", ")}: current value has '${unknown}'`,
    );
  }
  if (listed.length === 0) throw r.error("capabilities", "must list at least one capability");
  if (listed.includes("vision") && !listed.includes("chat")) {
    throw r.error("capabilities", "lists vision, which needs chat: add chat");
  }
  return [...new Set(listed)] as ModelCapability[];
}

function parseAgent(r: ConfigReader): AgentRecord {
  return {
    id: r.nonEmpty("id"),
    name: r.nonEmpty("name", r.nonEmpty("id")),
    description: r.string("description", ""),
    kind: r.oneOf("kind", ["a2a", "domain"] as const, "a2a"),
    adapter: r.string("adapter", ""),
    target: r.string("target", ""),
    skills: r.list("skills").map((s) => ({
      id: s.nonEmpty("id"),
      name: s.nonEmpty("name", s.nonEmpty("id")),
      description: s.string("description", ""),
      tags: s.strings("tags"),
    })),
    commands: r.list("commands").map((c) => ({
      name: c.nonEmpty("name"),
      adapter: c.nonEmpty("adapter"),
      target: c.nonEmpty("target"),
    })),
  };
}
