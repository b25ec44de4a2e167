import assert from "node:assert/strict";
import { ENROLLABLE_ID, sampleNodeId, substituteNode } from "./enrollment_template.ts";

Deno.test("substituteNode() replaces {node} in every nested string, never in keys", () => {
  const template = {
    alias: "{node}",
    "{node}": "key stays",
    adapters: [{ base_url: "http://{node}:11434/{node}", tokens: 4, enabled: true }],
    providers: [{ id: "{node}-llama" }],
    nothing: null,
  };
  assert.deepEqual(substituteNode(template, "gpu-1"), {
    alias: "gpu-1",
    "{node}": "key stays",
    adapters: [{ base_url: "http://gpu-1:11434/gpu-1", tokens: 4, enabled: true }],
    providers: [{ id: "gpu-1-llama" }],
    nothing: null,
  });
  assert.equal(template.alias, "{node}", "the template itself is left as it was");
});

Deno.test("substituteNode() inserts the id literally, `$` patterns included", () => {
  assert.equal(substituteNode("a-{node}", "$&$1"), "a-$&$1");
});

Deno.test("sampleNodeId() gives an id the first pattern admits", () => {
  assert.equal(sampleNodeId(["gpu-*", "x"]), "gpu-sample");
  assert.equal(sampleNodeId(["*"]), "sample");
  assert.equal(sampleNodeId(["edge-node-3"]), "edge-node-3");
  assert.ok(ENROLLABLE_ID.test(sampleNodeId(["*-gpu-*"])));
});

Deno.test("ENROLLABLE_ID takes host-like ids only", () => {
  for (const id of ["gpu-01", "a", "host.lan", "n_1"]) assert.ok(ENROLLABLE_ID.test(id), id);
  for (const id of ["", "-gpu", "gpu/1", "gpu 1", "x".repeat(129), "gpu:1"]) {
    assert.ok(!ENROLLABLE_ID.test(id), id);
  }
});
