import assert from "node:assert/strict";
import { ConfigReader } from "../config.ts";
import { cliKind, DEFAULT_CLI_MAX_CONCURRENCY, profileMaxConcurrency } from "./cli.ts";

const parse = (profiles: Record<string, unknown>[]) =>
  cliKind.parse(new ConfigReader("edge.yaml", { profiles }, "nodes[0].adapters[0]"));

Deno.test("a CLI profile's max_concurrency defaults to 2 and is pushed to the node as set", () => {
  const { profiles } = parse([
    { name: "a", command: "sh" },
    { name: "b", command: "sh", max_concurrency: 5 },
  ]);
  assert.equal(DEFAULT_CLI_MAX_CONCURRENCY, 2);
  assert.deepEqual(profiles.map((p) => p.maxConcurrency), [2, 5]);
  const pushed = cliKind.toConfig({ profiles });
  assert.deepEqual(
    (pushed.profiles as Record<string, unknown>[]).map((p) => p.max_concurrency),
    [2, 5],
  );
  // The Node reads the pushed form with the same rule.
  const node = cliKind.parse(new ConfigReader("pushed config", pushed));
  assert.deepEqual(node.profiles.map(profileMaxConcurrency), [2, 5]);
  // A profile built in code without the field has the default limit.
  assert.equal(profileMaxConcurrency({}), 2);
});

Deno.test("a CLI profile's max_concurrency below 1 or fractional is refused naming the key", () => {
  assert.throws(() => parse([{ name: "a", command: "sh", max_concurrency: 0 }]), {
    name: "ConfigError",
    message: "edge.yaml: nodes[0].adapters[0].profiles[0].max_concurrency: must be at least 1: " +
      "current value is 0",
  });
  assert.throws(() => parse([{ name: "a", command: "sh", max_concurrency: 1.5 }]), {
    name: "ConfigError",
    message: "edge.yaml: nodes[0].adapters[0].profiles[0].max_concurrency: must be a whole " +
      "number: current value is 1.5",
  });
});
