import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import {
  EdgeSelectorSchema,
  EdgeStatusResponseSchema,
  RelayedEventSchema,
} from "../../proto/gen/iop/v1/control_pb.ts";
import { IopError } from "../../shared/errors.ts";
import { type EdgeLinkPort, EdgeRegistry } from "./registry.ts";

function fakeLink(): EdgeLinkPort & { closedWith: string[] } {
  const closedWith: string[] = [];
  return {
    closedWith,
    requestStatus: () => Promise.resolve(create(EdgeStatusResponseSchema, {})),
    sendCommand: () => Promise.resolve(),
    close: (reason) => closedWith.push(reason),
  };
}

const intro = (edgeId: string, labels: Record<string, string> = {}) => ({
  edgeId,
  version: "1",
  capabilities: [],
  labels,
});

Deno.test("select() picks connected edges for all, given ids as-is, and edges matching every label", () => {
  const registry = new EdgeRegistry({ eventsPerEdge: 10 });
  registry.attach(intro("a", { site: "lab", tier: "gpu" }), fakeLink());
  const b = registry.attach(intro("b", { site: "lab" }), fakeLink());
  registry.attach(intro("c", { site: "field" }), fakeLink());
  registry.detach(b, "gone");
  assert.deepEqual(registry.select(create(EdgeSelectorSchema, { all: true })), ["a", "c"]);
  assert.deepEqual(registry.select(create(EdgeSelectorSchema, { edgeIds: ["x", "b"] })), [
    "b",
    "x",
  ]);
  assert.deepEqual(registry.select(create(EdgeSelectorSchema, { labels: { site: "lab" } })), [
    "a",
    "b",
  ]);
  assert.deepEqual(
    registry.select(create(EdgeSelectorSchema, { labels: { site: "lab", tier: "gpu" } })),
    ["a"],
  );
});

Deno.test("a second attachment of an edge closes the first, whose later detach changes nothing", () => {
  const registry = new EdgeRegistry({ eventsPerEdge: 10 });
  const oldLink = fakeLink();
  const old = registry.attach(intro("a"), oldLink);
  registry.attach(intro("a"), fakeLink());
  assert.deepEqual(oldLink.closedWith, ["replaced by a new connection of the same edge"]);
  assert.equal(registry.detach(old, "closed"), false);
  assert.equal(registry.get("a")?.connected, true);
  assert.equal(registry.connectedCount, 1);
});

Deno.test("the event ring keeps only the most recent events per edge, and views are copies", () => {
  const registry = new EdgeRegistry({ eventsPerEdge: 3 });
  registry.attach(intro("a"), fakeLink());
  for (let i = 1; i <= 5; i++) {
    registry.recordEvent("a", create(RelayedEventSchema, { atMs: BigInt(i) }));
  }
  assert.deepEqual(registry.events("a")?.map((e) => Number(e.atMs)), [3, 4, 5]);
  assert.deepEqual(registry.events("a", 1)?.map((e) => Number(e.atMs)), [5]);
  registry.get("a")!.connected = false;
  assert.equal(registry.get("a")?.connected, true);
});

Deno.test("refresh() of an unknown edge is NOT_FOUND and of a disconnected one UNAVAILABLE", async () => {
  const registry = new EdgeRegistry({ eventsPerEdge: 3 });
  registry.detach(registry.attach(intro("a"), fakeLink()), "bye");
  await assert.rejects(
    registry.refresh("zz", 100),
    (e) => e instanceof IopError && e.code === "NOT_FOUND",
  );
  await assert.rejects(
    registry.refresh("a", 100),
    (e) => e instanceof IopError && e.code === "UNAVAILABLE",
  );
});
