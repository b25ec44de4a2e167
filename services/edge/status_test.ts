import assert from "node:assert/strict";
import { parseEdgeConfig } from "./config.ts";
import type { NodeSession } from "./nodes/registry.ts";
import { buildStatusSnapshot } from "./status.ts";

const config = parseEdgeConfig({
  nodes: [
    {
      id: "cat",
      alias: "gpu",
      token: "t1",
      adapters: [
        { name: "llm", kind: "vllm", base_url: "http://127.0.0.1:1" },
        { name: "mock", kind: "mock" },
      ],
      providers: [
        { id: "p-big", adapter: "llm", target: "big", model_group: "chat", max_concurrency: 2 },
        { id: "p-small", adapter: "llm", target: "small", model_group: "chat" },
        { id: "p-mock", adapter: "mock", target: "demo", model_group: "demo" },
      ],
    },
    {
      id: "plain",
      token: "t2",
      adapters: [
        { name: "mock", kind: "mock" },
        { name: "cli", kind: "cli", enabled: false },
      ],
    },
  ],
}, "edge.yaml");

const session = (extra: Partial<NodeSession>): NodeSession => ({
  id: "cat",
  alias: "gpu",
  record: config.nodes[0]!,
  link: {
    run: () => Promise.resolve(),
    cancel: () => {},
    ack: () => {},
    command: () => Promise.reject(new Error("unused")),
    close: () => {},
  },
  version: "9.9",
  hostname: "box",
  connectedAtMs: 100,
  lastSeenMs: 200,
  inFlight: 3,
  draining: true,
  adapters: [],
  wantedConfigVersion: 1,
  configVersion: 1,
  ...extra,
});

function snapshot() {
  return buildStatusSnapshot({
    edgeId: "e1",
    version: "1.0",
    startedAtMs: 5,
    runsInFlight: 3,
    records: config.nodes,
    sessions: [session({})],
    providerStats: (id) => id === "p-big" ? { inFlight: 2, queued: 4 } : { inFlight: 0, queued: 0 },
  });
}

Deno.test("a node with a provider catalog lists its providers, not its adapters", () => {
  const cat = snapshot().nodes[0]!;
  assert.deepEqual(cat.resources.map((r) => [r.kind, r.id, r.adapter, r.adapterKind, r.target]), [
    ["provider", "p-big", "llm", "vllm", "big"],
    ["provider", "p-small", "llm", "vllm", "small"],
    ["provider", "p-mock", "mock", "mock", "demo"],
  ]);
});

Deno.test("per-provider live stats and limits appear on their own provider only", () => {
  const [big, small] = snapshot().nodes[0]!.resources;
  assert.deepEqual([big?.inFlight, big?.queued, big?.maxConcurrency, big?.modelGroup], [
    2,
    4,
    2,
    "chat",
  ]);
  assert.deepEqual([small?.inFlight, small?.queued, small?.maxConcurrency], [0, 0, 1]);
});

Deno.test("a node without a catalog lists its adapters, disabled ones marked", () => {
  const plain = snapshot().nodes[1]!;
  assert.deepEqual(plain.resources.map((r) => [r.kind, r.id, r.adapterKind, r.enabled]), [
    ["adapter", "mock", "mock", true],
    ["adapter", "cli", "cli", false],
  ]);
});

Deno.test("no resource appears twice in the snapshot", () => {
  const keys = snapshot().nodes.flatMap((n) =>
    n.resources.map((r) => `${n.id}/${r.adapter}/${r.target}`)
  );
  assert.equal(new Set(keys).size, keys.length);
  const ids = snapshot().nodes.flatMap((n) => n.resources.map((r) => `${n.id}/${r.id}`));
  assert.equal(new Set(ids).size, ids.length);
});

Deno.test("every configured node appears; connection facts come from its session", () => {
  const s = snapshot();
  assert.deepEqual([s.edgeId, s.version, s.startedAtMs, s.runsInFlight], ["e1", "1.0", 5, 3]);
  const [cat, plain] = s.nodes;
  assert.deepEqual(
    [cat?.connected, cat?.draining, cat?.version, cat?.hostname, cat?.inFlight, cat?.lastSeenMs],
    [true, true, "9.9", "box", 3, 200],
  );
  assert.deepEqual(
    [plain?.connected, plain?.draining, plain?.version, plain?.inFlight, plain?.connectedAtMs],
    [false, false, "", 0, 0],
  );
});

Deno.test("without provider stats the providers report zero load", () => {
  const s = buildStatusSnapshot({
    edgeId: "e1",
    version: "1.0",
    startedAtMs: 0,
    runsInFlight: 0,
    records: config.nodes,
    sessions: [],
  });
  assert.ok(s.nodes[0]!.resources.every((r) => r.inFlight === 0 && r.queued === 0));
});

Deno.test("a resource whose adapter the connected node refused carries the node's reason", () => {
  const why =
    "base_url: host 'gpu:8000' is not allowed on this node (policy.backend_hosts allows none)";
  const s = buildStatusSnapshot({
    edgeId: "e1",
    version: "1.0",
    startedAtMs: 0,
    runsInFlight: 0,
    records: config.nodes,
    sessions: [
      session({ adapters: ["mock"], refused: { llm: why } }),
      session({ id: "plain", alias: "", record: config.nodes[1]!, refused: { mock: "no" } }),
    ],
  });
  const [cat, plain] = s.nodes;
  assert.deepEqual(cat!.resources.map((r) => [r.id, r.refused]), [
    ["p-big", why],
    ["p-small", why],
    ["p-mock", ""],
  ]);
  assert.deepEqual(plain!.resources.map((r) => [r.id, r.refused]), [["mock", "no"], ["cli", ""]]);
});

Deno.test("before a node reports, or while it is offline, nothing is marked refused", () => {
  const offline = snapshot().nodes[1]!;
  assert.ok(offline.resources.every((r) => r.refused === ""));
  const unreported = snapshot().nodes[0]!;
  assert.ok(unreported.resources.every((r) => r.refused === ""));
});

/** A node with a provider catalog, CLI profiles and an HTTP adapter no provider uses. */
const mixed = parseEdgeConfig({
  nodes: [{
    id: "mix",
    token: "t3",
    adapters: [
      { name: "mock", kind: "mock" },
      {
        name: "shell",
        kind: "cli",
        profiles: [{ name: "echo", command: "sh" }, { name: "build", command: "sh" }],
      },
      { name: "side", kind: "ollama", base_url: "http://127.0.0.1:1" },
    ],
    providers: [{ id: "p-demo", adapter: "mock", target: "demo", model_group: "demo" }],
  }],
}, "edge.yaml");

function mixedSnapshot(usage: Record<string, number>, refused?: Record<string, string>) {
  return buildStatusSnapshot({
    edgeId: "e1",
    version: "1.0",
    startedAtMs: 0,
    runsInFlight: 0,
    records: mixed.nodes,
    sessions: [
      session({ id: "mix", alias: "", record: mixed.nodes[0]!, ...(refused ? { refused } : {}) }),
    ],
    providerStats: (id) => ({ inFlight: id === "p-demo" ? 1 : 0, queued: 0 }),
    resourceUsage: (node, adapter, target) =>
      node !== "mix"
        ? 0
        : target === undefined
        ? Object.entries(usage).filter(([k]) => k.startsWith(`${adapter}/`)).reduce(
          (sum, [, n]) => sum + n,
          0,
        )
        : usage[`${adapter}/${target}`] ?? 0,
  });
}

Deno.test("a node with a provider catalog still lists its CLI profiles and unused adapters", () => {
  const [mix] = mixedSnapshot({}).nodes;
  assert.deepEqual(mix!.resources.map((r) => [r.kind, r.id, r.adapter, r.adapterKind, r.target]), [
    ["provider", "p-demo", "mock", "mock", "demo"],
    ["profile", "shell/echo", "shell", "cli", "echo"],
    ["profile", "shell/build", "shell", "cli", "build"],
    ["adapter", "side", "side", "ollama", ""],
  ]);
  assert.deepEqual(mix!.resources.map((r) => r.maxConcurrency), [1, 2, 2, 0]);
});

Deno.test("profile and adapter rows show the runs in flight on them, not a constant 0", () => {
  const [mix] = mixedSnapshot({ "shell/echo": 2, "side/llama": 1, "side/qwen": 2 }).nodes;
  assert.deepEqual(mix!.resources.map((r) => [r.id, r.inFlight, r.queued]), [
    ["p-demo", 1, 0],
    ["shell/echo", 2, 0],
    ["shell/build", 0, 0],
    ["side", 3, 0],
  ]);
});

Deno.test("every profile row of a refused CLI adapter carries the node's reason", () => {
  const why =
    "profiles[0].command: 'sh' is not allowed on this node (policy.cli.commands allows: )";
  const [mix] = mixedSnapshot({}, { shell: why }).nodes;
  assert.deepEqual(mix!.resources.map((r) => [r.id, r.refused]), [
    ["p-demo", ""],
    ["shell/echo", why],
    ["shell/build", why],
    ["side", ""],
  ]);
});
