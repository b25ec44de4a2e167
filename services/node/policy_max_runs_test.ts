import assert from "node:assert/strict";
import { ConfigReader } from "../../shared/config.ts";
import {
  DEFAULT_MAX_ACTIVE_RUNS,
  DEFAULT_NODE_POLICY,
  maxActiveRuns,
  readNodePolicy,
} from "./policy.ts";

const read = (raw: unknown) => readNodePolicy(new ConfigReader("node.yaml", raw));

Deno.test("policy.max_active_runs defaults to 64 and is read when set", () => {
  assert.equal(DEFAULT_MAX_ACTIVE_RUNS, 64);
  assert.equal(maxActiveRuns(DEFAULT_NODE_POLICY), 64);
  assert.equal(maxActiveRuns(read({ policy: { adapter_kinds: ["cli"] } })), 64);
  const policy = read({ policy: { max_active_runs: 3 } });
  assert.equal(policy.maxActiveRuns, 3);
  assert.equal(maxActiveRuns(policy), 3);
});

Deno.test("policy.max_active_runs below 1 is refused naming the key", () => {
  assert.throws(() => read({ policy: { max_active_runs: 0 } }), {
    name: "ConfigError",
    message: "node.yaml: policy.max_active_runs: must be at least 1: current value is 0",
  });
});
