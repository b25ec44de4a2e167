/**
 * The service layer without sockets: nodes are recording fake links, runs are driven by the
 * events the test hands to `runEvent`, as the transport would.
 */
import assert from "node:assert/strict";
import { IopError } from "../../shared/errors.ts";
import { createLogger } from "../../shared/log.ts";
import type { RunEvent, RunInput } from "../../shared/run.ts";
import { runInput } from "../../shared/run.ts";
import { parseEdgeConfig } from "./config.ts";
import type { NodeSession } from "./nodes/registry.ts";
import type { EdgeEvent, NodeLink } from "./ports.ts";
import { admitNode } from "./nodes/admission.ts";
import { EdgeService } from "./service.ts";

/** A node link that records what the Edge sends. */
class RecordingLink implements NodeLink {
  readonly runs: { runId: string; input: RunInput }[] = [];
  readonly cancels: [string, string][] = [];
  closed: string | undefined;
  failSends = false;
  run(runId: string, input: RunInput): Promise<void> {
    if (this.failSends) return Promise.reject(new Error("link down"));
    this.runs.push({ runId, input });
    return Promise.resolve();
  }
  cancel(runId: string, reason: string): void {
    this.cancels.push([runId, reason]);
  }
  command(): Promise<never> {
    return Promise.reject(new Error("no commands here"));
  }
  close(reason: string): void {
    this.closed = reason;
  }
}

function serviceWith(nodes: string[]) {
  const config = parseEdgeConfig({
    edge: { id: "edge-test" },
    nodes: nodes.map((id) => ({
      id,
      token: `${id}-token`,
      adapters: [{ name: "mock", kind: "mock" }],
      providers: [{
        id: `${id}-p`,
        adapter: "mock",
        target: "m",
        model_group: "g",
        max_concurrency: 1,
      }],
    })),
    models: [{ name: "g", route: "pool", queue: { max_length: 4, max_wait_ms: 60_000 } }],
  }, "service_test.yaml");
  const service = new EdgeService({
    config,
    logger: createLogger("test", { level: "error" }),
    version: "test",
    now: () => 1_000,
  });
  const events: EdgeEvent[] = [];
  service.subscribe((e) => events.push(e));
  const links = new Map<string, RecordingLink>();
  const sessions = new Map<string, NodeSession>();
  for (const record of config.nodes) {
    const link = new RecordingLink();
    links.set(record.id, link);
    sessions.set(record.id, service.nodeConnected({ record, link, version: "t", hostname: "h" }));
  }
  return { service, links, sessions, events };
}

const event = (runId: string, seq: number, e: Record<string, unknown>) =>
  ({ runId, seq, timestampMs: 1_000, ...e }) as RunEvent;

Deno.test("EdgeService relays a run's events in order and ends it at the terminal one", async () => {
  const { service, links, sessions, events } = serviceWith(["n1"]);
  const handle = await service.submitRun({ ...runInput({ adapter: "mock", target: "m" }) });
  const sent = links.get("n1")!.runs;
  assert.equal(sent.length, 1);
  assert.equal(sent[0]!.runId, handle.runId);
  const session = sessions.get("n1")!;
  service.runEvent(
    session,
    event(handle.runId, 1, { type: "started", nodeId: "n1", adapter: "mock", target: "m" }),
  );
  service.runEvent(session, event(handle.runId, 2, { type: "output", text: "a" }));
  service.runEvent(session, event(handle.runId, 2, { type: "output", text: "dup" })); // stale
  service.runEvent(
    session,
    event(handle.runId, 3, { type: "completed", finishReason: "stop", exitCode: 0 }),
  );
  const seen: string[] = [];
  for await (const e of handle.events()) seen.push(e.type === "output" ? e.text : e.type);
  assert.deepEqual(seen, ["started", "a", "completed"]);
  assert.equal((await handle.done).type, "completed");
  assert.equal(service.status().runsInFlight, 0);
  assert.ok(events.some((e) => e.type === "run_finished" && e.status === "completed"));
});

Deno.test("EdgeService fails the runs of a lost node with NODE_LOST, retryable", async () => {
  const { service, sessions } = serviceWith(["n1"]);
  const handle = await service.dispatch(
    sessions.get("n1")!,
    runInput({ adapter: "mock", target: "m" }),
  );
  service.nodeDisconnected(sessions.get("n1")!, "no heartbeat for 6000 ms");
  const terminal = await handle.done;
  assert.equal(terminal.type, "failed");
  if (terminal.type !== "failed") return;
  assert.equal(terminal.code, "NODE_LOST");
  assert.equal(terminal.retryable, true);
  assert.match(terminal.message, /n1.*no heartbeat for 6000 ms/);
});

Deno.test("EdgeService cancels through the node's link and rejects a run it cannot send", async () => {
  const { service, links, sessions } = serviceWith(["n1"]);
  const handle = await service.dispatch(
    sessions.get("n1")!,
    runInput({ adapter: "mock", target: "m" }),
  );
  assert.equal(service.cancelRun(handle.runId, "user pressed stop"), true);
  assert.deepEqual(links.get("n1")!.cancels, [[handle.runId, "user pressed stop"]]);
  service.runEvent(
    sessions.get("n1")!,
    event(handle.runId, 1, { type: "cancelled", reason: "user pressed stop" }),
  );
  assert.equal((await handle.done).type, "cancelled");
  assert.equal(service.cancelRun(handle.runId), false, "a finished run is not cancelled again");

  links.get("n1")!.failSends = true;
  await assert.rejects(
    service.dispatch(sessions.get("n1")!, runInput({ adapter: "mock", target: "m" })),
    { code: "UNAVAILABLE" },
  );
  assert.equal(service.status().runsInFlight, 0, "the refused run is not left in flight");
});

Deno.test("EdgeService drops events from a node that does not own the run", async () => {
  const { service, sessions } = serviceWith(["n1", "n2"]);
  const handle = await service.dispatch(
    sessions.get("n1")!,
    runInput({ adapter: "mock", target: "m" }),
  );
  service.runEvent(
    sessions.get("n2")!,
    event(handle.runId, 1, { type: "completed", finishReason: "stop", exitCode: 0 }),
  );
  assert.equal(service.status().runsInFlight, 1, "n2 cannot end n1's run");
  service.nodeDisconnected(sessions.get("n1")!, "test over");
  await handle.done;
});

Deno.test("EdgeService marks stopping the session a drain report came on, never a newer one", () => {
  const { service, sessions, events } = serviceWith(["n1"]);
  const old = sessions.get("n1")!;
  const record = service.nodeStore.byId("n1")!;
  const fresh = service.nodeConnected({
    record,
    link: new RecordingLink(),
    version: "t",
    hostname: "h",
  });
  // A draining frame that was on its way on the replaced link.
  service.nodeStopping(old);
  assert.equal(fresh.draining, false);
  assert.equal(service.status().nodes[0]?.draining, false);
  assert.ok(!events.some((e) => e.type === "node_drain_changed"));
  service.nodeStopping(fresh);
  assert.deepEqual(
    [service.status().nodes[0]?.draining, service.status().nodes[0]?.stopping],
    [true, true],
  );
});

Deno.test("EdgeService refuses to undrain a stopping node, and undrains one an operator drained", () => {
  const { service, sessions } = serviceWith(["n1", "n2"]);
  service.nodeStopping(sessions.get("n1")!);
  assert.throws(
    () => service.drainNode("n1", false),
    (err: unknown) =>
      err instanceof IopError && err.code === "INVALID_ARGUMENT" &&
      err.message === "Cannot undrain node 'n1' as it is stopping: it finishes its runs in " +
          "flight, takes no new one and then disconnects",
  );
  assert.equal(sessions.get("n1")!.draining, true);
  assert.equal(service.drainNode("n2", true), true);
  assert.equal(service.drainNode("n2", false), true);
  assert.equal(sessions.get("n2")!.draining, false);
  assert.equal(service.status().nodes[1]?.stopping, undefined);
});

Deno.test("an enrolled node that stopped and disconnected gives up its id: a new key enrolls under it", () => {
  const config = parseEdgeConfig({
    edge: { id: "edge-test" },
    enrollment: [{
      name: "gpu",
      token: "gpu-token",
      node_ids: ["gpu-*"],
      template: {
        alias: "{node}",
        adapters: [{ name: "mock", kind: "mock" }],
        providers: [{ id: "{node}-p", adapter: "mock", target: "m", model_group: "g" }],
      },
    }],
    models: [{ name: "g", route: "pool" }],
  }, "service_test.yaml");
  const service = new EdgeService({
    config,
    logger: createLogger("test", { level: "error" }),
    version: "test",
    now: () => 1_000,
  });
  const join = (nodeKey: string) => {
    const admission = admitNode(
      { nodeId: "gpu-1", token: "gpu-token", nodeKey, peerIds: [], mutualTls: false },
      service.nodeStore,
      service.enrollment,
    );
    assert.ok(admission.ok, admission.ok ? "" : admission.reason);
    return service.nodeConnected({
      record: admission.record,
      link: new RecordingLink(),
      version: "t",
      hostname: "h",
      seat: admission.seat,
    });
  };
  const old = join("old-container-key");
  service.nodeStopping(old);
  service.nodeDisconnected(old, "stopped");
  const fresh = join("new-container-key");
  assert.equal(fresh.id, "gpu-1");
});
