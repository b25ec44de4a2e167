import assert from "node:assert/strict";
import { IopError } from "../../shared/errors.ts";
import { runInput } from "../../shared/run.ts";
import { parseEdgeConfig } from "./config.ts";
import { NodeStore } from "./nodes/node_store.ts";
import type { NodeSession } from "./nodes/registry.ts";
import type { NodeLink, RunSubmission } from "./ports.ts";
import { offers, pickNode } from "./routing.ts";

const config = parseEdgeConfig({
  nodes: [
    {
      id: "a",
      alias: "alpha",
      token: "ta",
      adapters: [
        { name: "mock", kind: "mock" },
        { name: "cli", kind: "cli", profiles: [{ name: "echo", command: "echo" }] },
      ],
    },
    {
      id: "b",
      token: "tb",
      adapters: [
        { name: "mock", kind: "mock" },
        { name: "cli", kind: "cli", enabled: false, profiles: [{ name: "echo", command: "echo" }] },
        { name: "llm", kind: "vllm", base_url: "http://127.0.0.1:1", models: ["m1"] },
      ],
    },
    { id: "c", token: "tc", adapters: [{ name: "any", kind: "openai_compat", base_url: "x" }] },
  ],
}, "edge.yaml");
const store = new NodeStore(config.nodes);
const link: NodeLink = {
  run: () => Promise.resolve(),
  cancel: () => {},
  ack: () => {},
  command: () => Promise.reject(new Error("unused")),
  close: () => {},
};

function connect(id: string, extra: Partial<NodeSession> = {}): NodeSession {
  const record = store.byName(id)!;
  return {
    id,
    alias: record.alias,
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
    ...extra,
  };
}

const sub = (adapter: string, target: string, node?: string): RunSubmission => ({
  ...runInput({ adapter, target }),
  ...(node ? { node } : {}),
});

function code(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof IopError);
    return `${err.code}: ${err.message}`;
  }
  return "no error";
}

Deno.test("offers() follows enabled adapters, CLI profiles and declared models", () => {
  const [a, b, c] = config.nodes as [
    typeof config.nodes[0],
    typeof config.nodes[0],
    typeof config.nodes[0],
  ];
  assert.equal(offers(a, "mock", "anything"), true);
  assert.equal(offers(a, "cli", "echo"), true);
  assert.equal(offers(a, "cli", "rm"), false);
  assert.equal(offers(b, "cli", "echo"), false, "disabled adapter");
  assert.equal(offers(b, "llm", "m1"), true);
  assert.equal(offers(b, "llm", "m2"), false);
  assert.equal(offers(c, "any", "whatever"), true, "no declared models: backend decides");
  assert.equal(offers(a, "nope", "x"), false);
});

Deno.test("a CLI profile goes to the only connected node that has it enabled", () => {
  const sessions = [connect("b"), connect("a", { inFlight: 5 })];
  assert.equal(pickNode(sessions, store, sub("cli", "echo")).id, "a");
});

Deno.test("the least-loaded eligible node wins", () => {
  const sessions = [connect("a", { inFlight: 2 }), connect("b", { inFlight: 1 })];
  assert.equal(pickNode(sessions, store, sub("mock", "x")).id, "b");
});

Deno.test("equally loaded nodes take turns", () => {
  const sessions = [connect("a"), connect("b")];
  const picks = new Set(
    Array.from({ length: 4 }, () => pickNode(sessions, store, sub("mock", "x")).id),
  );
  assert.deepEqual([...picks].sort(), ["a", "b"]);
});

Deno.test("a draining node gets no new runs", () => {
  const sessions = [connect("a", { draining: true }), connect("b", { inFlight: 9 })];
  assert.equal(pickNode(sessions, store, sub("mock", "x")).id, "b");
  assert.match(
    code(() => pickNode([connect("a", { draining: true })], store, sub("cli", "echo"))),
    /^UNAVAILABLE: No connected node can run adapter 'cli' with target 'echo' now/,
  );
});

Deno.test("a run pinned by alias goes to that node", () => {
  const sessions = [connect("a", { inFlight: 9 }), connect("b")];
  assert.equal(pickNode(sessions, store, sub("mock", "x", "alpha")).id, "a");
});

Deno.test("a configured but disconnected target is UNAVAILABLE, an unknown one NOT_FOUND", () => {
  assert.match(code(() => pickNode([], store, sub("cli", "echo"))), /^UNAVAILABLE: /);
  assert.equal(
    code(() => pickNode([connect("a")], store, sub("cli", "rm"))),
    "NOT_FOUND: No node offers adapter 'cli' with target 'rm'",
  );
});

Deno.test("a pinned run names what is wrong: unknown, offline, or not offered", () => {
  assert.equal(
    code(() => pickNode([connect("a")], store, sub("mock", "x", "zz"))),
    "NOT_FOUND: Cannot find node 'zz'",
  );
  assert.equal(
    code(() => pickNode([connect("a")], store, sub("mock", "x", "b"))),
    "UNAVAILABLE: Cannot run on node 'b' as it is not connected",
  );
  assert.equal(
    code(() => pickNode([connect("b")], store, sub("cli", "echo", "b"))),
    "NOT_FOUND: Node 'b' offers no adapter 'cli' with target 'echo'",
  );
});
