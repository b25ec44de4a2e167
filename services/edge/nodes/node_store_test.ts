import assert from "node:assert/strict";
import type { NodeRecord } from "../config.ts";
import { NodeStore } from "./node_store.ts";

function record(id: string, extra: Partial<NodeRecord> = {}): NodeRecord {
  return {
    id,
    alias: "",
    token: `${id}-token`,
    maxConcurrentRuns: 0,
    adapters: [],
    providers: [],
    ...extra,
  };
}

Deno.test("a record is found by its token, its id and its alias", () => {
  const a = record("a", { alias: "gpu" });
  const store = new NodeStore([a, record("b")]);
  assert.equal(store.byToken("a-token"), a);
  assert.equal(store.byName("a"), a);
  assert.equal(store.byName("gpu"), a);
  assert.equal(store.byToken("nope"), undefined);
  assert.equal(store.byName("nope"), undefined);
});

Deno.test("an empty token never matches, even a record with an empty token", () => {
  const store = new NodeStore([record("a")]);
  assert.equal(store.byToken(""), undefined);
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
