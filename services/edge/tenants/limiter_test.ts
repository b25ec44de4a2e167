import assert from "node:assert/strict";
import { parseEdgeConfig } from "../config.ts";
import { TenantLimiter, TenantLimitError } from "./limiter.ts";

function tenantWith(limits: Record<string, number>) {
  return parseEdgeConfig({ tenants: [{ name: "t", keys: ["k"], ...limits }] }, "edge.yaml")
    .tenants[0]!;
}

function refusal(fn: () => unknown): TenantLimitError {
  try {
    fn();
  } catch (err) {
    if (err instanceof TenantLimitError) return err;
    throw err;
  }
  assert.fail("expected a TenantLimitError");
}

Deno.test("concurrent_runs: the next run is refused until one ends", () => {
  const limiter = new TenantLimiter();
  const tenant = tenantWith({ concurrent_runs: 2 });
  const a = limiter.admit(tenant);
  limiter.admit(tenant);
  const err = refusal(() => limiter.admit(tenant));
  assert.equal(err.limit, "concurrent_runs");
  assert.equal(err.code, "OVERLOADED");
  assert.match(err.message, /already has 2 runs in flight/);
  a.finish();
  a.finish(); // a second finish frees nothing more
  limiter.admit(tenant);
  assert.equal(limiter.inFlight("t"), 2);
  refusal(() => limiter.admit(tenant));
});

Deno.test("requests_per_minute: a burst of one minute's worth, then Retry-After from the rate", () => {
  let now = 0;
  const limiter = new TenantLimiter({ now: () => now });
  const tenant = tenantWith({ requests_per_minute: 6 }); // one every 10 s
  for (let i = 0; i < 6; i++) limiter.admit(tenant).finish();
  const err = refusal(() => limiter.admit(tenant));
  assert.equal(err.limit, "requests_per_minute");
  assert.equal(err.retryAfterSeconds, 10);
  now += 4_000;
  assert.equal(refusal(() => limiter.admit(tenant)).retryAfterSeconds, 6);
  now += 6_000;
  limiter.admit(tenant).finish();
  refusal(() => limiter.admit(tenant));
});

Deno.test("tokens_per_minute: finished runs' tokens are charged; over budget waits to refill", () => {
  let now = 0;
  const limiter = new TenantLimiter({ now: () => now });
  const tenant = tenantWith({ tokens_per_minute: 600 }); // 10 tokens per second
  limiter.admit(tenant).finish({ inputTokens: 500, outputTokens: 400 });
  const err = refusal(() => limiter.admit(tenant));
  assert.equal(err.limit, "tokens_per_minute");
  // 300 tokens in debt, plus one, at 10 per second.
  assert.equal(err.retryAfterSeconds, 31);
  now += 31_000;
  limiter.admit(tenant);
});

Deno.test("a refused request uses up nothing, and tenants do not share limits", () => {
  const limiter = new TenantLimiter();
  const tenant = tenantWith({ concurrent_runs: 1, requests_per_minute: 2 });
  const held = limiter.admit(tenant);
  refusal(() => limiter.admit(tenant)); // concurrency: must not spend a request
  // While "t" is at its limit, another tenant is admitted all the same.
  const other = parseEdgeConfig({ tenants: [{ name: "u", keys: ["k"], concurrent_runs: 1 }] }, "e")
    .tenants[0]!;
  limiter.admit(other);
  assert.equal(limiter.inFlight("u"), 1);
  assert.equal(limiter.inFlight("t"), 1);
  held.finish();
  limiter.admit(tenant).finish(); // the second of two requests per minute still admitted
});

Deno.test("modelsInFlight counts a tenant's runs per model, apart from every other tenant's", () => {
  const limiter = new TenantLimiter();
  const alpha = { ...tenantWith({}), name: "alpha" };
  const beta = { ...tenantWith({}), name: "beta" };
  const first = limiter.admit(alpha, "shared");
  const second = limiter.admit(alpha, "shared");
  limiter.admit(alpha, "own");
  const betas = limiter.admit(beta, "shared");
  limiter.admit(beta); // names no model: counted in flight, on no model
  assert.deepEqual([...limiter.modelsInFlight("alpha")], [["shared", 2], ["own", 1]]);
  assert.deepEqual([...limiter.modelsInFlight("beta")], [["shared", 1]]);
  assert.equal(limiter.inFlight("beta"), 2);
  first.finish();
  second.finish();
  second.finish(); // once only
  assert.deepEqual([...limiter.modelsInFlight("alpha")], [["own", 1]]);
  assert.deepEqual([...limiter.modelsInFlight("beta")], [["shared", 1]]);
  betas.finish();
  assert.deepEqual([...limiter.modelsInFlight("beta")], []);
  assert.deepEqual([...limiter.modelsInFlight("nobody")], []);
});
