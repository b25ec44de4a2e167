/**
 * Test harness for Control Plane suites: a real Edge (EdgeService + node wire server on port 0)
 * with one real Node (NodeCore with mock and CLI adapters, dialing over TCP) and the Edge's
 * Control Plane link, all in this process; and a Control Plane config on free ports.
 * @module
 */
import { parseEdgeConfig } from "../services/edge/config.ts";
import { DomainAgents } from "../services/edge/agents/domain_agents.ts";
import { type CpLink, startCpLink } from "../services/edge/cp_link/cp_link.ts";
import { EdgeService } from "../services/edge/service.ts";
import { startNodeServer } from "../services/edge/transport/node_server.ts";
import { cliAdapterFactory } from "../services/node/adapters/cli.ts";
import { mockAdapterFactory } from "../services/node/adapters/mock.ts";
import { buildAdapterRegistry } from "../services/node/adapters/registry.ts";
import { NodeCore } from "../services/node/node.ts";
import { openRunStore } from "../services/node/store/sqlite_store.ts";
import { type EdgeClient, startEdgeClient } from "../services/node/transport/edge_client.ts";
import { type CpConfig, parseCpConfig } from "../services/cp/config.ts";
import { createLogger, type Logger } from "../shared/log.ts";
import type { Listener } from "../shared/wire/listener.ts";

/** A logger that keeps test output readable: errors only. */
export const quiet = (name: string): Logger => createLogger(name, { level: "error" });

/** One Edge with one Node and its Control Plane link. */
export interface EdgeStack extends AsyncDisposable {
  edgeId: string;
  nodeId: string;
  nodeToken: string;
  service: EdgeService;
  agents: DomainAgents;
  nodeWire: Listener;
  link: CpLink;
  nodeClient: EdgeClient;
  stop(): Promise<void>;
}

/** Options of {@linkcode startEdgeStack}. */
export interface EdgeStackOptions {
  edgeId: string;
  cpAddress: string;
  credential?: string;
  labels?: Record<string, string>;
}

/** Starts an Edge with one connected Node; resolves once the Node registered. */
export async function startEdgeStack(options: EdgeStackOptions): Promise<EdgeStack> {
  const nodeId = `${options.edgeId}-node`;
  const nodeToken = `secret-token-of-${nodeId}`;
  const profile = (name: string, script: string) => ({
    name,
    command: "sh",
    args: ["-c", script, name, "{prompt}"],
    timeout_ms: 30_000,
  });
  const config = parseEdgeConfig({
    edge: { id: options.edgeId, labels: options.labels ?? {} },
    wire: { host: "127.0.0.1", port: 0, heartbeat_interval_ms: 500 },
    control_plane: {
      address: options.cpAddress,
      credential: options.credential ?? "test-edge-credential",
      reconnect_max_ms: 300,
    },
    nodes: [{
      id: nodeId,
      token: nodeToken,
      adapters: [
        { name: "mock", kind: "mock", tokens: 3, token_delay_ms: 1 },
        {
          name: "cli",
          kind: "cli",
          profiles: [
            profile("build", 'echo "building ${1:-latest}"; echo done'),
            profile("deploy", 'echo "deploying ${1:-latest}"; echo done'),
            profile("broken", 'echo "starting"; exit 3'),
            profile("slow", "echo started; sleep 30"),
          ],
        },
      ],
      providers: [{
        id: `${nodeId}-demo`,
        adapter: "mock",
        target: "demo",
        model_group: "demo",
        max_concurrency: 2,
      }],
    }],
    agents: [{
      id: "deployer",
      kind: "domain",
      description: "builds and deploys",
      commands: [
        { name: "build", adapter: "cli", target: "build" },
        { name: "deploy", adapter: "cli", target: "deploy" },
        { name: "broken", adapter: "cli", target: "broken" },
        { name: "slow", adapter: "cli", target: "slow" },
      ],
    }],
  }, `${options.edgeId}.yaml`);
  const service = new EdgeService({ config, logger: quiet("edge"), version: "test" });
  const nodeWire = startNodeServer({
    hostname: "127.0.0.1",
    port: 0,
    service,
    logger: quiet("edge.transport"),
  });
  const registered = new Promise<void>((resolve) => {
    const off = service.subscribe((e) => {
      if (e.type === "node_config_applied") {
        off();
        resolve();
      }
    });
  });
  const store = openRunStore(":memory:");
  const core = new NodeCore({
    nodeId,
    store,
    logger: quiet("node"),
    buildAdapters: (configs) =>
      buildAdapterRegistry(configs, { mock: mockAdapterFactory, cli: cliAdapterFactory }),
  });
  const nodeClient = startEdgeClient({
    edgeAddress: `127.0.0.1:${nodeWire.port}`,
    nodeId,
    token: nodeToken,
    version: "test",
    core,
    logger: quiet("node.client"),
    backoffInitialMs: 50,
    backoffMaxMs: 200,
  });
  await registered;
  const agents = new DomainAgents(service);
  const link = startCpLink({
    service,
    agents,
    version: "test",
    logger: quiet("edge.cp_link"),
    backoffInitialMs: 50,
  });
  let stopped: Promise<void> | undefined;
  const stop = () =>
    stopped ??= (async () => {
      await link.stop();
      await nodeClient.stop();
      await core.close();
      await nodeWire.close();
      store.close();
    })();
  return {
    edgeId: options.edgeId,
    nodeId,
    nodeToken,
    service,
    agents,
    nodeWire,
    link,
    nodeClient,
    stop,
    [Symbol.asyncDispose]: stop,
  };
}

/** A Control Plane config for tests: loopback, free ports unless given, audit at `auditPath`. */
export function testCpConfig(
  auditPath: string,
  overrides: { httpPort?: number; wirePort?: number } = {},
): CpConfig {
  return parseCpConfig({
    control_plane: { id: "cp-test" },
    http: { host: "127.0.0.1", port: overrides.httpPort ?? 0 },
    wire: {
      host: "127.0.0.1",
      port: overrides.wirePort ?? 0,
      heartbeat_interval_ms: 500,
      edge_credentials: ["test-edge-credential"],
    },
    admin: { tokens: ["test-admin-token"] },
    audit: { path: auditPath },
    commands: { default_timeout_ms: 20_000 },
  }, "cp-test.yaml");
}

/** A TCP port that was free a moment ago (for servers that must come back on the same port). */
export function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

/** Polls `check` until it returns a value other than undefined, or fails after `timeoutMs`. */
export async function until<T>(
  what: string,
  check: () => T | undefined | Promise<T | undefined>,
  timeoutMs = 10_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const value = await check();
      if (value !== undefined) return value;
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`Timed out waiting for ${what}${last ? `: ${(last as Error).message}` : ""}`);
}
