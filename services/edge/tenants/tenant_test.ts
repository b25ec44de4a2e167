import assert from "node:assert/strict";
import { ConfigError } from "../../../shared/config.ts";
import { hashSecret } from "../../../shared/secrets.ts";
import { parseEdgeConfig } from "../config.ts";
import { tenantDirectory } from "./directory.ts";
import { matchesPattern, mayUseModel } from "./tenant.ts";

const parse = (raw: Record<string, unknown>) => parseEdgeConfig(raw, "edge.yaml");

Deno.test("an Edge without keys serves everyone as the one unlimited tenant 'anonymous'", () => {
  const { tenants } = parse({});
  assert.deepEqual(tenants.map((t) => [t.name, t.keys, t.models, t.concurrentRuns]), [
    ["anonymous", [], ["*"], 0],
  ]);
  assert.equal(tenantDirectory(tenants).keysRequired, false);
});

Deno.test("tenants are read with their limits; http.api_keys is the tenant 'default'", () => {
  const { tenants } = parse({
    http: { api_keys: ["legacy"] },
    tenants: [{
      name: "research",
      keys: [hashSecret("r-key")],
      models: ["llama*"],
      requests_per_minute: 60,
      tokens_per_minute: 1000,
      concurrent_runs: 2,
      weight: 2.5,
      priority: "high",
      max_queued: 4,
    }],
  });
  const [research, legacy] = tenants;
  assert.deepEqual(
    {
      ...research,
      keys: research!.keys.length,
    },
    {
      name: "research",
      keys: 1,
      models: ["llama*"],
      agents: ["*"],
      requestsPerMinute: 60,
      tokensPerMinute: 1000,
      concurrentRuns: 2,
      weight: 2.5,
      priority: 2,
      maxQueued: 4,
      operator: false,
    },
  );
  assert.equal(legacy!.name, "default");
  assert.equal(legacy!.operator, true, "http.api_keys' tenant reads the operator views");
  const directory = tenantDirectory(tenants);
  assert.equal(directory.identify("r-key")?.name, "research");
  assert.equal(directory.identify("legacy")?.name, "default");
  assert.equal(directory.identify("nope"), undefined);
  assert.equal(directory.identify(""), undefined);
  assert.ok(directory.keysRequired);
});

Deno.test("tenant config errors name the key", () => {
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ tenants: [{ name: "a" }] }, /tenants\[0\]\.keys: must list at least one key/],
    [{ tenants: [{ name: "a b", keys: ["k"] }] }, /tenants\[0\]\.name: must be 1–64 letters/],
    [{ tenants: [{ name: "anonymous", keys: ["k"] }] }, /tenants\[0\]\.name: must be/],
    [
      { tenants: [{ name: "a", keys: ["k1"] }, { name: "a", keys: ["k2"] }] },
      /tenants\[1\]\.name: duplicate tenant name 'a'/,
    ],
    [
      { tenants: [{ name: "a", keys: ["same"] }, { name: "b", keys: [hashSecret("same")] }] },
      /tenants\[1\]\.keys\[0\]: is the same secret as tenants\[0\]\.keys\[0\]/,
    ],
    [
      { http: { api_keys: ["k"] }, tenants: [{ name: "default", keys: ["k2"] }] },
      /tenants\[0\]\.name: 'default' is the tenant http\.api_keys stands for/,
    ],
    [
      { tenants: [{ name: "a", keys: ["k"], weight: 0 }] },
      /tenants\[0\]\.weight: must be at least/,
    ],
    [{ tenants: [{ name: "a", keys: ["k"], priority: "urgent" }] }, /priority: must be one of low/],
    [
      { tenants: [{ name: "a", keys: ["k"], concurrent_runs: 1.5 }] },
      /concurrent_runs: must be a whole number/,
    ],
    [{ tenants: [{ name: "a", keys: ["sha256:zz"] }] }, /tenants\[0\]\.keys\[0\]/],
  ];
  for (const [raw, message] of cases) {
    assert.throws(
      () => parse(raw),
      (err) => err instanceof ConfigError && message.test(err.message),
    );
  }
});

Deno.test("model patterns match names and aliases, with * as a wildcard", () => {
  assert.ok(matchesPattern(["*"], "anything"));
  assert.ok(matchesPattern(["llama*"], "llama3:8b"));
  assert.ok(!matchesPattern(["llama*"], "codellama"));
  assert.ok(matchesPattern(["*coder*"], "qwen-coder-7b"));
  assert.ok(!matchesPattern(["gpt.4"], "gpt-4"), "dots are literal");
  const tenant = parse({ tenants: [{ name: "a", keys: ["k"], models: ["fast"] }] }).tenants[0]!;
  assert.ok(mayUseModel(tenant, { name: "llama3", aliases: ["fast"] }));
  assert.ok(!mayUseModel(tenant, { name: "llama3", aliases: [] }));
});

Deno.test("patterns anchor at both ends, a star may match nothing, and pieces do not overlap", () => {
  const cases: [string, string, boolean][] = [
    ["a*", "a", true],
    ["*a", "a", true],
    ["a*a", "a", false],
    ["a*a", "aa", true],
    ["a**b", "ab", true],
    ["gpu-*-x", "gpu--x", true],
    ["gpu-*-x", "gpu-x", false],
    ["*-*-*-x", "a-b-c-x", true],
    ["*-*-*-x", "a-b-c-xy", false],
    ["*ab*ba*", "aba", false],
    ["*ab*ba*", "abba", true],
    ["n?", "n?", true],
    ["n(1|2)", "n1", false],
  ];
  for (const [pattern, name, expected] of cases) {
    assert.equal(matchesPattern([pattern], name), expected, `${pattern} vs ${name}`);
  }
});

Deno.test("a pattern of many stars against a long name that almost matches answers at once", () => {
  // As a backtracking regular expression (`^.*-.*-.*-.*-.*-x$`) this takes hours.
  const name = "-".repeat(50_000);
  assert.equal(matchesPattern(["*-*-*-*-*-x"], name), false);
  assert.equal(matchesPattern(["*-*-*-*-*-x"], `${name}x`), true);
});
