/**
 * Asks every connected edge for its status each sample interval, so that the series (and the
 * fleet view) stay current between the reports events trigger. An edge still answering the
 * previous request is not asked again; one that fails to answer is asked at the next tick.
 * @module
 */
import type { EdgeRegistry } from "./registry.ts";

/** Options of {@linkcode startStatusSampler}. */
export interface StatusSamplerOptions {
  registry: Pick<EdgeRegistry, "list" | "refresh">;
  intervalMs: number;
  /** How long one edge may take to answer. */
  timeoutMs: number;
  /** Starts a repeating timer and returns its cancel function; defaults to setInterval. */
  setRepeating?: (tick: () => void, ms: number) => () => void;
}

/** Starts sampling; the returned function stops it. */
export function startStatusSampler(options: StatusSamplerOptions): () => void {
  const asking = new Set<string>();
  const tick = () => {
    for (const view of options.registry.list()) {
      if (!view.connected || asking.has(view.edgeId)) continue;
      asking.add(view.edgeId);
      options.registry.refresh(view.edgeId, options.timeoutMs)
        .catch(() => {
          // Not answering is the link's business (heartbeats); the next tick asks again.
        })
        .finally(() => asking.delete(view.edgeId));
    }
  };
  const repeating = options.setRepeating ?? ((fire, ms) => {
    const timer = setInterval(fire, ms);
    return () => clearInterval(timer);
  });
  return repeating(tick, options.intervalMs);
}
