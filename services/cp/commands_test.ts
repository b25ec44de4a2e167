/**
 * The command center without sockets: edges are recording fake links in a real registry, the
 * audit is a real SQLite store in memory, results arrive as the transport would hand them over,
 * and deadline timers and the clock are fakes the tests move by hand.
 */
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import {
  type CommandUpdate,
  type EdgeCommandRequest,
  EdgeCommandRequestSchema,
  EdgeCommandResultSchema,
  EdgeSelectorSchema,
} from "../../proto/gen/iop/v1/control_pb.ts";
import { createLogger } from "../../shared/log.ts";
import { CommandCenter } from "./commands.ts";
import { commandOutcome } from "./outcome.ts";
import type { CommandOutcome } from "./ports.ts";
import { type EdgeLinkPort, EdgeRegistry } from "./registry.ts";
import { openAuditStore } from "./store/audit_store.ts";

class RecordingEdge implements EdgeLinkPort {
  readonly sent: EdgeCommandRequest[] = [];
  requestStatus(): Promise<never> {
    return Promise.reject(new Error("not in these tests"));
  }
  sendCommand(request: EdgeCommandRequest): Promise<void> {
    this.sent.push(request);
    return Promise.resolve();
  }
  close(): void {}
}

function center(edges: string[], defaultTimeoutMs = 60_000, resultGraceMs = 0) {
  const registry = new EdgeRegistry({ eventsPerEdge: 10 });
  const links = new Map<string, RecordingEdge>();
  const attachments = new Map<string, ReturnType<EdgeRegistry["attach"]>>();
  for (const edgeId of edges) {
    const link = new RecordingEdge();
    links.set(edgeId, link);
    attachments.set(
      edgeId,
      registry.attach({ edgeId, version: "t", capabilities: [], labels: {} }, link),
    );
  }
  const audit = openAuditStore(":memory:");
  const finished: [string, CommandOutcome][] = [];
  const late: [string, string][] = [];
  const timers: { ms: number; fire: () => void; cancelled: boolean }[] = [];
  const clock = { now: 1_000 };
  const updates: CommandUpdate[] = [];
  const commands = new CommandCenter({
    registry,
    audit,
    logger: createLogger("test", { level: "error" }),
    defaultTimeoutMs,
    resultGraceMs,
    retained: 10,
    onFinished: (kind, outcome) => finished.push([kind, outcome]),
    onLateResult: (kind, status) => late.push([kind, status]),
    now: () => clock.now,
    setTimer: (fire, ms) => {
      const timer = { ms, fire, cancelled: false };
      timers.push(timer);
      return () => timer.cancelled = true;
    },
  });
  commands.subscribe((u) => updates.push(u));
  return {
    commands,
    timers,
    clock,
    updates,
    late,
    links,
    audit,
    finished,
    registry,
    attachments,
    [Symbol.dispose]: () => {
      commands.close();
      audit.close();
    },
  };
}

const reload = () => create(EdgeCommandRequestSchema, { kind: { case: "reload", value: {} } });
const result = (commandId: string, status: string, summary = "") =>
  create(EdgeCommandResultSchema, { commandId, status, summary });

Deno.test("a fleet command sent to two edges ends partial when one fails, and the audit says so", () => {
  using c = center(["edge-a", "edge-b"]);
  const command = c.commands.submit({
    selector: create(EdgeSelectorSchema, { all: true, edgeIds: [] }),
    command: reload(),
    actor: "alice",
    via: "http",
  });
  assert.deepEqual(
    [...c.links.values()].map((l) => l.sent.map((r) => [r.commandId, r.issuedBy])),
    [[[command.commandId, "alice"]], [[command.commandId, "alice"]]],
  );
  c.commands.result("edge-a", result(command.commandId, "succeeded", "reloaded"));
  assert.equal(command.outcome, "running");
  c.commands.result("edge-b", result(command.commandId, "failed", "bad yaml"));
  assert.equal(command.outcome, "partial");
  assert.deepEqual(c.finished, [["reload", "partial"]]);
  const [row] = c.audit.recent(1);
  assert.equal(row?.outcome, "partial");
  assert.deepEqual(
    Object.fromEntries(Object.entries(row!.results).map(([id, r]) => [id, r.status])),
    { "edge-a": "succeeded", "edge-b": "failed" },
  );
});

Deno.test("a share whose edge reports a status this Control Plane does not know is failed", () => {
  using c = center(["edge-a"]);
  const command = c.commands.submit({
    selector: create(EdgeSelectorSchema, { all: false, edgeIds: ["edge-a"] }),
    command: reload(),
    actor: "bob",
    via: "client",
  });
  c.commands.result("edge-a", result(command.commandId, "half-done"));
  assert.equal(command.edges.get("edge-a")?.status, "failed");
  assert.equal(command.outcome, "failed");
});

Deno.test("a lost edge makes its running shares unknown, not retryable; its late answer replaces them", () => {
  using c = center(["edge-a"]);
  const command = c.commands.submit({
    selector: create(EdgeSelectorSchema, { all: true, edgeIds: [] }),
    command: reload(),
    actor: "carol",
    via: "http",
  });
  c.registry.detach(c.attachments.get("edge-a")!, "peer closed");
  c.commands.edgeLost("edge-a", "peer closed");
  const share = command.edges.get("edge-a")!;
  assert.equal(share.status, "unknown");
  assert.equal(share.result?.status, "unknown");
  assert.equal(share.result?.error?.code, "UNAVAILABLE");
  assert.equal(share.result?.error?.retryable, false);
  assert.match(share.result?.summary ?? "", /edge link lost while the command ran: peer closed/);
  assert.equal(command.outcome, "unknown");
  assert.equal(c.audit.get(command.commandId)?.results["edge-a"]?.retryable, false);

  c.clock.now = 5_000;
  c.commands.result("edge-a", result(command.commandId, "succeeded", "reloaded"));
  assert.deepEqual([share.status, share.late, share.learnedAtMs], ["succeeded", true, 5_000]);
  assert.equal(command.outcome, "succeeded");
  assert.deepEqual(c.finished, [["reload", "unknown"]], "finished is counted once");
  assert.deepEqual(c.late, [["reload", "succeeded"]]);
  c.commands.result("edge-a", result(command.commandId, "failed"));
  assert.equal(share.status, "succeeded", "a known answer is not replaced");
});

Deno.test("a share past its deadline plus grace is unknown, and the late result updates the record and the audit", () => {
  using c = center(["edge-a", "edge-b"], 60_000, 2_000);
  const command = c.commands.submit({
    selector: create(EdgeSelectorSchema, { all: true, edgeIds: [] }),
    command: create(EdgeCommandRequestSchema, {
      timeoutMs: 1_500,
      kind: { case: "agent", value: { agentId: "deployer", command: "deploy", input: "v9" } },
    }),
    actor: "dave",
    via: "http",
  });
  assert.deepEqual(
    [...c.links.values()].map((l) => l.sent[0]?.timeoutMs),
    [1_500, 1_500],
    "the edge gets the deadline it must enforce",
  );
  assert.deepEqual(c.timers.map((t) => t.ms), [3_500, 3_500], "deadline plus grace");
  c.commands.result("edge-a", result(command.commandId, "succeeded", "deployed v9"));
  assert.equal(c.timers[0]?.cancelled, true);
  c.clock.now = 4_500;
  c.timers[1]!.fire();
  const share = command.edges.get("edge-b")!;
  assert.equal(share.status, "unknown");
  assert.equal(share.result?.error?.code, "TIMEOUT");
  assert.equal(share.result?.error?.retryable, false);
  assert.equal(command.outcome, "unknown");
  assert.equal(command.finishedAtMs, 4_500);
  const before = c.audit.get(command.commandId)!;
  assert.equal(before.outcome, "unknown");
  assert.deepEqual(before.results["edge-b"], {
    status: "unknown",
    summary: "outcome unknown: no result within 3500 ms (deadline 1500 ms)",
    errorCode: "TIMEOUT",
    retryable: false,
    late: false,
    learnedAtMs: 4_500,
  });

  c.clock.now = 9_000;
  c.commands.result("edge-b", result(command.commandId, "succeeded", "deployed v9"));
  assert.deepEqual([share.status, share.late, share.learnedAtMs], ["succeeded", true, 9_000]);
  assert.equal(command.outcome, "succeeded");
  const after = c.audit.get(command.commandId)!;
  assert.equal(after.outcome, "succeeded");
  assert.equal(after.finishedAtMs, 4_500, "the first end stays");
  assert.deepEqual(after.results["edge-b"], {
    status: "succeeded",
    summary: "deployed v9",
    errorCode: "",
    retryable: false,
    late: true,
    learnedAtMs: 9_000,
  });
  const lastUpdate = c.updates.at(-1)!;
  assert.deepEqual(
    [lastUpdate.edgeId, lastUpdate.shareStatus, lastUpdate.late, lastUpdate.update.case],
    ["edge-b", "succeeded", true, "result"],
  );
});

Deno.test("a late answer for a command no longer in memory still updates its audit row", () => {
  using c = center(["edge-a"]);
  const first = c.commands.submit({
    selector: create(EdgeSelectorSchema, { all: true, edgeIds: [] }),
    command: reload(),
    actor: "erin",
    via: "http",
  });
  c.commands.edgeLost("edge-a", "reset");
  // Eleven more finished commands push the first out of the ten kept in memory.
  for (let i = 0; i < 11; i++) {
    const next = c.commands.submit({
      selector: create(EdgeSelectorSchema, { all: true, edgeIds: [] }),
      command: reload(),
      actor: "erin",
      via: "http",
    });
    c.commands.result("edge-a", result(next.commandId, "succeeded"));
  }
  assert.equal(c.commands.get(first.commandId), undefined);
  c.commands.result("edge-a", result(first.commandId, "failed", "bad yaml"));
  const row = c.audit.get(first.commandId)!;
  assert.equal(row.outcome, "failed");
  assert.deepEqual([row.results["edge-a"]?.status, row.results["edge-a"]?.late], ["failed", true]);
});

Deno.test("the outcome rule: unknown without a known failure, failed or partial with one", () => {
  assert.equal(commandOutcome(["succeeded", "succeeded"]), "succeeded");
  assert.equal(commandOutcome(["succeeded", "unknown"]), "unknown");
  assert.equal(commandOutcome(["unknown", "unknown"]), "unknown");
  assert.equal(commandOutcome(["failed", "unknown"]), "failed");
  assert.equal(commandOutcome(["cancelled", "failed"]), "failed");
  assert.equal(commandOutcome(["succeeded", "failed", "unknown"]), "partial");
  assert.equal(commandOutcome(["succeeded", "running", "unknown"]), "running");
});

Deno.test("a selector that matches no edge and an empty command are refused", () => {
  using c = center(["edge-a"]);
  assert.throws(
    () =>
      c.commands.submit({
        selector: create(EdgeSelectorSchema, { all: false, edgeIds: [] }),
        command: reload(),
        actor: "x",
        via: "http",
      }),
    { code: "INVALID_ARGUMENT", message: "Cannot submit a command as no edge matches" },
  );
  assert.throws(
    () =>
      c.commands.submit({
        selector: create(EdgeSelectorSchema, { all: true, edgeIds: [] }),
        command: create(EdgeCommandRequestSchema, {}),
        actor: "x",
        via: "http",
      }),
    { code: "INVALID_ARGUMENT" },
  );
});

Deno.test("every edge's share of a fleet command carries one trace: the client's valid one, else a fresh one", () => {
  using c = center(["edge-a", "edge-b"]);
  const all = create(EdgeSelectorSchema, { all: true, edgeIds: [] });
  const client = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  const submitWith = (traceParent: string, traceState = "") =>
    c.commands.submit({
      selector: all,
      command: { ...reload(), traceParent, traceState },
      actor: "alice",
      via: "http",
    });
  submitWith(client, "vendor=1");
  submitWith("");
  submitWith("00-00000000000000000000000000000000-00f067aa0ba902b7-01", "vendor=1");
  const [a, b] = [...c.links.values()].map((l) => l.sent);
  // Tracing is off here: the client's context goes on unchanged, to both edges.
  assert.deepEqual([a![0]!.traceParent, a![0]!.traceState], [client, "vendor=1"]);
  assert.deepEqual([b![0]!.traceParent, b![0]!.traceState], [client, "vendor=1"]);
  for (const i of [1, 2]) {
    const fresh = a![i]!.traceParent;
    assert.match(fresh, /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    assert.doesNotMatch(fresh, /^00-(4bf92f3577b34da6a3ce929d0e0e4736|0{32})-/);
    assert.equal(b![i]!.traceParent, fresh, "one fleet command, one trace");
    assert.equal(a![i]!.traceState, "");
  }
  assert.notEqual(a![1]!.traceParent, a![2]!.traceParent);
});
