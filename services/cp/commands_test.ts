/**
 * The command center without sockets: edges are recording fake links in a real registry, the
 * audit is a real SQLite store in memory, results arrive as the transport would hand them over.
 */
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import {
  type EdgeCommandRequest,
  EdgeCommandRequestSchema,
  EdgeCommandResultSchema,
  EdgeSelectorSchema,
} from "../../proto/gen/iop/v1/control_pb.ts";
import { createLogger } from "../../shared/log.ts";
import { CommandCenter } from "./commands.ts";
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

function center(edges: string[], defaultTimeoutMs = 60_000) {
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
  const commands = new CommandCenter({
    registry,
    audit,
    logger: createLogger("test", { level: "error" }),
    defaultTimeoutMs,
    retained: 10,
    onFinished: (kind, outcome) => finished.push([kind, outcome]),
  });
  return {
    commands,
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

Deno.test("a lost edge fails its running shares as UNAVAILABLE; a late result changes nothing", () => {
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
  assert.equal(share.status, "failed");
  assert.equal(share.result?.error?.code, "UNAVAILABLE");
  assert.equal(share.result?.error?.retryable, true);
  c.commands.result("edge-a", result(command.commandId, "succeeded"));
  assert.equal(share.status, "failed", "the first outcome stands");
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
