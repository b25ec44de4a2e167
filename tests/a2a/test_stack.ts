/**
 * Test support: a real Edge (service, node wire server, HTTP app with the A2A surface) and a
 * real Node (NodeCore with mock and CLI adapters dialing the Edge over TCP), all on port 0.
 * @module
 */
import { Registry } from "prom-client";
import { createLogger } from "../../shared/log.ts";
import { cliAdapterFactory } from "../../services/node/adapters/cli.ts";
import { mockAdapterFactory } from "../../services/node/adapters/mock.ts";
import { buildAdapterRegistry } from "../../services/node/adapters/registry.ts";
import { NodeCore } from "../../services/node/node.ts";
import { openRunStore } from "../../services/node/store/sqlite_store.ts";
import { startEdgeClient } from "../../services/node/transport/edge_client.ts";
import { parseEdgeConfig } from "../../services/edge/config.ts";
import { createEdgeHttp } from "../../services/edge/http/app.ts";
import { mountSurfaces } from "../../services/edge/http/surfaces.ts";
import { EdgeService } from "../../services/edge/service.ts";
import { startNodeServer } from "../../services/edge/transport/node_server.ts";
import { A2aTaskManager } from "../../services/edge/a2a/task_manager.ts";
import type { A2aTaskStore } from "../../services/edge/a2a/task_store.ts";

/** A running Edge + Node pair. */
export interface TestStack extends AsyncDisposable {
  baseUrl: string;
  service: EdgeService;
  tasks: A2aTaskManager;
  /** Directory for files the CLI profiles write (pid files). */
  dir: string;
}

const quiet = createLogger("test", { level: "error" });

/** CLI profiles the tests use; `{dir}` is replaced with the stack's temp dir. */
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
  ];
}

/** Starts the stack with the given task store. */
export async function startTestStack(options: { store: A2aTaskStore }): Promise<TestStack> {
  const dir = await Deno.makeTempDir({ prefix: "iop_a2a_" });
  const raw = {
    edge: { id: "edge-test" },
    http: { port: 0 },
    wire: { port: 0, heartbeat_interval_ms: 1000 },
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
    ],
  };
  const config = parseEdgeConfig(raw, "test.yaml");
  const service = new EdgeService({ config, logger: quiet, version: "test" });
  const wire = startNodeServer({ hostname: "127.0.0.1", port: 0, service, logger: quiet });
  const tasks = new A2aTaskManager({
    service,
    store: options.store,
    logger: quiet,
    retentionMs: config.a2a.taskRetentionMs,
  });
  tasks.recover();
  const app = createEdgeHttp(service, new Registry());
  mountSurfaces(app, {
    service,
    registry: new Registry(),
    logger: quiet,
    a2aTasks: tasks,
    version: "test",
  });
  const http = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, app.fetch);

  const ready = Promise.withResolvers<void>();
  const unsubscribe = service.subscribe((e) => {
    if (e.type === "node_config_applied") ready.resolve();
  });
  const store = openRunStore(":memory:");
  const core = new NodeCore({
    nodeId: "node-1",
    store,
    logger: quiet,
    buildAdapters: (configs) =>
      buildAdapterRegistry(configs, { mock: mockAdapterFactory, cli: cliAdapterFactory }),
  });
  const client = startEdgeClient({
    edgeAddress: `127.0.0.1:${wire.port}`,
    nodeId: "node-1",
    token: "tok-1",
    version: "test",
    core,
    logger: quiet,
  });
  await ready.promise;
  unsubscribe();
  return {
    baseUrl: `http://127.0.0.1:${http.addr.port}`,
    service,
    tasks,
    dir,
    async [Symbol.asyncDispose]() {
      await client.stop();
      await core.close();
      await wire.close();
      await http.shutdown();
      tasks.close();
      store.close();
      await Deno.remove(dir, { recursive: true });
    },
  };
}
