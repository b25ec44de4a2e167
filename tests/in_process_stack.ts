/**
 * An Edge and a Node wired in one process over a real TCP socket (node wire on port 0) with a
 * real SQLite history file: what unit tests of the console and the round-trip benchmark drive.
 * @module
 */
import { createLogger, type Logger } from "../shared/log.ts";
import { type EdgeConfig, loadEdgeConfig, parseEdgeConfig } from "../services/edge/config.ts";
import type { EdgeEvent } from "../services/edge/ports.ts";
import { EdgeService } from "../services/edge/service.ts";
import { startNodeServer } from "../services/edge/transport/node_server.ts";
import { cliAdapterFactory } from "../services/node/adapters/cli.ts";
import { mockAdapterFactory } from "../services/node/adapters/mock.ts";
import { buildAdapterRegistry } from "../services/node/adapters/registry.ts";
import { NodeCore } from "../services/node/node.ts";
import type { RunStore } from "../services/node/ports.ts";
import { openRunStore } from "../services/node/store/sqlite_store.ts";
import { type EdgeClient, startEdgeClient } from "../services/node/transport/edge_client.ts";

/** A running in-process Edge + Node pair. */
export interface InProcessStack extends AsyncDisposable {
  service: EdgeService;
  core: NodeCore;
  store: RunStore;
  client: EdgeClient;
  /** Port of the Edge's node wire. */
  wirePort: number;
  /** Temp directory holding the history file and anything a test writes. */
  dir: string;
  /** Stops the node, the edge and removes the temp directory. */
  close(): Promise<void>;
}

/** Options of {@linkcode startInProcessStack}. */
export interface InProcessStackOptions {
  /** Raw edge config (as parsed YAML); its first node is the one that connects. */
  edge: Record<string, unknown>;
  /** Path the Edge's `reload` reads; reload is unsupported when absent. */
  configFile?: string;
  /** Defaults to a logger that writes only errors. */
  logger?: Logger;
}

/** Starts an Edge service with its node wire on port 0 and a Node that registers with it. */
export async function startInProcessStack(
  options: InProcessStackOptions,
): Promise<InProcessStack> {
  const logger = options.logger ?? createLogger("test", { level: "error", writer: () => {} });
  const dir = await Deno.makeTempDir({ prefix: "iop_stack_" });
  const config: EdgeConfig = parseEdgeConfig(options.edge, options.configFile ?? "edge.yaml");
  const service = new EdgeService({
    config,
    logger,
    version: "test",
    ...(options.configFile
      ? { loadConfig: () => loadEdgeConfig(options.configFile!, () => undefined) }
      : {}),
  });
  const wire = startNodeServer({ hostname: "127.0.0.1", port: 0, service, logger });
  const record = config.nodes[0]!;
  const store = openRunStore(`${dir}/history.db`);
  const core = new NodeCore({
    nodeId: record.id,
    store,
    logger,
    buildAdapters: (configs) =>
      buildAdapterRegistry(configs, { mock: mockAdapterFactory, cli: cliAdapterFactory }),
  });
  const applied = waitForEvent(service, (e) => e.type === "node_config_applied");
  const client = startEdgeClient({
    edgeAddress: `127.0.0.1:${wire.port}`,
    nodeId: record.id,
    token: record.token,
    version: "test",
    core,
    logger,
    backoffInitialMs: 20,
    backoffMaxMs: 200,
  });
  await applied;
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await client.stop();
    await core.close();
    await wire.close();
    store.close();
    await Deno.remove(dir, { recursive: true });
  };
  return {
    service,
    core,
    store,
    client,
    wirePort: wire.port,
    dir,
    close,
    [Symbol.asyncDispose]: close,
  };
}

/** Resolves with the first event on the service's bus that matches. */
export function waitForEvent(
  service: EdgeService,
  match: (event: EdgeEvent) => boolean,
): Promise<EdgeEvent> {
  return new Promise((resolve) => {
    const stop = service.subscribe((event) => {
      if (!match(event)) return;
      stop();
      resolve(event);
    });
  });
}
