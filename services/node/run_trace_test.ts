/**
 * The Node's run span with tracing on in this process, exported to a local OTLP receiver: the
 * first output of a run, a text delta or an embedding run's first vector, is its span's
 * `gen_ai.first_token` event.
 */
import assert from "node:assert/strict";
import { createLogger } from "../../shared/log.ts";
import { isTerminal, type RunEvent, runInput } from "../../shared/run.ts";
import { flushTracing, initTracing, shutdownTracing } from "../../shared/tracing.ts";
import { mockAdapterFactory } from "./adapters/mock.ts";
import { buildAdapterRegistry } from "./adapters/registry.ts";
import { NodeCore } from "./node.ts";
import { DEFAULT_NODE_POLICY } from "./policy.ts";
import { FIRST_TOKEN_EVENT } from "./run_trace.ts";
import { openRunStore } from "./store/sqlite_store.ts";

interface Exported {
  name: string;
  attributes: { key: string; value: { stringValue?: string } }[];
  events?: { name: string }[];
}

Deno.test("an embedding run's first vector, like a chat's first delta, is its span's first-token event", async () => {
  const spans: Exported[] = [];
  await using server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (r) => {
    const body = await r.json();
    for (const rs of body.resourceSpans) for (const ss of rs.scopeSpans) spans.push(...ss.spans);
    return Response.json({});
  });
  const env: Record<string, string> = {
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `http://127.0.0.1:${server.addr.port}/v1/traces`,
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "http/json",
  };
  const store = openRunStore(":memory:");
  const core = new NodeCore({
    nodeId: "n1",
    store,
    logger: createLogger("test", { level: "error", writer: () => {} }),
    buildAdapters: (c) => buildAdapterRegistry(c, { mock: mockAdapterFactory }),
    policy: DEFAULT_NODE_POLICY,
  });
  core.applyConfig([{
    name: "mock",
    kind: "mock",
    enabled: true,
    settings: {
      tokens: 2,
      tokenDelayMs: 0,
      startDelayMs: 0,
      failWith: "",
      failRetryable: false,
      embeddingDimensions: 8,
    },
  }]);
  const run = (runId: string, input: ReturnType<typeof runInput>) => {
    const done = Promise.withResolvers<void>();
    core.startRun(runId, input, (e: RunEvent) => isTerminal(e) && done.resolve());
    return done.promise;
  };
  try {
    assert.ok(await initTracing({ serviceName: "iop-node", env: (n) => env[n] }));
    await run("embed-1", runInput({ adapter: "mock", target: "x", embed: { inputs: ["a", "b"] } }));
    await run("chat-1", runInput({ adapter: "mock", target: "x", prompt: "hi" }));
    await flushTracing();
    const runSpan = (id: string) =>
      spans.find((s) =>
        s.name === "iop.run" &&
        s.attributes.some((a) => a.key === "iop.run_id" && a.value.stringValue === id)
      );
    for (const id of ["embed-1", "chat-1"]) {
      assert.deepEqual(runSpan(id)?.events?.map((e) => e.name), [FIRST_TOKEN_EVENT], id);
    }
    assert.ok(core.history(2).every((r) => r.firstOutputAtMs !== undefined));
  } finally {
    await shutdownTracing();
    await core.close();
    store.close();
  }
});
