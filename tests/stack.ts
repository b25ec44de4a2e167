/**
 * The one in-process test fixture of an Edge and its Nodes over real TCP.
 *
 * - {@linkcode startEdge}: an EdgeService with its node wire on 127.0.0.1 port 0, and optionally
 *   the HTTP app with every public surface (`http`), the A2A task manager (`a2a`) and a config
 *   file `reload` reads (`configFile`).
 * - {@linkcode startNode}: a NodeCore with a SQLite history in the Edge's temp dir, dialing the
 *   Edge's node wire; resolves once the Edge saw the node apply its config.
 * - {@linkcode startStack}: both at once, for every configured node.
 *
 * Both are AsyncDisposable: disposing a node stops its link (the Edge sees it disconnect),
 * disposing the Edge stops its nodes first, then its listeners, and removes its temp dir.
 * @module
 */
import { Registry } from "prom-client";
import { createLogger, type Logger } from "../shared/log.ts";
import type { Listener } from "../shared/wire/listener.ts";
import { createWireMetrics } from "../shared/wire/wire_metrics.ts";
import { A2aTaskManager } from "../services/edge/a2a/task_manager.ts";
import type { A2aTaskStore } from "../services/edge/a2a/task_store.ts";
import {
  type EdgeConfig,
  loadEdgeConfig,
  type NodeRecord,
  parseEdgeConfig,
} from "../services/edge/config.ts";
import { createEdgeMetrics } from "../services/edge/edge_metrics.ts";
import { createTenantMetrics } from "../services/edge/tenants/tenant_metrics.ts";
import { createPoolMetrics } from "../services/edge/pools/pool_metrics.ts";
import { createEdgeHttp } from "../services/edge/http/app.ts";
import { mountSurfaces } from "../services/edge/http/surfaces.ts";
import { EdgeService } from "../services/edge/service.ts";
import {
  openResponseStoreFile,
  type ResponseStore,
} from "../services/edge/store/response_store.ts";
import { startNodeServer } from "../services/edge/transport/node_server.ts";
import type { AdapterMetrics } from "../services/node/adapters/adapter_metrics.ts";
import { adapterCatalog } from "../services/node/adapters/catalog.ts";
import { type AdapterFactories, buildAdapterRegistry } from "../services/node/adapters/registry.ts";
import { NodeCore } from "../services/node/node.ts";
import type { NodePolicy } from "../services/node/policy.ts";
import type { RunStore } from "../services/node/ports.ts";
import { openRunStore } from "../services/node/store/sqlite_store.ts";
import { type EdgeClient, startEdgeClient } from "../services/node/transport/edge_client.ts";
import { dialTlsOf, listenTlsOf } from "./tls_fixture.ts";

/** A raw Edge config in its YAML shape (`edge`, `nodes`, `models`, `agents` ...). */
export type RawConfig = Record<string, unknown>;

/** Options of {@linkcode startEdge}. */
export interface EdgeOptions {
  /**
   * The raw config, or a function of the Edge's temp dir (for CLI profiles that write files).
   * Its `http` and `wire` listeners are forced to 127.0.0.1 port 0; heartbeats default to 500 ms.
   */
  config: RawConfig | ((dir: string) => RawConfig);
  /** Serve the HTTP app with every public surface on a free port (see {@linkcode TestEdge.url}). */
  http?: boolean;
  /** Serve the A2A surface backed by this task store (implies `http`); the Edge closes it. */
  a2a?: A2aTaskStore;
  /** The file the Edge's `reload` reads; without it reload is unsupported. */
  configFile?: string;
  /** Where the Edge and its nodes log; defaults to {@linkcode quiet}. */
  logger?: Logger;
  /**
   * How the node wire is secured, as shipped by default: `server` (TLS, nodes verify the Edge
   * against the test CA; the default), `mutual` (nodes also show certificates naming their id)
   * or `off` (plain TCP).
   */
  tls?: WireTls;
}

/** How a fixture's node wire is secured; see {@linkcode EdgeOptions.tls}. */
export type WireTls = "off" | "server" | "mutual";

/** A running Edge of the fixture. */
export interface TestEdge extends AsyncDisposable {
  config: EdgeConfig;
  service: EdgeService;
  /** The Edge's metrics registry (edge, wire and HTTP metrics). */
  registry: Registry;
  /** The node wire listener; nodes dial `127.0.0.1:${wire.port}`. */
  wire: Listener;
  /** How the node wire is secured. */
  tls: WireTls;
  /** Base URL of the HTTP server, e.g. `http://127.0.0.1:41234`; throws without `http`. */
  readonly url: string;
  /** The A2A task manager, when started with `a2a`. */
  tasks?: A2aTaskManager;
  /**
   * The response store of an Edge serving HTTP, opened as `main.ts` does at
   * `responses.store_path` (default: `responses.db` in the temp dir); closed with the Edge.
   */
  responses?: ResponseStore;
  /** Temp dir holding the node histories and anything a test writes; removed on close. */
  dir: string;
  /** The nodes started against this Edge, by id. */
  nodes: Map<string, TestNode>;
  logger: Logger;
  /** Stops the nodes, then the Edge, and removes the temp dir; idempotent. */
  close(): Promise<void>;
}

/** Options of {@linkcode startNode}. */
export interface NodeOptions {
  /** Id of a node in the Edge's config (default: the first). */
  id?: string;
  /** The token the node presents (default: its record's; give the plain one for a hash). */
  token?: string;
  /** Adapter factories (default: {@linkcode adapterFactories} without metrics). */
  factories?: AdapterFactories;
  /** The node's policy (default: {@linkcode policyFor} its record, allowing what it is pushed). */
  policy?: NodePolicy;
  /** How long to wait for the Edge to see the node apply its config (default 10 s). */
  readyMs?: number;
}

/** A running Node of the fixture. */
export interface TestNode extends AsyncDisposable {
  id: string;
  core: NodeCore;
  store: RunStore;
  client: EdgeClient;
  /** Adapters the node reported after applying the Edge's config. */
  adapters: string[];
  /** Stops the node's link (the Edge sees it disconnect) and closes its history; idempotent. */
  stop(): Promise<void>;
}

/** A logger that keeps test output readable: errors only. */
export function quiet(name: string): Logger {
  return createLogger(name, { level: "error" });
}

/** The adapter factories of services/node/main.ts (its catalog), without its state dir. */
export function adapterFactories(
  options: { metrics?: AdapterMetrics; logger?: Logger } = {},
): AdapterFactories {
  return adapterCatalog(options);
}

/** Starts an Edge (no nodes yet); see {@linkcode EdgeOptions} for what it serves. */
export async function startEdge(options: EdgeOptions): Promise<TestEdge> {
  const logger = options.logger ?? quiet("test.edge");
  const dir = await Deno.makeTempDir({ prefix: "iop_stack_" });
  const raw = structuredClone(
    typeof options.config === "function" ? options.config(dir) : options.config,
  );
  raw.http = { ...(raw.http as object ?? {}), host: "127.0.0.1", port: 0 };
  raw.responses = { store_path: `${dir}/responses.db`, ...(raw.responses as object ?? {}) };
  raw.wire = {
    heartbeat_interval_ms: 500,
    ...(raw.wire as object ?? {}),
    host: "127.0.0.1",
    port: 0,
  };
  const file = options.configFile;
  const config = parseEdgeConfig(raw, file ?? "test_edge.yaml");
  const registry = new Registry();
  const metrics = createEdgeMetrics(registry);
  const service = new EdgeService({
    config,
    logger,
    version: "test",
    metrics,
    poolMetrics: createPoolMetrics(registry),
    tenantMetrics: createTenantMetrics(registry),
    ...(file ? { loadConfig: () => loadEdgeConfig(file, () => undefined) } : {}),
  });
  const tls = options.tls ?? "server";
  const listenTls = tls === "off" ? undefined : await listenTlsOf("edge", {
    mutual: tls === "mutual",
  });
  const wire = await startNodeServer({
    hostname: "127.0.0.1",
    port: 0,
    ...(listenTls ? { tls: listenTls } : {}),
    service,
    logger,
    wireMetrics: createWireMetrics(registry, "edge", "node"),
    metrics,
  });
  let tasks: A2aTaskManager | undefined;
  if (options.a2a) {
    tasks = new A2aTaskManager({
      service,
      store: options.a2a,
      logger,
      retentionMs: config.a2a.taskRetentionMs,
      maxTasks: config.a2a.maxTasks,
      maxTaskBytes: config.a2a.maxTaskBytes,
    });
    tasks.recover();
  }
  let http: Deno.HttpServer<Deno.NetAddr> | undefined;
  let responses: ResponseStore | undefined;
  if (options.http || tasks) {
    responses = await openResponseStoreFile(
      config.responses.storePath,
      () => service.config.responses,
    );
    const app = createEdgeHttp(service, registry);
    mountSurfaces(app, {
      service,
      registry,
      logger,
      version: "test",
      ...(tasks ? { a2aTasks: tasks } : {}),
      responses,
    });
    http = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, app.fetch);
  }

  const nodes = new Map<string, TestNode>();
  let closing: Promise<void> | undefined;
  const close = () =>
    closing ??= (async () => {
      for (const node of [...nodes.values()].reverse()) await node.stop();
      await wire.close();
      await http?.shutdown();
      tasks?.close();
      responses?.close();
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    })();
  return {
    config,
    service,
    registry,
    wire,
    tls,
    get url(): string {
      if (!http) throw new Error("this edge serves no HTTP: start it with { http: true }");
      return `http://127.0.0.1:${http.addr.port}`;
    },
    ...(tasks ? { tasks } : {}),
    ...(responses ? { responses } : {}),
    dir,
    nodes,
    logger,
    close,
    [Symbol.asyncDispose]: close,
  };
}

/** Starts a configured node of `edge` and resolves once the Edge saw it apply its config. */
export async function startNode(edge: TestEdge, options: NodeOptions = {}): Promise<TestNode> {
  const record = options.id === undefined
    ? edge.config.nodes[0]
    : edge.config.nodes.find((n) => n.id === options.id);
  if (!record) throw new Error(`no node '${options.id ?? "(first)"}' in the edge config`);
  const id = record.id;
  const factories = options.factories ?? adapterFactories();
  const store = openRunStore(`${edge.dir}/${id}.sqlite`);
  const core = new NodeCore({
    nodeId: id,
    store,
    logger: edge.logger,
    buildAdapters: (configs) => buildAdapterRegistry(configs, factories),
    policy: options.policy ?? policyFor(record),
  });
  const applied = Promise.withResolvers<string[]>();
  const unsubscribe = edge.service.subscribe((event) => {
    if (event.type === "node_config_applied" && event.nodeId === id) {
      applied.resolve(event.adapters);
    }
  });
  const client = startEdgeClient({
    edgeAddress: `127.0.0.1:${edge.wire.port}`,
    tls: edge.tls === "off"
      ? undefined
      : await dialTlsOf("node", edge.tls === "mutual" ? id : undefined),
    nodeId: id,
    token: options.token ?? record.token,
    version: "test",
    core,
    logger: edge.logger,
    backoffInitialMs: 20,
    backoffMaxMs: 200,
  });
  let stopping: Promise<void> | undefined;
  const stop = () =>
    stopping ??= (async () => {
      await client.stop();
      await core.close();
      store.close();
    })();
  const node: TestNode = {
    id,
    core,
    store,
    client,
    adapters: [],
    stop,
    [Symbol.asyncDispose]: stop,
  };
  edge.nodes.set(id, node);
  const ms = options.readyMs ?? 10_000;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`node '${id}' did not apply its config within ${ms} ms`)),
      ms,
    );
  });
  try {
    node.adapters = await Promise.race([applied.promise, late]);
  } finally {
    clearTimeout(timer);
    unsubscribe();
  }
  return node;
}

/** Starts an Edge and, concurrently, its configured nodes (all, or those in `nodes`). */
export async function startStack(
  options: EdgeOptions & { nodes?: string[] } & Omit<NodeOptions, "id">,
): Promise<TestEdge> {
  const edge = await startEdge(options);
  try {
    const ids = options.nodes ?? edge.config.nodes.map((n) => n.id);
    const { factories, readyMs, policy } = options;
    await Promise.all(ids.map((id) =>
      startNode(edge, {
        id,
        ...(factories ? { factories } : {}),
        ...(readyMs ? { readyMs } : {}),
        ...(policy ? { policy } : {}),
      })
    ));
    return edge;
  } catch (err) {
    await edge.close();
    throw err;
  }
}

/** A node record with a mock adapter and, optionally, providers on it. */
export function mockNode(
  id: string,
  options: {
    providers?: { id: string; group: string; max: number; target?: string }[];
    mock?: Record<string, unknown>;
    extraAdapters?: Record<string, unknown>[];
  } = {},
): RawConfig {
  return {
    id,
    token: `${id}-token`,
    adapters: [
      { name: "mock", kind: "mock", tokens: 4, token_delay_ms: 1, ...options.mock },
      ...(options.extraAdapters ?? []),
    ],
    providers: (options.providers ?? []).map((p) => ({
      id: p.id,
      adapter: "mock",
      target: p.target ?? "demo",
      model_group: p.group,
      max_concurrency: p.max,
    })),
  };
}

/**
 * A node policy allowing exactly what the Edge's `record` pushes to that node, as its owner
 * would write it: the kinds, CLI commands and directories ("." for a profile without cwd),
 * `api_key_env` names and backend hosts its adapters use.
 */
export function policyFor(record: NodeRecord): NodePolicy {
  const kinds = new Set<NodePolicy["adapterKinds"][number]>();
  const commands = new Set<string>();
  const cwd = new Set<string>();
  const apiKeyEnv = new Set<string>();
  const backendHosts = new Set<string>();
  for (const a of record.adapters) {
    kinds.add(a.kind);
    if (a.kind === "cli") {
      for (const p of a.profiles) {
        commands.add(p.command);
        cwd.add(p.cwd === "" ? "." : p.cwd);
      }
    } else if (a.kind !== "mock") {
      if (a.apiKeyEnv !== "") apiKeyEnv.add(a.apiKeyEnv);
      const url = URL.parse(a.baseUrl);
      if (url) backendHosts.add(`${url.hostname}${url.port === "" ? "" : `:${url.port}`}`);
    }
  }
  return {
    adapterKinds: [...kinds],
    cli: { commands: [...commands], cwd: [...cwd] },
    apiKeyEnv: [...apiKeyEnv],
    backendHosts: [...backendHosts],
    isDefault: false,
  };
}
