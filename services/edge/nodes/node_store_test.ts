import assert from "node:assert/strict";
import { hashSecret } from "../../../shared/secrets.ts";
import type { NodeRecord } from "../config.ts";
import { NodeStore } from "./node_store.ts";

function record(id: string, extra: Partial<NodeRecord> = {}): NodeRecord {
  return {
    id,
    alias: "",
    token: `${id}-token`,
    adapters: [],
    providers: [],
    ...extra,
  };
}

Deno.test("a record is found by its id and its alias", () => {
  const a = record("a", { alias: "gpu" });
  const store = new NodeStore([a, record("b")]);
  assert.equal(store.byName("a"), a);
  assert.equal(store.byName("gpu"), a);
  assert.equal(store.byName("nope"), undefined);
});

Deno.test("an empty id is refused at load", () => {
  assert.throws(
    () => new NodeStore([record(" ", { token: "t" })]),
    { name: "TypeError", message: "Cannot load node record as its id is empty" },
  );
});

Deno.test("an empty token is refused at load", () => {
  assert.throws(
    () => new NodeStore([record("a", { token: "" })]),
    { name: "TypeError", message: "Cannot load node 'a' as its token is empty" },
  );
});

Deno.test("a duplicate token is refused at load", () => {
  assert.throws(
    () => new NodeStore([record("a", { token: "t" }), record("b", { token: "t" })]),
    { name: "TypeError", message: "Cannot load node 'b' as its token is already used" },
  );
});

Deno.test("a plain token whose hash another node stores is a duplicate", () => {
  assert.throws(
    () => new NodeStore([record("a", { token: hashSecret("t") }), record("b", { token: "t" })]),
    { name: "TypeError", message: "Cannot load node 'b' as its token is already used" },
  );
  assert.throws(
    () => new NodeStore([record("a", { token: "t" }), record("b", { token: hashSecret("t") })]),
    { name: "TypeError", message: "Cannot load node 'b' as its token is already used" },
  );
});

Deno.test("a malformed sha256: token is refused at load without repeating it", () => {
  assert.throws(
    () => new NodeStore([record("a", { token: "sha256:0123" })]),
    {
      name: "TypeError",
      message: "Cannot load node 'a' as its token must be 'sha256:' followed by 64 hex digits " +
        "(see 'deno task hash-secret'): current value has 4 characters after 'sha256:'",
    },
  );
});

Deno.test("a duplicate id is refused at load", () => {
  assert.throws(
    () => new NodeStore([record("a"), record("a", { token: "other" })]),
    { name: "TypeError", message: "Cannot load node 'a' as the name 'a' is already used" },
  );
});

Deno.test("an alias that repeats another node's alias or id is refused at load", () => {
  assert.throws(
    () => new NodeStore([record("a", { alias: "x" }), record("b", { alias: "x" })]),
    { message: "Cannot load node 'b' as the name 'x' is already used" },
  );
  assert.throws(
    () => new NodeStore([record("a"), record("b", { alias: "a" })]),
    { message: "Cannot load node 'b' as the name 'a' is already used" },
  );
});

Deno.test("a node may carry its own id as alias", () => {
  const store = new NodeStore([record("a", { alias: "a" })]);
  assert.equal(store.byName("a")?.id, "a");
});

Deno.test("the record list keeps config order and cannot be changed", () => {
  const input = [record("b"), record("a")];
  const store = new NodeStore(input);
  input.push(record("c"));
  assert.deepEqual(store.list().map((r) => r.id), ["b", "a"]);
  assert.throws(() => (store.list() as NodeRecord[]).push(record("d")), TypeError);
});

Deno.test("isCliAdapter() tells CLI adapters apart, per node (id or alias) or anywhere", () => {
  const store = new NodeStore([
    record("a", {
      alias: "alpha",
      adapters: [{ name: "shell", kind: "cli", enabled: true, profiles: [] }],
    } as unknown as Partial<NodeRecord>),
    record("b", {
      adapters: [{ name: "llm", kind: "mock", enabled: true }],
    } as unknown as Partial<NodeRecord>),
  ]);
  assert.equal(store.isCliAdapter("shell"), true);
  assert.equal(store.isCliAdapter("shell", "alpha"), true);
  assert.equal(store.isCliAdapter("shell", "b"), false);
  assert.equal(store.isCliAdapter("llm"), false);
  assert.equal(store.isCliAdapter("shell", "nowhere"), false);
});

Deno.test("nodes enrolled under one rule share its token; no one else may hold it", () => {
  const rule = { token: "gpu-enroll-token", enrolledBy: "gpu" };
  const store = new NodeStore([record("a"), record("gpu-1", rule), record("gpu-2", rule)]);
  assert.equal(store.byId("gpu-2")?.enrolledBy, "gpu");
  assert.equal(store.byId("a")?.enrolledBy, undefined);
  assert.throws(
    () => new NodeStore([record("gpu-1", rule), record("x", { token: "gpu-enroll-token" })]),
    { name: "TypeError", message: "Cannot load node 'x' as its token is already used" },
  );
  assert.throws(
    () => new NodeStore([record("g", rule), record("c", { ...rule, enrolledBy: "cpu" })]),
    { name: "TypeError", message: "Cannot load node 'c' as its token is already used" },
  );
});

Deno.test("byId() finds a record by its id only, never by its alias", () => {
  const a = record("a", { alias: "gpu" });
  const store = new NodeStore([a]);
  assert.equal(store.byId("a"), a);
  assert.equal(store.byId("gpu"), undefined);
});
