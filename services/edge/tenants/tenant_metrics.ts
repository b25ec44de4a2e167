/**
 * Prometheus metrics per tenant: admitted and limited requests, tokens of finished runs, runs in
 * flight. The `tenant` label takes only names from the config (plus `default` and `anonymous`),
 * so its cardinality is bounded by the config, never by what clients send.
 * @module
 */
import { Counter, Gauge, type Registry } from "prom-client";

/** What the tenant limiter records into. */
export interface TenantMetrics {
  requests: Counter<"tenant" | "outcome">;
  tokens: Counter<"tenant" | "kind">;
  inFlight: Gauge<"tenant">;
}

/** Declares the tenant metrics in `registry`. */
export function createTenantMetrics(registry: Registry): TenantMetrics {
  const registers = [registry];
  return {
    requests: new Counter({
      name: "iop_edge_tenant_requests_total",
      help:
        "Requests per tenant by outcome (admitted, limited_concurrent_runs, limited_requests_per_minute, limited_tokens_per_minute).",
      labelNames: ["tenant", "outcome"],
      registers,
    }),
    tokens: new Counter({
      name: "iop_edge_tenant_tokens_total",
      help: "Input and output tokens of a tenant's finished runs.",
      labelNames: ["tenant", "kind"],
      registers,
    }),
    inFlight: new Gauge({
      name: "iop_edge_tenant_runs_in_flight",
      help: "Runs a tenant has in flight.",
      labelNames: ["tenant"],
      registers,
    }),
  };
}
