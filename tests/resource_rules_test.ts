/**
 * Seed 004's resource rules across the Edge and its nodes: a direct run on a provider's
 * adapter+target holds that provider's slot in the pool, CLI profiles show in the status with
 * their runs in flight up to each profile's own `max_concurrency`, and a reload with a config the
 * rules forbid keeps the config in force. Real Edge HTTP, node wire and NodeCores.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import type { ResourceStatus, StatusSnapshot } from "../services/edge/ports.ts";
import { mockNode, startStack } from "./stack.ts";
import { until } from "./util.ts";

const SLOW = { tokens: 3, token_delay_ms: 5, start_delay_ms: 400 };

const CONFIG = {
  nodes: [{
    ...mockNode("node-a", { providers: [{ id: "a-demo", group: "demo", max: 1 }] }),
    adapters: [
      { name: "mock", kind: "mock", ...SLOW },
      {
        name: "cli",
        kind: "cli",
        profiles: [{
          name: "slow",
          command: "sh",
          args: ["-c", "sleep 0.4; echo done"],
          max_concurrency: 3,
        }],
      },
    ],
  }],
  models: [
    { name: "demo", route: "pool", queue: { max_length: 4, max_wait_ms: 10_000 } },
    { name: "demo-direct", route: "direct", adapter: "mock", target: "demo" },
    { name: "slow-cli", route: "direct", adapter: "cli", target: "slow" },
  ],
};

async function rows(url: string): Promise<Record<string, [string, number, number]>> {
  const status = await (await fetch(`${url}/api/iop/status`)).json() as StatusSnapshot;
  return Object.fromEntries(
    status.nodes[0]!.resources.map((r: ResourceStatus) => [r.id, [r.kind, r.inFlight, r.queued]]),
  );
}

Deno.test("a direct run holds its provider's pool slot and CLI runs show on their profile", async () => {
  await using stack = await startStack({ http: true, config: CONFIG });
  const client = new OpenAI({ apiKey: "none", baseURL: `${stack.url}/v1`, maxRetries: 0 });
  const ask = (model: string) =>
    client.chat.completions.create({ model, messages: [{ role: "user", content: "go" }] });

  const direct = ask("demo-direct");
  await until(
    "the direct run on a-demo's resource",
    () => stack.service.pools.stats("a-demo").inFlight === 1,
  );
  // The pool sees a-demo (max 1) busy, so its run waits instead of overrunning the provider.
  const pooled = ask("demo");
  await until(
    "the pool run queued behind it",
    () => stack.service.pools.stats("a-demo").queued === 1,
  );
  // CLI runs are never queued: within the profile's limit of 3 the node runs them all at once.
  const cli = [ask("slow-cli"), ask("slow-cli"), ask("slow-cli")];
  await until(
    "three CLI runs in flight",
    () => stack.service.pools.usage("node-a", "cli", "slow") === 3,
  );

  const during = await rows(stack.url);
  assert.deepEqual(during, {
    "a-demo": ["provider", 1, 1],
    "cli/slow": ["profile", 3, 0],
  });

  const answers = await Promise.all([direct, pooled, ...cli]);
  assert.equal(answers.length, 5);
  assert.ok(answers.slice(2).every((a) => a.choices[0]!.message.content?.trim() === "done"));
  assert.deepEqual(await rows(stack.url), {
    "a-demo": ["provider", 0, 0],
    "cli/slow": ["profile", 0, 0],
  });
});

Deno.test("a reload to a config the resource rules forbid keeps the config in force", async () => {
  const dir = await Deno.makeTempDir({ prefix: "iop_resource_rules_" });
  try {
    const file = `${dir}/edge.yaml`;
    await using stack = await startStack({ http: true, config: CONFIG, configFile: file });
    const node = CONFIG.nodes[0]!;
    const bad: [string, Record<string, unknown>, RegExp][] = [
      [
        "cli provider",
        {
          ...CONFIG,
          nodes: [{
            ...node,
            providers: [{ id: "a-cli", adapter: "cli", target: "slow", model_group: "slow" }],
          }],
          models: [{ name: "slow", route: "pool" }],
        },
        /nodes\[0\]\.providers\[0\]\.adapter: 'cli' is a cli adapter; CLI profiles are never queued: expose them with a direct model route/,
      ],
      [
        "max_concurrent_runs",
        { ...CONFIG, nodes: [{ ...node, max_concurrent_runs: 2 }] },
        /nodes\[0\]\.max_concurrent_runs: was removed: .*providers\[\]\.max_concurrency/,
      ],
      [
        "pool model without providers",
        { ...CONFIG, models: [...CONFIG.models, { name: "ghost", route: "pool" }] },
        /models\[3\]\.name: pool model 'ghost' has no provider/,
      ],
    ];
    for (const [what, raw, detail] of bad) {
      await Deno.writeTextFile(file, JSON.stringify(raw));
      const result = await stack.service.reload();
      assert.equal(result.ok, false, what);
      assert.match(result.detail, /^kept the previous config: /, what);
      assert.match(result.detail, detail, what);
    }
    const models = await (await fetch(`${stack.url}/v1/models`)).json() as {
      data: { id: string }[];
    };
    assert.deepEqual(models.data.map((m) => m.id), ["demo", "demo-direct", "slow-cli"]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
