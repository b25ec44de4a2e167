import assert from "node:assert/strict";
import type { NodeRecord } from "../config.ts";
import type { NodeLink } from "../ports.ts";
import { NodeRegistry, type NodeSession } from "./registry.ts";

const link: NodeLink = {
  run: () => Promise.resolve(),
  cancel: () => {},
  ack: () => {},
  command: () => Promise.reject(new Error("unused")),
  close: () => {},
};

function session(id: string, alias = ""): NodeSession {
  const record: NodeRecord = {
    id,
    alias,
    token: `${id}-t`,
    adapters: [],
    providers: [],
  };
  return {
    id,
    alias,
    record,
    link,
    version: "1",
    hostname: "h",
    connectedAtMs: 0,
    lastSeenMs: 0,
    inFlight: 0,
    draining: false,
    adapters: [],
    wantedConfigVersion: 1,
    configVersion: 1,
  };
}

Deno.test("a session is found by id and by alias", () => {
  const registry = new NodeRegistry();
  const s = session("n1", "gpu");
  assert.equal(registry.add(s), undefined);
  assert.equal(registry.get("n1"), s);
  assert.equal(registry.get("gpu"), s);
  assert.equal(registry.get("n2"), undefined);
  assert.equal(registry.size, 1);
});

Deno.test("a newer connection of the same node replaces the older and returns it", () => {
  const registry = new NodeRegistry();
  const old = session("n1", "gpu");
  const fresh = session("n1", "gpu");
  registry.add(old);
  assert.equal(registry.add(fresh), old);
  assert.equal(registry.get("n1"), fresh);
  assert.equal(registry.get("gpu"), fresh);
  assert.equal(registry.size, 1);
});

Deno.test("removing a replaced session leaves its replacement registered", () => {
  const registry = new NodeRegistry();
  const old = session("n1", "gpu");
  const fresh = session("n1", "gpu");
  registry.add(old);
  registry.add(fresh);
  assert.equal(registry.remove(old), false);
  assert.equal(registry.get("n1"), fresh);
  assert.equal(registry.get("gpu"), fresh);
  assert.equal(registry.remove(fresh), true);
  assert.equal(registry.get("n1"), undefined);
  assert.equal(registry.get("gpu"), undefined);
  assert.equal(registry.size, 0);
});

Deno.test("a replacement with a new alias drops the old alias", () => {
  const registry = new NodeRegistry();
  registry.add(session("n1", "old"));
  registry.add(session("n1", "new"));
  assert.equal(registry.get("old"), undefined);
  assert.equal(registry.get("new")?.id, "n1");
});

Deno.test("list() is a snapshot: changing it does not change the registry", () => {
  const registry = new NodeRegistry();
  registry.add(session("n1"));
  const listed = registry.list();
  listed.push(session("n2"));
  listed.length = 0;
  assert.equal(registry.size, 1);
  assert.deepEqual(registry.list().map((s) => s.id), ["n1"]);
});

Deno.test("the registry exposes no map through its public properties", () => {
  const registry = new NodeRegistry();
  registry.add(session("n1"));
  for (const key of Object.keys(registry)) {
    const value = (registry as unknown as Record<string, unknown>)[key];
    assert.ok(!(value instanceof Map), `property ${key} is a Map`);
  }
});

Deno.test("replaceRecord() gives a connected session its new record and re-indexes its alias", () => {
  const registry = new NodeRegistry();
  const s = session("n1", "gpu");
  registry.add(s);
  const record: NodeRecord = { ...s.record, alias: "big-gpu" };
  assert.equal(registry.replaceRecord(s, record), true);
  assert.equal(s.record, record);
  assert.equal(s.alias, "big-gpu");
  assert.equal(registry.get("big-gpu"), s);
  assert.equal(registry.get("gpu"), undefined);
  // A session no longer connected is left alone.
  const stale = session("n1");
  assert.equal(registry.replaceRecord(stale, record), false);
  assert.equal(stale.alias, "");
});
