import assert from "node:assert/strict";
import { ADAPTER_KIND_NAMES, kindFeatures } from "./catalog.ts";
import { backendExtras, type RunFeatures, unhonoured } from "./features.ts";

const run = (fields: Partial<RunFeatures> = {}): RunFeatures => ({ messages: [], ...fields });
const features = (kind: string) => kindFeatures(kind)!;

Deno.test("every known adapter kind has a feature entry", () => {
  for (const kind of ADAPTER_KIND_NAMES) assert.ok(kindFeatures(kind), kind);
  assert.equal(kindFeatures("nope"), undefined);
  assert.equal(kindFeatures("toString"), undefined);
});

Deno.test("unhonoured names what each kind cannot do, and passes what it can", () => {
  const json = run({ outputFormat: { type: "json_object" } });
  assert.deepEqual(unhonoured(features("cli"), json), {
    field: "output_format",
    reason: "cannot constrain output to JSON",
  });
  assert.equal(unhonoured(features("mock"), json)?.field, "output_format");
  for (const kind of ["ollama", "vllm", "openai_compat"]) {
    assert.equal(unhonoured(features(kind), json), undefined, kind);
  }
  assert.deepEqual(unhonoured(features("ollama"), run({ toolChoice: "required" })), {
    field: "tool_choice",
    reason: "cannot force a tool call",
  });
  assert.deepEqual(unhonoured(features("ollama"), run({ toolChoice: { function: "f" } })), {
    field: "tool_choice",
    reason: "cannot force a call of the function 'f'",
  });
  assert.equal(unhonoured(features("ollama"), run({ toolChoice: "none" })), undefined);
  assert.equal(unhonoured(features("ollama"), run({ parallelToolCalls: true })), undefined);
  assert.equal(
    unhonoured(features("ollama"), run({ parallelToolCalls: false }))?.field,
    "parallel_tool_calls",
  );
  assert.equal(unhonoured(features("vllm"), run({ toolChoice: "required" })), undefined);
});

Deno.test("a tool result without a call id is refused only for kinds that need one", () => {
  const r = run({
    messages: [{ role: "user", content: "q" }, { role: "tool", content: "a", name: "f" }],
  });
  assert.deepEqual(
    [
      unhonoured(features("openai_compat"), r)?.field,
      unhonoured(features("openai_compat"), r)?.index,
    ],
    ["tool_result", 1],
  );
  assert.equal(unhonoured(features("ollama"), r), undefined);
});

Deno.test("backendExtras maps extras to each backend's names and reports the rest", () => {
  const extra = { top_k: 40, repeat_penalty: 1.1, num_ctx: 4096, presence_penalty: 0.5 };
  assert.deepEqual(backendExtras(features("openai_compat"), extra), {
    extras: { presence_penalty: 0.5 },
    dropped: ["top_k", "repeat_penalty", "num_ctx"],
  });
  assert.deepEqual(backendExtras(features("vllm"), extra), {
    extras: { top_k: 40, repetition_penalty: 1.1, presence_penalty: 0.5 },
    dropped: ["num_ctx"],
  });
  assert.deepEqual(backendExtras(features("ollama"), extra), { extras: extra, dropped: [] });
  assert.deepEqual(backendExtras(features("ollama"), { constructor: 1 }).dropped, ["constructor"]);
});

Deno.test("tools go only to kinds whose backend calls tools; truncate only where it is honoured", () => {
  const tools = run({ tools: [{ name: "f", description: "", parameters: {} }] });
  for (const kind of ["cli", "mock"]) {
    assert.deepEqual(unhonoured(features(kind), tools), {
      field: "tools",
      reason: "calls no tools",
    });
  }
  for (const kind of ["ollama", "vllm", "openai_compat"]) {
    assert.equal(unhonoured(features(kind), tools), undefined, kind);
  }
  const truncate = run({ embed: { inputs: ["a"], truncate: true } });
  assert.equal(unhonoured(features("openai_compat"), truncate)?.field, "truncate");
  for (const kind of ["ollama", "vllm", "mock"]) {
    assert.equal(unhonoured(features(kind), truncate), undefined, kind);
  }
  assert.equal(unhonoured(features("cli"), truncate)?.field, "embed");
});

Deno.test("an embedding run's sampling options go only to kinds whose embeddings API takes them", () => {
  const numCtx = run({ embed: { inputs: ["a"] }, sampling: { extra: { num_ctx: 4096 } } });
  for (const kind of ["vllm", "openai_compat"]) {
    assert.deepEqual(unhonoured(features(kind), numCtx), {
      field: "sampling",
      reason: "cannot pass the option 'num_ctx' to its embeddings API (it has no such field)",
    }, kind);
  }
  const hot = run({ embed: { inputs: ["a"] }, sampling: { temperature: 0.2 } });
  assert.match(unhonoured(features("vllm"), hot)?.reason ?? "", /'temperature'/);
  for (const kind of ["ollama", "mock"]) {
    assert.equal(unhonoured(features(kind), numCtx), undefined, kind);
  }
  // No option set, or a chat run: nothing to refuse.
  const plain = run({ embed: { inputs: ["a"] }, sampling: { stop: [] } });
  assert.equal(unhonoured(features("vllm"), plain), undefined);
  assert.equal(unhonoured(features("vllm"), run({ sampling: { temperature: 0.2 } })), undefined);
});
