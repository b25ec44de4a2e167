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
import { EdgeService, type NodeConnection } from "./service.ts";
import { until } from "../../tests/util.ts";

/** A node link that records what the Edge sends. */
class RecordingLink implements NodeLink {
  readonly runs: { runId: string; input: RunInput }[] = [];
  readonly cancels: [string, string][] = [];
  closed: string | undefined;
  failSends = false;
  /** Runs the link refused while `failSends`. */
  refused = 0;
  /** When set, a run's send completes only once this resolves (a slow socket). */
  sendGate: Promise<void> | undefined;
  run(runId: string, input: RunInput): Promise<void> {
    if (this.failSends) {
      this.refused++;
      return Promise.reject(new Error("link down"));
    }
    this.runs.push({ runId, input });
    return this.sendGate ?? Promise.resolve();
  }
  cancel(runId: string, reason: string): void {
    this.cancels.push([runId, reason]);
  }
  readonly acks: [string, number][] = [];
  ack(runId: string, seq: number): void {
    this.acks.push([runId, seq]);
  }
  command(): Promise<never> {
    return Promise.reject(new Error("no commands here"));
  }
  close(reason: string): void {
    this.closed = reason;
  }
}

function serviceWith(nodes: string[], runs: Record<string, number> = {}) {
  const config = parseEdgeConfig({
    edge: { id: "edge-test" },
    runs,
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

/** The node of `old` registers again, on `link` (a new RecordingLink unless given). */
function reconnect(
  service: EdgeService,
  old: NodeSession,
  more: Omit<Partial<NodeConnection>, "record"> = {},
): NodeSession {
  return service.nodeConnected({
    record: old.record,
    link: new RecordingLink(),
    version: "t",
    hostname: "h",
    ...more,
  });
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

Deno.test("EdgeService fails the runs of a lost node with NODE_LOST, retryable, when it waits for none", async () => {
  const { service, sessions } = serviceWith(["n1"], { resume_grace_ms: 0 });
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
  assert.equal(terminal.message, "Node 'n1' was lost while running: no heartbeat for 6000 ms");
});

Deno.test("a direct run of a lost node waits for it, then fails NODE_LOST saying how long it waited", async () => {
  const { service, sessions, links } = serviceWith(["n1"], { resume_grace_ms: 50 });
  const handle = await service.dispatch(
    sessions.get("n1")!,
    runInput({ adapter: "mock", target: "m" }),
  );
  service.nodeDisconnected(sessions.get("n1")!, "no heartbeat for 6000 ms");
  const node = service.status().nodes[0]!;
  assert.deepEqual([node.connected, node.inFlight, node.detachedRuns], [false, 0, 1]);
  assert.equal(service.status().runsInFlight, 1, "a detached run is still in flight");
  const terminal = await handle.done;
  assert.deepEqual(
    terminal.type === "failed" && [terminal.code, terminal.message, terminal.retryable],
    [
      "NODE_LOST",
      "Node 'n1' did not come back within 50 ms (runs.resume_grace_ms): no heartbeat for 6000 ms",
      true,
    ],
  );
  assert.equal(service.status().nodes[0]!.detachedRuns, undefined);
  assert.equal(service.status().runsInFlight, 0);
  assert.deepEqual(links.get("n1")!.cancels, [], "the lost node is not told anything");
});

Deno.test("a run with output waits for its node, and resumes on its new connection", async () => {
  const { service, sessions } = serviceWith(["n1"]);
  const old = sessions.get("n1")!;
  const handle = await service.submitRun({
    ...runInput({ adapter: "", target: "" }),
    modelGroup: "g",
  });
  const runId = handle.runId;
  service.runEvent(
    old,
    event(runId, 1, { type: "started", nodeId: "n1", adapter: "mock", target: "m" }),
  );
  service.runEvent(old, event(runId, 2, { type: "output", text: "a" }));
  service.nodeDisconnected(old, "connection reset");
  assert.equal(service.status().nodes[0]!.detachedRuns, 1, "a pool run with output waits");

  // The node registers again holding the run: the Edge resumes it from what it received.
  assert.deepEqual(
    service.resumableRuns("n1", [{ runId, lastSeq: 4 }, { runId: "run_other", lastSeq: 9 }]),
    [{ runId, receivedSeq: 2 }],
  );
  const link = new RecordingLink();
  const fresh = reconnect(service, old, { link, resumed: [runId] });
  assert.deepEqual([fresh.inFlight, service.status().nodes[0]!.detachedRuns], [1, undefined]);
  assert.deepEqual(link.acks, [], "a link without a window is sent no acks");
  // The node sends again what followed seq 2; a repeat of seq 2 is dropped.
  service.runEvent(fresh, event(runId, 2, { type: "output", text: "a" }));
  service.runEvent(fresh, event(runId, 3, { type: "output", text: "b" }));
  service.runEvent(
    fresh,
    event(runId, 4, { type: "completed", finishReason: "stop", exitCode: 0 }),
  );
  const texts: string[] = [];
  for await (const e of handle.events()) if (e.type === "output") texts.push(e.text);
  assert.deepEqual(texts, ["a", "b"]);
  assert.equal((await handle.done).type, "completed");
  assert.equal(fresh.inFlight, 0);
});

Deno.test("a resumed run's new link is acked at once what its client took, as acks on the lost link may never have arrived", async () => {
  const { service, sessions } = serviceWith(["n1"]);
  const before = new RecordingLink();
  // A window of 4096 bytes: an ack per 1024 bytes taken, about six one-letter outputs.
  const old = reconnect(service, sessions.get("n1")!, { link: before, runWindowBytes: 4096 });
  const handle = await service.dispatch(old, runInput({ adapter: "mock", target: "m" }));
  for (let seq = 1; seq <= 9; seq++) {
    service.runEvent(old, event(handle.runId, seq, { type: "output", text: "x" }));
  }
  assert.equal(before.acks.length, 1, "one ack a quarter window in");
  const [[, ackedSeq]] = before.acks as [[string, number]];
  assert.ok(ackedSeq < 9, "the events after it are below the next quarter");
  // The consumer pauses: what it is handed from now on is not taken.
  handle.setReaderPaused(true);
  service.runEvent(old, event(handle.runId, 10, { type: "output", text: "x" }));
  service.nodeDisconnected(old, "connection reset");

  const after = new RecordingLink();
  const fresh = reconnect(service, old, {
    link: after,
    runWindowBytes: 4096,
    resumed: [handle.runId],
  });
  assert.deepEqual(after.acks, [[handle.runId, 9]], "taken so far, not the event held unread");
  service.runEvent(
    fresh,
    event(handle.runId, 11, { type: "completed", finishReason: "stop", exitCode: 0 }),
  );
  assert.deepEqual(after.acks.at(-1), [handle.runId, 11], "the end is acked, read or not");
  assert.equal((await handle.done).type, "completed");
});

Deno.test("a pool run with no output yet fails over to another node at once", async () => {
  const { service, sessions, links } = serviceWith(["n1", "n2"]);
  const handle = await service.submitRun({
    ...runInput({ adapter: "", target: "" }),
    modelGroup: "g",
  });
  const first = handle.nodeId;
  const other = first === "n1" ? "n2" : "n1";
  service.runEvent(
    sessions.get(first)!,
    event(handle.runId, 1, { type: "started", nodeId: first, adapter: "mock", target: "m" }),
  );
  service.nodeDisconnected(sessions.get(first)!, "connection reset");
  // The retry runs on the other node.
  await until("the run to fail over to the other node", () => handle.nodeId === other);
  assert.equal(links.get(other)!.runs.length, 1);
  assert.equal(service.status().nodes.find((n) => n.id === first)!.detachedRuns, undefined);
  const retry = handle.runId;
  service.runEvent(sessions.get(other)!, event(retry, 1, { type: "output", text: "b" }));
  service.runEvent(
    sessions.get(other)!,
    event(retry, 2, { type: "completed", finishReason: "stop", exitCode: 0 }),
  );
  assert.equal((await handle.done).type, "completed");
});

Deno.test("a stopping node's runs fail at once; a node back without a detached run fails it at once", async () => {
  const { service, sessions } = serviceWith(["n1", "n2"]);
  const stopping = await service.dispatch(
    sessions.get("n1")!,
    runInput({ adapter: "mock", target: "m" }),
  );
  service.nodeStopping(sessions.get("n1")!);
  service.nodeDisconnected(sessions.get("n1")!, "node stopping");
  const stopped = await stopping.done;
  assert.equal(
    stopped.type === "failed" && stopped.message,
    "Node 'n1' was lost while running: node stopping",
  );

  const n2 = sessions.get("n2")!;
  const forgotten = await service.dispatch(n2, runInput({ adapter: "mock", target: "m" }));
  service.nodeDisconnected(n2, "connection reset");
  assert.deepEqual(service.resumableRuns("n2", []), []);
  const link = new RecordingLink();
  reconnect(service, n2, { link, resumed: [] });
  const lost = await forgotten.done;
  assert.deepEqual(lost.type === "failed" && [lost.code, lost.message], [
    "NODE_LOST",
    "Node 'n2' was lost while running: connection reset; it registered again without the run",
  ]);
  assert.equal(service.status().runsInFlight, 0);
});

Deno.test("cancelling a detached run ends it at once; the node back is told to cancel it", async () => {
  const { service, sessions } = serviceWith(["n1"]);
  const n1 = sessions.get("n1")!;
  const handle = await service.dispatch(n1, runInput({ adapter: "mock", target: "m" }));
  service.nodeDisconnected(n1, "connection reset");
  assert.equal(service.cancelRun(handle.runId, "client went away"), true);
  const terminal = await handle.done;
  assert.deepEqual(terminal.type === "cancelled" && terminal.reason, "client went away");
  assert.deepEqual(service.resumableRuns("n1", [{ runId: handle.runId, lastSeq: 3 }]), []);
  // A resume answered just before the cancel: the run is cancelled on the node instead.
  const link = new RecordingLink();
  reconnect(service, n1, { link, resumed: [handle.runId] });
  assert.deepEqual(link.cancels, [[
    handle.runId,
    `the edge no longer waits for run ${handle.runId}`,
  ]]);
});

Deno.test("a node replacing its still-registered connection keeps the runs it lists", async () => {
  const { service, sessions, links } = serviceWith(["n1"]);
  const old = sessions.get("n1")!;
  const kept = await service.dispatch(old, runInput({ adapter: "mock", target: "m" }));
  const dropped = await service.dispatch(old, runInput({ adapter: "mock", target: "m" }));
  service.runEvent(old, event(kept.runId, 1, { type: "output", text: "a" }));
  const resumed = service.resumableRuns("n1", [{ runId: kept.runId, lastSeq: 1 }]);
  assert.deepEqual(resumed, [{ runId: kept.runId, receivedSeq: 1 }]);
  const fresh = reconnect(service, old, { resumed: [kept.runId] });
  assert.equal(links.get("n1")!.closed, "replaced by a new connection of the same node");
  const lost = await dropped.done;
  assert.equal(lost.type === "failed" && lost.code, "NODE_LOST");
  assert.deepEqual([old.inFlight, fresh.inFlight], [0, 1]);
  service.runEvent(
    fresh,
    event(kept.runId, 2, { type: "completed", finishReason: "stop", exitCode: 0 }),
  );
  assert.equal((await kept.done).type, "completed");
  assert.equal(fresh.inFlight, 0);
});

Deno.test("events read on a replaced connection are dropped: the run settles on the new one", async () => {
  const { service, sessions } = serviceWith(["n1"]);
  const old = sessions.get("n1")!;
  const handle = await service.dispatch(old, runInput({ adapter: "mock", target: "m" }));
  service.runEvent(old, event(handle.runId, 1, { type: "output", text: "a" }));
  const fresh = reconnect(service, old, { resumed: [handle.runId] });
  // Frames the old link had decoded before it was closed: the node sends them again on the new.
  service.runEvent(old, event(handle.runId, 2, { type: "output", text: "b" }));
  service.runEvent(
    old,
    event(handle.runId, 3, { type: "completed", finishReason: "stop", exitCode: 0 }),
  );
  assert.deepEqual([handle.lastSeq, fresh.inFlight, service.status().runsInFlight], [1, 1, 1]);
  service.runEvent(fresh, event(handle.runId, 2, { type: "output", text: "b" }));
  service.runEvent(
    fresh,
    event(handle.runId, 3, { type: "completed", finishReason: "stop", exitCode: 0 }),
  );
  const texts: string[] = [];
  for await (const e of handle.events()) if (e.type === "output") texts.push(e.text);
  assert.deepEqual(texts, ["a", "b"]);
  assert.deepEqual([fresh.inFlight, service.status().runsInFlight], [0, 0]);
});

Deno.test("a run the Edge no longer knows is cancelled on its node once, not per event", () => {
  const { service, sessions } = serviceWith(["n1"]);
  const old = sessions.get("n1")!;
  const link = new RecordingLink();
  // A link with a window: a terminal event of an unknown run is acked, so the node forgets it.
  const session = reconnect(service, old, { link, runWindowBytes: 4096, resumed: ["run_ended"] });
  const reason = (runId: string) => `the edge no longer waits for run ${runId}`;
  assert.deepEqual(link.cancels, [["run_ended", reason("run_ended")]], "resumed, but ended");
  for (let seq = 1; seq <= 3; seq++) {
    service.runEvent(session, event("run_ended", seq, { type: "output", text: "x" }));
    service.runEvent(session, event("run_gone", seq, { type: "output", text: "x" }));
  }
  assert.deepEqual(link.cancels, [
    ["run_ended", reason("run_ended")],
    ["run_gone", reason("run_gone")],
  ]);
  service.runEvent(
    session,
    event("run_gone", 4, { type: "cancelled", reason: reason("run_gone") }),
  );
  assert.deepEqual(link.acks, [["run_gone", 4]]);
  // Its entry went with its terminal event: a later run of the same id is told again.
  service.runEvent(session, event("run_gone", 5, { type: "output", text: "x" }));
  assert.equal(link.cancels.length, 3);
});

Deno.test("a link without a window is sent no acks, not even for terminal events", async () => {
  const { service, sessions, links } = serviceWith(["n1"]);
  const n1 = sessions.get("n1")!;
  const handle = await service.dispatch(n1, runInput({ adapter: "mock", target: "m" }));
  for (let seq = 1; seq <= 100; seq++) {
    service.runEvent(n1, event(handle.runId, seq, { type: "output", text: "x".repeat(10_000) }));
  }
  service.runEvent(
    n1,
    event(handle.runId, 101, { type: "completed", finishReason: "stop", exitCode: 0 }),
  );
  service.runEvent(
    n1,
    event("run_gone", 1, { type: "completed", finishReason: "stop", exitCode: 0 }),
  );
  assert.equal((await handle.done).type, "completed");
  assert.deepEqual(links.get("n1")!.acks, []);
});

Deno.test("a node that closes its link while talking fails its runs; after a silence, they wait", async () => {
  // serviceWith's clock stands at 1000; the heartbeat interval is the default 2000 ms.
  const { service, sessions } = serviceWith(["n1"]);
  const n1 = sessions.get("n1")!;
  const ended = await service.dispatch(n1, runInput({ adapter: "mock", target: "m" }));
  n1.lastSeenMs = 1_000 - 3_999;
  service.nodeDisconnected(n1, "peer closed", { peerClosed: true });
  const terminal = await ended.done;
  assert.equal(
    terminal.type === "failed" && terminal.message,
    "Node 'n1' was lost while running: peer closed",
  );

  const back = reconnect(service, n1);
  const waits = await service.dispatch(back, runInput({ adapter: "mock", target: "m" }));
  // Silent for two heartbeat intervals: the node gave up on the link, it did not exit.
  back.lastSeenMs = 1_000 - 4_000;
  service.nodeDisconnected(back, "peer reset", { peerClosed: true });
  assert.equal(service.status().nodes[0]!.detachedRuns, 1);
  assert.equal(service.cancelRun(waits.runId), true);
});

Deno.test("the Edge closing its node listener stops waiting: detached runs fail at once", async () => {
  const { service, sessions } = serviceWith(["n1"]);
  const handle = await service.dispatch(
    sessions.get("n1")!,
    runInput({ adapter: "mock", target: "m" }),
  );
  service.nodeDisconnected(sessions.get("n1")!, "connection reset");
  service.stopAwaitingNodes("the edge is stopping");
  const terminal = await handle.done;
  assert.equal(
    terminal.type === "failed" && terminal.message,
    "Node 'n1' was lost while running: connection reset (the edge is stopping)",
  );
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

Deno.test("a pool run its node's link could not take goes to another provider once", async () => {
  const { service, links, sessions } = serviceWith(["n1", "n2"]);
  const submit = () =>
    service.submitRun({ ...runInput({ adapter: "", target: "" }), modelGroup: "g" });
  links.get("n1")!.failSends = true;
  const handle = await submit();
  assert.equal(links.get("n1")!.refused, 1, "tried first on n1, the first of two idle providers");
  // Handed out only once it runs there: its ids are those of the attempt that runs.
  assert.equal(handle.nodeId, "n2", "sent to the other provider");
  assert.equal(handle.runId, links.get("n2")!.runs[0]!.runId);
  assert.equal(links.get("n2")!.runs.length, 1);
  assert.equal(service.status().runsInFlight, 1, "the unsent attempt is not left in flight");
  service.runEvent(
    sessions.get("n2")!,
    event(handle.runId, 1, { type: "completed", finishReason: "stop", exitCode: 0 }),
  );
  await handle.done;

  // Once only: with both links refusing, the caller hears why.
  links.get("n2")!.failSends = true;
  const refused = await (await submit()).done;
  assert.equal(refused.type, "failed");
  assert.match(refused.type === "failed" ? refused.message : "", /Cannot send run to node 'n2'/);
  assert.equal(service.status().runsInFlight, 0, "neither unsent attempt is left in flight");
});

Deno.test("a pool run is replaced once in all: unsent on one node, then lost on another, it fails", async () => {
  const { service, links, sessions } = serviceWith(["n1", "n2", "n3"]);
  links.get("n1")!.failSends = true;
  const handle = await service.submitRun({
    ...runInput({ adapter: "", target: "" }),
    modelGroup: "g",
  });
  assert.equal(handle.nodeId, "n2");
  links.get("n1")!.failSends = false; // n1 could take a third attempt now
  service.runEvent(
    sessions.get("n2")!,
    event(handle.runId, 1, {
      type: "failed",
      code: "NODE_LOST",
      message: "Node 'n2' was lost while running",
      retryable: true,
    }),
  );
  const terminal = await handle.done;
  assert.equal(terminal.type === "failed" && terminal.code, "NODE_LOST");
  assert.deepEqual(
    [links.get("n1")!.runs.length, links.get("n3")!.runs.length],
    [0, 0],
    "no third attempt",
  );
});

Deno.test("a client that goes away while its run is still being sent cancels it on the node", async () => {
  const { service, links, sessions } = serviceWith(["n1"]);
  const link = links.get("n1")!;
  const gate = Promise.withResolvers<void>();
  link.sendGate = gate.promise;
  const client = new AbortController();
  const dispatched = service.dispatch(
    sessions.get("n1")!,
    runInput({ adapter: "mock", target: "m" }),
    { signal: client.signal },
  );
  client.abort();
  gate.resolve();
  const handle = await dispatched;
  assert.deepEqual(link.cancels, [[handle.runId, "client went away"]]);
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
  service.runEvent(
    sessions.get("n1")!,
    event(handle.runId, 1, { type: "completed", finishReason: "stop", exitCode: 0 }),
  );
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
