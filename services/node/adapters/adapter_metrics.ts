/**
 * Metrics the model adapters record: time to first token, tokens by direction, and errors by
 * code, each labelled with the adapter kind only (never a model, run or prompt).
 * @module
 */
import { Counter, Histogram, type Registry } from "prom-client";

/** Where model adapters record what they observe. */
export interface AdapterMetrics {
  /** One run's time from request to first content delta. */
  observeFirstToken(kind: string, seconds: number): void;
  /** Tokens of one run, as the backend counted them. */
  addTokens(kind: string, direction: "input" | "output", count: number): void;
  /** One failed run (cancellations are not failures and are not counted). */
  countError(kind: string, code: string): void;
}

const TTFT = "iop_node_adapter_time_to_first_token_seconds";
const TOKENS = "iop_node_adapter_tokens_total";
const ERRORS = "iop_node_adapter_errors_total";

/**
 * Declares the adapter metrics on `registry`; calling it again with the same registry reuses
 * the metrics already there, so several adapters can each ask for them.
 */
export function createAdapterMetrics(registry: Registry): AdapterMetrics {
  const ttft = (registry.getSingleMetric(TTFT) as Histogram<"adapter_kind"> | undefined) ??
    new Histogram({
      name: TTFT,
      help: "Time from sending a model request to its first content delta.",
      labelNames: ["adapter_kind"] as const,
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers: [registry],
    });
  const tokens =
    (registry.getSingleMetric(TOKENS) as Counter<"adapter_kind" | "direction"> | undefined) ??
      new Counter({
        name: TOKENS,
        help: "Tokens processed by model backends, by direction (input or output).",
        labelNames: ["adapter_kind", "direction"] as const,
        registers: [registry],
      });
  const errors =
    (registry.getSingleMetric(ERRORS) as Counter<"adapter_kind" | "code"> | undefined) ??
      new Counter({
        name: ERRORS,
        help: "Model runs that failed, by IOP error code.",
        labelNames: ["adapter_kind", "code"] as const,
        registers: [registry],
      });
  return {
    observeFirstToken: (kind, seconds) => ttft.observe({ adapter_kind: kind }, seconds),
    addTokens: (kind, direction, count) => {
      if (count > 0) tokens.inc({ adapter_kind: kind, direction }, count);
    },
    countError: (kind, code) => errors.inc({ adapter_kind: kind, code }),
  };
}
