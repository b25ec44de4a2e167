/**
 * Adapter health end to end over the real node wire (TLS): a Node's health monitor probes its
 * backends, reports AdapterHealth, and the Edge's pools, direct routing, status, model
 * listings and `/readyz` follow it.
 * @module
 */
import assert from "node:assert/strict";
import { startFakeOllama } from "../shared/testing/fake_ollama.ts";
import { buildAdapterRegistry } from "../services/node/adapters/registry.ts";
import { HealthMonitor, probeOnFailure } from "../services/node/health_monitor.ts";
import { NodeCore } from "../services/node/node.ts";
import { openRunStore } from "../services/node/store/sqlite_store.ts";
import { startEdgeClient } from "../services/node/transport/edge_client.ts";
import type { ResourceStatus } from "../services/edge/ports.ts";
import { adapterFactories, policyFor, startEdge, type TestEdge } from "./stack.ts";
import { dialTlsOf } from "./tls_fixture.ts";
import { until } from "./util.ts";

/** Starts the edge's first node as main.ts wires it: with a health monitor probing every 50 ms. */
async function startMonitoredNode(edge: TestEdge) {
  const record = edge.config.nodes[0]!;
  const health = new HealthMonitor({ intervalMs: 50, probeTimeoutMs: 500 });
  const factories = probeOnFailure(adapterFactories(), (adapter) => void health.check(adapter));
  const store = openRunStore(`${edge.dir}/${record.id}.sqlite`);
  const core = new NodeCore({
    nodeId: record.id,
    store,
    logger: edge.logger,
    policy: policyFor(record),
    buildAdapters: (configs) => {
      const built = buildAdapterRegistry(configs, factories);
      health.track(built.adapters.list());
      return built;
    },
  });
  health.start();
  const client = startEdgeClient({
    edgeAddress: `127.0.0.1:${edge.wire.port}`,
    tls: await dialTlsOf("node"),
    nodeId: record.id,
    token: record.token,
    version: "test",
    core,
    logger: edge.logger,
    backoffInitialMs: 20,
    backoffMaxMs: 200,
    health,
  });
  let stopping: Promise<void> | undefined;
  const stop = () =>
    stopping ??= (async () => {
      await client.stop();
      health.stop();
      await core.close();
      store.close();
    })();
  edge.nodes.set(record.id, {
    id: record.id,
    core,
    store,
    client,
    adapters: [],
    stop,
    [Symbol.asyncDispose]: stop,
  });
  return { health, client };
}

function resource(edge: TestEdge, id: string): ResourceStatus {
  const found = edge.service.status().nodes.flatMap((n) => n.resources).find((r) => r.id === id);
  if (!found) throw new Error(`no resource ${id}`);
  return found;
}

async function listed(edge: TestEdge): Promise<{ v1: string[]; tags: string[] }> {
  const v1 = await (await fetch(`${edge.url}/v1/models`)).json() as { data: { id: string }[] };
  const tags = await (await fetch(`${edge.url}/api/tags`)).json() as { models: { name: string }[] };
  return { v1: v1.data.map((m) => m.id), tags: tags.models.map((m) => m.name) };
}

async function readyz(edge: TestEdge): Promise<number> {
  const res = await fetch(`${edge.url}/readyz`);
  await res.body?.cancel();
  return res.status;
}

Deno.test("a killed Ollama turns its provider unhealthy everywhere, and healthy again when back", async () => {
  let ollama = startFakeOllama({ models: ["llama3.2"], version: "0.12.6" });
  const port = Number(new URL(ollama.url).port);
  try {
    await using edge = await startEdge({
      http: true,
      config: {
        nodes: [{
          id: "gpu-1",
          token: "gpu-1-token",
          adapters: [{
            name: "ollama",
            kind: "ollama",
            base_url: ollama.url,
            models: ["llama3.2"],
            connect_timeout_ms: 500,
          }],
          providers: [{
            id: "gpu-1-llama",
            adapter: "ollama",
            target: "llama3.2",
            model_group: "llama",
            max_concurrency: 2,
          }],
        }],
        models: [{ name: "llama", route: "pool", queue: { max_length: 4, max_wait_ms: 200 } }],
      },
    });
    await startMonitoredNode(edge);
    await until(
      "the edge hears the provider healthy",
      () => edge.service.sessions()[0]?.adapterHealth?.get("ollama")?.healthy === true,
    );
    assert.equal(resource(edge, "gpu-1-llama").healthy, true);
    assert.equal(resource(edge, "gpu-1-llama").healthDetail, `ollama 0.12.6 at ${ollama.url}`);
    assert.deepEqual(await listed(edge), { v1: ["llama"], tags: ["llama"] });
    assert.equal(await readyz(edge), 200);

    await ollama.close();
    await until(
      "the edge hears the provider unhealthy",
      () => resource(edge, "gpu-1-llama").healthy === false,
    );
    assert.match(
      resource(edge, "gpu-1-llama").healthDetail ?? "",
      new RegExp(`^GET ${ollama.url}/api/version failed: `),
    );
    assert.deepEqual(await listed(edge), { v1: [], tags: [] });
    assert.equal(await readyz(edge), 503);
    // The pool no longer dispatches to it: admission refuses instead of starting a run there.
    await assert.rejects(
      edge.service.submitRun(
        {
          adapter: "",
          target: "",
          modelGroup: "llama",
          prompt: "hi",
          messages: [],
          sampling: {},
        } as unknown as Parameters<typeof edge.service.submitRun>[0],
      ),
      (err: Error & { code?: string }) => err.code === "UNAVAILABLE",
    );

    ollama = startFakeOllama({ models: ["llama3.2"], version: "0.12.7", listen: { port } });
    await until(
      "the edge hears the provider healthy again",
      () => resource(edge, "gpu-1-llama").healthy === true,
    );
    assert.equal(resource(edge, "gpu-1-llama").healthDetail, `ollama 0.12.7 at ${ollama.url}`);
    assert.deepEqual(await listed(edge), { v1: ["llama"], tags: ["llama"] });
    assert.equal(await readyz(edge), 200);
  } finally {
    await ollama.close();
  }
});

Deno.test("a CLI profile whose executable does not exist is reported unhealthy and not routed to", async () => {
  await using edge = await startEdge({
    http: true,
    config: {
      nodes: [{
        id: "cli-1",
        token: "cli-1-token",
        adapters: [{
          name: "cli",
          kind: "cli",
          profiles: [
            { name: "shell", command: "sh", args: ["-c", "echo hi"] },
            { name: "ghost", command: "/nonexistent/iop-no-such-tool" },
          ],
        }],
      }],
      models: [
        { name: "shell-cli", route: "direct", adapter: "cli", target: "shell" },
        { name: "ghost-cli", route: "direct", adapter: "cli", target: "ghost" },
      ],
    },
  });
  await startMonitoredNode(edge);
  await until(
    "the edge hears the ghost profile",
    () => edge.service.sessions()[0]?.adapterHealth?.has("cli/ghost") === true,
  );
  const ghost = resource(edge, "cli/ghost");
  assert.equal(ghost.healthy, false);
  assert.equal(
    ghost.healthDetail,
    "command '/nonexistent/iop-no-such-tool' not found (not an executable file on PATH)",
  );
  assert.equal(resource(edge, "cli/shell").healthy, true);
  assert.deepEqual((await listed(edge)).v1, ["shell-cli"]);
  assert.equal(await readyz(edge), 200);
  await assert.rejects(
    async () =>
      await edge.service.submitRun(
        {
          adapter: "cli",
          target: "ghost",
          prompt: "",
          messages: [],
          sampling: {},
        } as unknown as Parameters<typeof edge.service.submitRun>[0],
      ),
    (err: Error & { code?: string }) =>
      err.code === "UNAVAILABLE" &&
      /not found \(not an executable file on PATH\)/.test(err.message),
  );
});
