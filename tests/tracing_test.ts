/**
 * One trace from the client through the Edge, its pool, the Node and the backend: an Edge and a
 * Node run as real subprocesses with the standard OTLP variables, export to a receiver in this
 * test, and serve a fake OpenAI backend that records the `traceparent` it is sent.
 */
import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { parseTraceparent } from "../shared/trace_context.ts";
import {
  chat,
  type ReceivedSpan,
  startOtlpReceiver,
  startTracedStack,
  type TracedStack,
} from "./tracing_helpers.ts";

const CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN = "00f067aa0ba902b7";
const CLIENT_PARENT = `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01`;

function historyRows(stack: TracedStack): { run_id: string; trace_id: string | null }[] {
  const db = new DatabaseSync(stack.historyPath);
  try {
    const rows = db.prepare("SELECT run_id, trace_id FROM runs ORDER BY started_at_ms").all();
    return rows.map((r) => ({ run_id: String(r.run_id), trace_id: r.trace_id as string | null }));
  } finally {
    db.close();
  }
}

function only(spans: ReceivedSpan[], service: string, name: string): ReceivedSpan {
  const found = spans.filter((s) => s.service === service && s.name === name);
  assert.equal(
    found.length,
    1,
    `one '${name}' span of ${service} expected, got: ` +
      JSON.stringify(spans.map((s) => `${s.service}:${s.name}`)),
  );
  return found[0]!;
}

Deno.test({
  name: "a client's trace id runs through the edge, the node and the backend, parent by parent",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    await using receiver = startOtlpReceiver();
    const otel = {
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
      // Longer than the test: every span arrives through the flush of the graceful stop.
      OTEL_BSP_SCHEDULE_DELAY: "600000",
      IOP_LOG_LEVEL: "debug",
    };
    await using stack = await startTracedStack(
      {
        ...otel,
        OTEL_SERVICE_NAME: "edge-under-test",
        OTEL_RESOURCE_ATTRIBUTES: "deployment.environment.name=tracing%20test,team=iop",
      },
      otel,
    );
    const { status, body } = await chat(stack, {
      traceparent: CLIENT_PARENT,
      tracestate: "vendor=opaque",
    });
    assert.equal(status, 200, JSON.stringify(body));
    assert.equal(receiver.spans.length, 0, "spans are batched until the stop flushes them");
    await stack.stop();

    const spans = receiver.spans;
    assert.ok(spans.length > 0, `no spans exported; posts: ${receiver.posts}`);
    for (const span of spans) assert.equal(span.traceId, CLIENT_TRACE, span.name);

    // Edge: the request's server span is the client's child and names its route.
    const server = only(spans, "edge-under-test", "POST /v1/chat/completions");
    assert.equal(server.parentSpanId, CLIENT_SPAN);
    assert.equal(server.kind, 2); // SERVER
    assert.equal(server.traceState, "vendor=opaque");
    assert.equal(server.attributes["http.request.method"], "POST");
    assert.equal(server.attributes["http.route"], "/v1/chat/completions");
    assert.equal(server.attributes["http.response.status_code"], 200);
    assert.equal(server.attributes["iop.tenant"], "anonymous");
    assert.ok(server.events.includes("iop.pool.admitted"), `events: ${server.events}`);
    assert.equal(server.resource["deployment.environment.name"], "tracing test");
    assert.equal(server.resource["team"], "iop");

    // Edge: the dispatch to the node is the request's child.
    const dispatch = only(spans, "edge-under-test", "iop.dispatch");
    assert.equal(dispatch.parentSpanId, server.spanId);
    assert.equal(dispatch.kind, 3); // CLIENT
    assert.equal(dispatch.attributes["iop.node_id"], "node-trace");
    assert.equal(dispatch.attributes["iop.pool"], "chat");
    assert.equal(dispatch.attributes["iop.tenant"], "anonymous");
    assert.equal(dispatch.attributes["gen_ai.request.model"], "test-model");
    assert.equal(dispatch.attributes["iop.run.status"], "completed");
    assert.equal(typeof dispatch.attributes["gen_ai.usage.output_tokens"], "number");
    const runId = dispatch.attributes["iop.run_id"];
    assert.match(String(runId), /^run_/);

    // Node: its run is the dispatch's child, with one event at the first token.
    const run = only(spans, "iop-node", "iop.run");
    assert.equal(run.parentSpanId, dispatch.spanId);
    assert.equal(run.attributes["iop.run_id"], runId);
    assert.equal(run.attributes["iop.node_id"], "node-trace");
    assert.deepEqual(run.events, ["gen_ai.first_token"]);
    assert.equal(
      run.attributes["gen_ai.usage.input_tokens"],
      dispatch.attributes["gen_ai.usage.input_tokens"],
    );

    // Node: the adapter's call is the run's child, and the backend was sent the call's context.
    const call = only(spans, "iop-node", "chat test-model");
    assert.equal(call.parentSpanId, run.spanId);
    assert.equal(call.attributes["gen_ai.request.model"], "test-model");
    assert.equal(call.attributes["gen_ai.operation.name"], "chat");
    const sent = stack.backend.requests.find((r) => r.path === "/v1/chat/completions");
    assert.ok(sent, "the backend got the chat request");
    assert.deepEqual(parseTraceparent(sent.headers["traceparent"]), {
      traceId: CLIENT_TRACE,
      spanId: call.spanId,
      sampled: true,
    });
    assert.equal(sent.headers["tracestate"], "vendor=opaque");

    // The node's history row carries the trace id; its logs name the tracing.
    assert.deepEqual(historyRows(stack), [{ run_id: runId, trace_id: CLIENT_TRACE }]);
    assert.match(stack.nodeLog.text, /tracing on/);
    assert.match(stack.edgeLog.text, /tracing on/);
    const traced = (log: typeof stack.nodeLog, msg: string) =>
      log.logLines().filter((l) => l.msg === msg).map((l) => [l.run_id, l.trace_id]);
    assert.deepEqual(traced(stack.edgeLog, "dispatching run"), [[runId, CLIENT_TRACE]]);
    assert.deepEqual(traced(stack.nodeLog, "model request started"), [[runId, CLIENT_TRACE]]);
  },
});

Deno.test({
  name: "without an OTLP endpoint nothing is exported, yet every run still carries a trace id",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    await using receiver = startOtlpReceiver();
    // Everything but the endpoint: tracing must stay off.
    const partial = {
      OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
      OTEL_SERVICE_NAME: "edge-untraced",
      OTEL_BSP_SCHEDULE_DELAY: "10",
    };
    await using stack = await startTracedStack(partial, partial);
    // No traceparent: the edge starts one and the backend gets it.
    const fresh = await chat(stack);
    assert.equal(fresh.status, 200, JSON.stringify(fresh.body));
    // A client's traceparent goes on unchanged: nobody is there to add a span.
    const passed = await chat(stack, { traceparent: CLIENT_PARENT });
    assert.equal(passed.status, 200, JSON.stringify(passed.body));
    await stack.stop();

    const sent = stack.backend.requests.filter((r) => r.path === "/v1/chat/completions");
    assert.equal(sent.length, 2);
    const first = parseTraceparent(sent[0]!.headers["traceparent"]);
    assert.ok(first, `a valid traceparent expected, got ${sent[0]!.headers["traceparent"]}`);
    assert.notEqual(first.traceId, CLIENT_TRACE);
    assert.equal(sent[1]!.headers["traceparent"], CLIENT_PARENT);

    assert.deepEqual(historyRows(stack).map((r) => r.trace_id), [first.traceId, CLIENT_TRACE]);
    assert.deepEqual(receiver.posts, []);
    assert.doesNotMatch(stack.edgeLog.text + stack.nodeLog.text, /tracing on/);
  },
});
