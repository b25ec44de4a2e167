/**
 * Test fixture: a real Edge (service, node wire server on a free port, HTTP app with every
 * surface on a free port) and real Nodes (NodeCore with a SQLite history, dialing the Edge over
 * TCP), all in this process. Disposing it stops everything.
 * @module
 */
import { Registry } from "prom-client";
import { openRunStore } from "../services/node/store/sqlite_store.ts";
import { createLogger } from "../shared/log.ts";
import { createWireMetrics } from "../shared/wire/wire_metrics.ts";
import { type EdgeConfig, parseEdgeConfig } from "../services/edge/config.ts";
import { createEdgeMetrics } from "../services/edge/edge_metrics.ts";
import { createEdgeHttp } from "../services/edge/http/app.ts";
import { mountSurfaces } from "../services/edge/http/surfaces.ts";
import { EdgeService } from "../services/edge/service.ts";
import { startNodeServer } from "../services/edge/transport/node_server.ts";
import { cliAdapterFactory } from "../services/node/adapters/cli.ts";
import { mockAdapterFactory } from "../services/node/adapters/mock.ts";
import { createOpenAICompatAdapter } from "../services/node/adapters/openai_compat.ts";
import { buildAdapterRegistry } from "../services/node/adapters/registry.ts";
import { NodeCore } from "../services/node/node.ts";
import { type EdgeClient, startEdgeClient } from "../services/node/transport/edge_client.ts";

/** One running node of the fixture. */
export interface StackNode {
  id: string;
  core: NodeCore;
  client: EdgeClient;
  /** Stops the node's link (the Edge sees it disconnect). */
  stop(): Promise<void>;
}

/** A running Edge with its nodes. */
export interface EdgeStack extends AsyncDisposable {
  service: EdgeService;
  registry: Registry;
  /** Base URL of the Edge HTTP server, e.g. `http://127.0.0.1:41234`. */
  url: string;
  nodes: Map<string, StackNode>;
  config: EdgeConfig;
  close(): Promise<void>;
}

/** Options of {@linkcode startEdgeStack}. */
export interface StackOptions {
  /** Raw edge config (YAML shape): `nodes`, `models`, `http` ... Ports are forced to 0. */
  config: Record<string, unknown>;
  /** Ids of configured nodes to start (default: all). */
  start?: string[];
}

const quiet = { level: "error" as const };

/** Starts the Edge and its nodes and waits until every started node applied its config. */
export async function startEdgeStack(options: StackOptions): Promise<EdgeStack> {
  const raw = structuredClone(options.config);
  raw.http = { ...(raw.http as object ?? {}), host: "127.0.0.1", port: 0 };
  raw.wire = {
    heartbeat_interval_ms: 500,
    ...(raw.wire as object ?? {}),
    host: "127.0.0.1",
    port: 0,
  };
  const config = parseEdgeConfig(raw, "edge_stack.yaml");
  const registry = new Registry();
  const metrics = createEdgeMetrics(registry);
  const service = new EdgeService({
    config,
    logger: createLogger("test.edge", quiet),
    version: "test",
    metrics,
  });
  const wire = startNodeServer({
    hostname: "127.0.0.1",
    port: 0,
    service,
    logger: createLogger("test.edge.transport", quiet),
    wireMetrics: createWireMetrics(registry, "edge", "node"),
    metrics,
  });
  const app = createEdgeHttp(service, registry);
  mountSurfaces(app, { service, registry, logger: createLogger("test.edge.http", quiet) });
  const http = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, app.fetch);

  const dir = await Deno.makeTempDir({ prefix: "iop_edge_stack_" });
  const nodes = new Map<string, StackNode>();
  const ids = options.start ?? config.nodes.map((n) => n.id);
  const applied = new Set<string>();
  const allApplied = Promise.withResolvers<void>();
  const unsubscribe = service.subscribe((event) => {
    if (event.type !== "node_config_applied") return;
    applied.add(event.nodeId);
    if (ids.every((id) => applied.has(id))) allApplied.resolve();
  });
  if (ids.length === 0) allApplied.resolve();
  for (const id of ids) {
    const record = config.nodes.find((n) => n.id === id)!;
    const store = openRunStore(`${dir}/${id}.sqlite`);
    const core = new NodeCore({
      nodeId: id,
      store,
      logger: createLogger("test.node", quiet),
      buildAdapters: (configs) =>
        buildAdapterRegistry(configs, {
          mock: mockAdapterFactory,
          cli: cliAdapterFactory,
          openai_compat: (c) => {
            if (c.kind !== "openai_compat") throw new TypeError("not openai_compat");
            return createOpenAICompatAdapter(c.name, c.settings);
          },
        }),
    });
    const client = startEdgeClient({
      edgeAddress: `127.0.0.1:${wire.port}`,
      nodeId: id,
      token: record.token,
      version: "test",
      core,
      logger: createLogger("test.node.transport", quiet),
      backoffInitialMs: 50,
      backoffMaxMs: 200,
    });
    let stopped = false;
    const stop = async () => {
      if (stopped) return;
      stopped = true;
      await client.stop();
      await core.close();
      store.close();
    };
    nodes.set(id, { id, core, client, stop });
  }
  await allApplied.promise;
  unsubscribe();

  let closing: Promise<void> | undefined;
  const close = () =>
    closing ??= (async () => {
      for (const node of nodes.values()) await node.stop();
      await wire.close();
      await http.shutdown();
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    })();
  return {
    service,
    registry,
    url: `http://127.0.0.1:${http.addr.port}`,
    nodes,
    config,
    close,
    [Symbol.asyncDispose]: close,
  };
}

/** A node record with a mock adapter and, optionally, providers. */
export function mockNode(
  id: string,
  options: {
    providers?: { id: string; group: string; max: number; target?: string }[];
    mock?: Record<string, unknown>;
    extraAdapters?: Record<string, unknown>[];
  } = {},
): Record<string, unknown> {
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
