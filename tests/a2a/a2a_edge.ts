/**
 * The A2A suites' Edge: agents on a mock adapter and on CLI profiles (echo, a counter that writes
 * its pid, a failing one, one that resumes sessions, a slow one at most 4 at once) served through
 * the A2A surface, with one Node; built on the shared fixture in tests/stack.ts.
 * {@linkcode startTenantEdge} serves the same agents to configured tenants, with the task store
 * opened as `main.ts` opens it (a SQLite file, the config's `a2a` limits).
 * @module
 */
import { openA2aTasks } from "../../services/edge/a2a/open.ts";
import type { A2aTaskManager } from "../../services/edge/a2a/task_manager.ts";
import type { A2aTaskStore } from "../../services/edge/a2a/task_store.ts";
import { createEdgeHttp } from "../../services/edge/http/app.ts";
import { mountSurfaces } from "../../services/edge/http/surfaces.ts";
import { type RawConfig, startStack, type TestEdge } from "../stack.ts";

/** CLI profiles the tests use; `count` writes its pid to `${dir}/count.pid`. */
function profiles(dir: string) {
  return [
    {
      name: "echo",
      command: "sh",
      args: ["-c", 'for w in $1; do echo "$w"; done', "echo", "{prompt}"],
    },
    {
      name: "count",
      command: "sh",
      args: [
        "-c",
        `echo $$ > ${dir}/count.pid; i=1; while true; do echo "step $i"; i=$((i+1)); sleep 0.2; done`,
      ],
    },
    {
      name: "fail",
      command: "sh",
      args: [
        "-c",
        'echo "thinking hard" >&2; echo partial; sleep 0.1; echo "disk full" >&2; exit 3',
      ],
    },
    {
      name: "session",
      command: "sh",
      args: ["-c", 'printf "new:%s" "$1"', "sh", "{prompt}"],
      resume_args: ["-c", 'printf "resume:%s:%s" "$1" "$2"', "sh", "{session}", "{prompt}"],
    },
    {
      // Says something, then nothing for 600 ms, then the rest.
      name: "pause",
      command: "sh",
      args: ["-c", "echo before; sleep 0.6; echo after"],
    },
    {
      // Each run appends its pid to `${dir}/slow.pids`, then idles until cancelled.
      name: "slow",
      command: "sh",
      args: ["-c", `echo $$ >> ${dir}/slow.pids; echo started; sleep 60`],
      max_concurrency: 4,
    },
  ];
}

/** The Edge config of the A2A suites, with CLI profiles writing into `dir`. */
function a2aConfig(dir: string, apiKeys: string[] = [], sseKeepaliveMs?: number): RawConfig {
  return {
    edge: { id: "edge-test" },
    http: {
      api_keys: apiKeys,
      ...(sseKeepaliveMs === undefined ? {} : { sse_keepalive_ms: sseKeepaliveMs }),
    },
    wire: { heartbeat_interval_ms: 1000 },
    control_plane: { address: "" },
    a2a: { task_retention_ms: 60_000, store_path: ":memory:" },
    nodes: [{
      id: "node-1",
      token: "tok-1",
      adapters: [
        { name: "mock", kind: "mock", tokens: 6, token_delay_ms: 5 },
        { name: "cli", kind: "cli", profiles: profiles(dir) },
      ],
    }],
    agents: [
      { id: "echo", name: "Echo", kind: "a2a", adapter: "cli", target: "echo" },
      { id: "demo", name: "Demo", kind: "a2a", adapter: "mock", target: "demo" },
      { id: "count", name: "Counter", kind: "a2a", adapter: "cli", target: "count" },
      { id: "fail", name: "Failer", kind: "a2a", adapter: "cli", target: "fail" },
      { id: "session", name: "Sessions", kind: "a2a", adapter: "cli", target: "session" },
      { id: "nowhere", name: "Unserved", kind: "a2a", adapter: "cli", target: "missing" },
      { id: "other-echo", name: "Other echo", kind: "a2a", adapter: "cli", target: "echo" },
      { id: "slow", name: "Slow", kind: "a2a", adapter: "cli", target: "slow" },
      { id: "pause", name: "Pauser", kind: "a2a", adapter: "cli", target: "pause" },
    ],
  };
}

/** Starts the A2A suites' Edge over `store` with its Node registered; the Edge closes `store`. */
export function startA2aEdge(
  store: A2aTaskStore,
  apiKeys: string[] = [],
  options: { sseKeepaliveMs?: number } = {},
): Promise<TestEdge> {
  return startStack({
    config: (dir) => a2aConfig(dir, apiKeys, options.sseKeepaliveMs),
    a2a: store,
  });
}

/** Options of {@linkcode startTenantEdge}. */
export interface TenantEdgeOptions {
  /** The config's `tenants` list. */
  tenants: RawConfig[];
  /** Keys of the config's `a2a` section (`max_tasks`, `max_task_bytes`, ...). */
  a2a?: RawConfig;
  /** The older `http.api_keys` (the tenant `default`). */
  apiKeys?: string[];
  /** Runs before the Edge opens its task store at `storePath` (to plant an old file, say). */
  prepare?: (storePath: string) => void | Promise<void>;
}

/** An Edge of {@linkcode startTenantEdge}. */
export interface TenantEdge extends AsyncDisposable {
  edge: TestEdge;
  /** Base URL of its HTTP server. */
  url: string;
  tasks: A2aTaskManager;
  /** The SQLite file of its task store. */
  storePath: string;
}

/**
 * Starts the A2A suites' Edge and Node with `tenants` configured, the task store a SQLite file
 * in the Edge's temp dir opened by `a2a/open.ts` (as `main.ts` does), and every surface served.
 */
export async function startTenantEdge(options: TenantEdgeOptions): Promise<TenantEdge> {
  const edge = await startStack({
    config: (dir) => ({
      ...a2aConfig(dir, options.apiKeys ?? []),
      tenants: options.tenants,
      a2a: { task_retention_ms: 60_000, ...options.a2a, store_path: `${dir}/a2a.db` },
    }),
  });
  let tasks: A2aTaskManager | undefined;
  let http: Deno.HttpServer<Deno.NetAddr> | undefined;
  try {
    const storePath = edge.config.a2a.storePath;
    await options.prepare?.(storePath);
    tasks = await openA2aTasks(edge.config, edge.service, edge.logger);
    const app = createEdgeHttp(edge.service, edge.registry);
    mountSurfaces(app, {
      service: edge.service,
      registry: edge.registry,
      logger: edge.logger,
      a2aTasks: tasks,
      version: "test",
    });
    http = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, app.fetch);
    const served = http;
    const manager = tasks;
    let closing: Promise<void> | undefined;
    const close = () =>
      closing ??= (async () => {
        await served.shutdown();
        await edge.close();
        manager.close();
      })();
    return {
      edge,
      url: `http://127.0.0.1:${served.addr.port}`,
      tasks: manager,
      storePath,
      [Symbol.asyncDispose]: close,
    };
  } catch (err) {
    await http?.shutdown();
    tasks?.close();
    await edge.close();
    throw err;
  }
}
