/**
 * Command deadlines on the Edge without a Control Plane: a real service layer whose reload is
 * held open by the test. Runs cancelled at the deadline are covered end to end, with a Node and
 * its CLI process, in tests/cp_outcomes_test.ts.
 */
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { EdgeCommandRequestSchema } from "../../../proto/gen/iop/v1/control_pb.ts";
import { createLogger } from "../../../shared/log.ts";
import { parseTraceparent } from "../../../shared/trace_context.ts";
import { currentTrace } from "../../../shared/tracing.ts";
import { DomainAgents } from "../agents/domain_agents.ts";
import { parseEdgeConfig } from "../config.ts";
import { EdgeService } from "../service.ts";
import { executeWithDeadline } from "./commands.ts";

const logger = createLogger("test", { writer: () => {} });

function serviceWithReload(reload: () => Promise<void>) {
  const config = parseEdgeConfig({ edge: { id: "edge-d" } }, "edge.yaml");
  const service = new EdgeService({
    config,
    logger,
    version: "1",
    loadConfig: () => reload().then(() => config),
  });
  return { service, agents: new DomainAgents(service) };
}

const reloadWithin = (timeoutMs: number) =>
  create(EdgeCommandRequestSchema, {
    commandId: "cmd_d",
    timeoutMs,
    kind: { case: "reload", value: {} },
  });

Deno.test("executeWithDeadline() answers TIMEOUT, not retryable, when the work outlives timeout_ms", async () => {
  const { service, agents } = serviceWithReload(() => new Promise(() => {}));
  const result = await executeWithDeadline(reloadWithin(30), {
    service,
    agents,
    signal: new AbortController().signal,
    onProgress: () => {},
    cancelSettleMs: 20,
  });
  assert.equal(result.status, "failed");
  assert.equal(result.commandId, "cmd_d");
  assert.deepEqual(
    [result.error?.code, result.error?.retryable, result.error?.message],
    [
      "TIMEOUT",
      false,
      "Cannot finish the command within its deadline of 30 ms: cancelled at the deadline, " +
      "still stopping 20 ms later",
    ],
  );
});

Deno.test("executeWithDeadline() keeps the result of a command that ends before its deadline", async () => {
  const { service, agents } = serviceWithReload(() => Promise.resolve());
  const result = await executeWithDeadline(reloadWithin(5_000), {
    service,
    agents,
    signal: new AbortController().signal,
    onProgress: () => {},
  });
  assert.equal(result.status, "succeeded");
  assert.equal(result.error, undefined);
});

Deno.test("executeWithDeadline() runs a command in the Control Plane's trace, or a new one when it sent none or a bad one", async () => {
  const cpTrace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  const seen: (string | undefined)[] = [];
  const { service, agents } = serviceWithReload(() => {
    seen.push(currentTrace()?.traceparent);
    return Promise.resolve();
  });
  const deps = { service, agents, signal: new AbortController().signal, onProgress: () => {} };
  for (const traceParent of [cpTrace, "", "00-zz-00f067aa0ba902b7-01"]) {
    const result = await executeWithDeadline({ ...reloadWithin(5_000), traceParent }, deps);
    assert.equal(result.status, "succeeded");
  }
  assert.equal(seen[0], cpTrace, "tracing off: the Control Plane's context goes on unchanged");
  for (const fresh of seen.slice(1)) {
    const parsed = parseTraceparent(fresh);
    assert.ok(parsed, `a fresh valid traceparent expected, got ${fresh}`);
    assert.notEqual(parsed.traceId, "4bf92f3577b34da6a3ce929d0e0e4736");
  }
  assert.notEqual(seen[1], seen[2]);
});
