/**
 * A fleet command's trace, with a real Control Plane, Edge and Node in this process and tracing
 * on (one OTLP/HTTP JSON receiver for all): the client's context in the command, the Control
 * Plane's command span, the Edge's, the dispatch and the Node's run form one chain.
 */
import assert from "node:assert/strict";
import { startControlPlane } from "../services/cp/control_plane.ts";
import { flushTracing, initTracing, shutdownTracing } from "../shared/tracing.ts";
import { authHeaders, startCpEdge, TEST_READ_TOKEN, testCpConfig } from "./cp_harness.ts";
import { quiet } from "./stack.ts";
import { startOtlpReceiver } from "./tracing_helpers.ts";
import { until } from "./util.ts";

const CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c";
const CLIENT_SPAN = "b7ad6b7169203331";

Deno.test("a fleet command's run joins the client's trace through the Control Plane and the Edge", async () => {
  await using receiver = startOtlpReceiver();
  const env: Record<string, string> = {
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
  };
  assert.ok(await initTracing({ serviceName: "iop-test", env: (n) => env[n] }));
  try {
    await using cp = await startControlPlane(await testCpConfig(":memory:"), {
      logger: quiet("cp"),
    });
    await using _edge = await startCpEdge({ edgeId: "edge-a", cpAddress: cp.wireAddress });
    await until("the edge attached", () => cp.registry.link("edge-a") !== undefined);
    const res = await fetch(`${cp.httpUrl}/commands`, {
      method: "POST",
      // The standard header, as any instrumented HTTP client sends it.
      headers: { ...authHeaders(), traceparent: `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01` },
      body: JSON.stringify({
        edges: { edgeIds: ["edge-a"] },
        command: { run: { adapter: "mock", target: "demo", prompt: "hi" } },
      }),
    });
    const accepted = await res.json();
    assert.equal(res.status, 202, JSON.stringify(accepted));
    await until("the command to finish", async () => {
      const r = await fetch(`${cp.httpUrl}/commands/${accepted.commandId}`, {
        headers: authHeaders(TEST_READ_TOKEN),
      });
      const body = await r.json();
      return body.outcome === "running" ? undefined : body.outcome;
    });
    await until("the run's node span to end", async () => {
      await flushTracing();
      return receiver.spans.some((s) => s.name === "iop.run") &&
        receiver.spans.some((s) => s.name === "iop.command" && s.kind === 4);
    });
  } finally {
    await shutdownTracing();
  }
  const spans = receiver.spans.filter((s) => s.traceId === CLIENT_TRACE);
  const one = (name: string, kind: number) => {
    const found = spans.filter((s) => s.name === name && s.kind === kind);
    assert.equal(found.length, 1, `${name}/${kind} in ${spans.map((s) => s.name)}`);
    return found[0]!;
  };
  const cpCommand = one("iop.command", 4); // PRODUCER
  const edgeCommand = one("iop.command", 5); // CONSUMER
  const dispatch = one("iop.dispatch", 3); // CLIENT
  const run = one("iop.run", 2); // SERVER
  assert.equal(cpCommand.parentSpanId, CLIENT_SPAN);
  assert.equal(cpCommand.attributes["iop.command.outcome"], "succeeded");
  assert.equal(cpCommand.attributes["iop.command.actor"], "test-operator");
  assert.equal(edgeCommand.parentSpanId, cpCommand.spanId);
  assert.equal(edgeCommand.attributes["iop.command.status"], "succeeded");
  assert.equal(dispatch.parentSpanId, edgeCommand.spanId);
  assert.equal(run.parentSpanId, dispatch.spanId);
  assert.equal(run.attributes["iop.run_id"], dispatch.attributes["iop.run_id"]);
});
