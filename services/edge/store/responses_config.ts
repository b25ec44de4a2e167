/**
 * The Edge config's `responses` section: where and how long stored Responses API responses are
 * kept (`response_store.ts`).
 * @module
 */
import type { ConfigReader } from "../../../shared/config.ts";

/**
 * The `responses` section: where and how long the Edge keeps Responses API responses created
 * with `store` (the default), for `GET /v1/responses/{id}` and `previous_response_id`.
 */
export interface ResponsesConfig {
  /** The SQLite file (default `.iop/<edge id>/responses.db`); read once, at start. */
  storePath: string;
  /** Responses kept at most; the oldest are dropped first. */
  maxStored: number;
  /**
   * Responses one tenant keeps at most (default 1000); that tenant's oldest are dropped first,
   * so one tenant cannot push the others' responses out of `max_stored`.
   */
  maxStoredPerTenant: number;
  /** The JSON bytes all stored responses take at most (default 1 GiB); the oldest go first. */
  maxTotalBytes: number;
  /** How long a response is kept after its creation (default 30 days, as OpenAI). */
  retentionMs: number;
  /**
   * The largest response stored (its input and output items as JSON); a larger one is answered
   * as usual but not stored, and says so with `store: false`.
   */
  maxResponseBytes: number;
}

const DAY_MS = 24 * 60 * 60 * 1000;

/** Reads the `responses` section; the store file defaults to `.iop/<edge id>/responses.db`. */
export function readResponses(r: ConfigReader, edgeId: string): ResponsesConfig {
  const maxResponseBytes = r.number("max_response_bytes", 1024 * 1024, { min: 1024 });
  return {
    storePath: r.nonEmpty("store_path", `.iop/${edgeId}/responses.db`),
    maxStored: r.number("max_stored", 10_000, { min: 1 }),
    maxStoredPerTenant: r.number("max_stored_per_tenant", 1000, { min: 1 }),
    // At least one response's worth, or a response just stored could be dropped at once.
    maxTotalBytes: r.number("max_total_bytes", Math.max(1024 * 1024 * 1024, maxResponseBytes), {
      min: maxResponseBytes,
    }),
    retentionMs: r.number("retention_ms", 30 * DAY_MS, { min: 1000 }),
    maxResponseBytes,
  };
}
