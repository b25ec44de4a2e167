/**
 * Test harness for Control Plane suites: an Edge with one Node (the shared fixture of
 * tests/stack.ts) plus the Edge's Control Plane link and domain agents, all in this process; and
 * a Control Plane config on free ports that admits the usual test edge ids, each with its own
 * credential ({@linkcode testEdgeCredential}), and an operate and a read access token.
 * @module
 */
import { DomainAgents } from "../services/edge/agents/domain_agents.ts";
import { type CpLink, startCpLink } from "../services/edge/cp_link/cp_link.ts";
import type { EdgeService } from "../services/edge/service.ts";
import type { EdgeClient } from "../services/node/transport/edge_client.ts";
import { type CpConfig, parseCpConfig } from "../services/cp/config.ts";
import type { Logger } from "../shared/log.ts";
import type { Listener } from "../shared/wire/listener.ts";
import { quiet, type RawConfig, startStack, type WireTls } from "./stack.ts";
import { dialTlsConfig, listenTlsConfig } from "./tls_fixture.ts";

/** Edge ids {@linkcode testCpConfig} admits unless told otherwise. */
export const TEST_EDGE_IDS: readonly string[] = [
  "edge-a",
  "edge-b",
  "edge-ws",
  "edge-ag",
  "edge-guard",
];

/** The credential a test edge presents by default, and {@linkcode testCpConfig} expects. */
export function testEdgeCredential(edgeId: string): string {
  return `test-credential-of-${edgeId}`;
}

/** The operate token {@linkcode testCpConfig} admits, named {@linkcode TEST_OPERATOR}. */
export const TEST_OPERATE_TOKEN = "test-admin-token";
/** The name of {@linkcode TEST_OPERATE_TOKEN}: the audit's actor of its commands. */
export const TEST_OPERATOR = "test-operator";
/** The read token {@linkcode testCpConfig} admits, named {@linkcode TEST_VIEWER}. */
export const TEST_READ_TOKEN = "test-read-token";
/** The name of {@linkcode TEST_READ_TOKEN}. */
export const TEST_VIEWER = "test-viewer";

/** Headers of a JSON request with a bearer token (default: the operate token). */
export function authHeaders(token: string = TEST_OPERATE_TOKEN): Record<string, string> {
  return { authorization: `Bearer ${token}`, "content-type": "application/json" };
}

/** One Edge with one Node and its Control Plane link. */
export interface CpEdge extends AsyncDisposable {
  edgeId: string;
  /** The credential this edge presents in its hello. */
  credential: string;
  nodeId: string;
  nodeToken: string;
  service: EdgeService;
  agents: DomainAgents;
  nodeWire: Listener;
  link: CpLink;
  nodeClient: EdgeClient;
  stop(): Promise<void>;
}

/** Options of {@linkcode startCpEdge}. */
export interface CpEdgeOptions {
  edgeId: string;
  cpAddress: string;
  /** Defaults to {@linkcode testEdgeCredential} of the edge id. */
  credential?: string;
  labels?: Record<string, string>;
  /** Defaults to `<edge id>-node`. */
  nodeId?: string;
  /** Where the Edge's Control Plane link logs; defaults to {@linkcode quiet}. */
  linkLogger?: Logger;
  /**
   * How the link to the Control Plane is secured; must match the Control Plane's
   * `testCpConfig` (default `server`: TLS, the edge verifies the CP; `mutual`: the edge also
   * shows a certificate naming its id).
   */
  cpTls?: WireTls;
}

/** The Edge config: a mock provider, CLI profiles and a `deployer` domain agent on them. */
function cpEdgeConfig(
  options: CpEdgeOptions,
  nodeId: string,
  nodeToken: string,
  cpSecurity: RawConfig,
): RawConfig {
  const profile = (name: string, script: string) => ({
    name,
    command: "sh",
    args: ["-c", script, name, "{prompt}"],
    timeout_ms: 30_000,
  });
  return {
    edge: { id: options.edgeId, labels: options.labels ?? {} },
    control_plane: {
      address: options.cpAddress,
      credential: options.credential ?? testEdgeCredential(options.edgeId),
      reconnect_max_ms: 300,
      ...cpSecurity,
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
  };
}

/** Starts an Edge with one registered Node, then its Control Plane link. */
export async function startCpEdge(options: CpEdgeOptions): Promise<CpEdge> {
  const nodeId = options.nodeId ?? `${options.edgeId}-node`;
  const nodeToken = `secret-token-of-${nodeId}`;
  const cpTls = options.cpTls ?? "server";
  const cpSecurity = cpTls === "off" ? { insecure_plaintext: true } : {
    tls: await dialTlsConfig("edge", cpTls === "mutual" ? options.edgeId : undefined),
  };
  const edge = await startStack({ config: cpEdgeConfig(options, nodeId, nodeToken, cpSecurity) });
  const agents = new DomainAgents(edge.service);
  const link = startCpLink({
    service: edge.service,
    agents,
    version: "test",
    logger: options.linkLogger ?? quiet("edge.cp_link"),
    backoffInitialMs: 50,
  });
  const stop = async () => {
    await link.stop();
    await edge.close();
  };
  return {
    edgeId: options.edgeId,
    credential: options.credential ?? testEdgeCredential(options.edgeId),
    nodeId,
    nodeToken,
    service: edge.service,
    agents,
    nodeWire: edge.wire,
    link,
    nodeClient: edge.nodes.get(nodeId)!.client,
    stop,
    [Symbol.asyncDispose]: stop,
  };
}

/**
 * A Control Plane config for tests: loopback, free ports unless given, audit at `auditPath`;
 * `edges` (raw `wire.edges`) defaults to {@linkcode TEST_EDGE_IDS} with their test credentials.
 */
export async function testCpConfig(
  auditPath: string,
  overrides: {
    httpPort?: number;
    wirePort?: number;
    edges?: readonly { id: string; credential: string }[];
    /** How the edge wire is secured; default `server` (TLS), as shipped. */
    tls?: WireTls;
    /** Raw keys merged into `access` (tokens default to the operate and read test tokens). */
    access?: RawConfig;
    /** Raw `series` keys (sample_interval_ms, window_ms); the defaults otherwise. */
    series?: RawConfig;
  } = {},
): Promise<CpConfig> {
  const tls = overrides.tls ?? "server";
  const security = tls === "off"
    ? { insecure_plaintext: true }
    : { tls: await listenTlsConfig("cp", "cp-test", { mutual: tls === "mutual" }) };
  return parseCpConfig({
    control_plane: { id: "cp-test" },
    http: { host: "127.0.0.1", port: overrides.httpPort ?? 0 },
    wire: {
      host: "127.0.0.1",
      port: overrides.wirePort ?? 0,
      heartbeat_interval_ms: 500,
      ...security,
      edges: overrides.edges ??
        TEST_EDGE_IDS.map((id) => ({ id, credential: testEdgeCredential(id) })),
    },
    access: {
      tokens: [
        { name: TEST_OPERATOR, token: TEST_OPERATE_TOKEN, role: "operate" },
        { name: TEST_VIEWER, token: TEST_READ_TOKEN, role: "read" },
      ],
      ...overrides.access,
    },
    audit: { path: auditPath },
    commands: { default_timeout_ms: 20_000 },
    ...(overrides.series ? { series: overrides.series } : {}),
  }, "cp-test.yaml");
}
