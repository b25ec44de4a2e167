/**
 * Per-tenant limits on the Edge: runs in flight, requests per minute and tokens per minute. A
 * request is admitted as a {@linkcode TenantLease} that the run holds until it ends; a request
 * over a limit is refused at once with a {@linkcode TenantLimitError} whose `Retry-After` comes
 * from that limit (when the next request or token budget is back, or an estimate of when a
 * running run ends). Rates are token buckets that refill continuously, so a tenant may burst up
 * to a minute's worth and then runs at its rate. State is kept per tenant name, so a config
 * reload that changes a limit keeps what the tenant already used.
 *
 * The limiter also counts each tenant's runs in flight per public model (the model a lease was
 * admitted for), so a surface can show a tenant its own activity (Ollama's `/api/ps`) and
 * nothing of the other tenants': one map update when a run is admitted and one when it ends.
 * @module
 */
import { OverloadedError } from "../../../shared/errors.ts";
import type { TerminalRunEvent, Usage } from "../../../shared/run.ts";
import type { TenantMetrics } from "./tenant_metrics.ts";
import type { QueueShare, TenantRecord } from "./tenant.ts";

/** Which limit refused a request. */
export type TenantLimit = "concurrent_runs" | "requests_per_minute" | "tokens_per_minute";

/**
 * A tenant is over one of its limits: OVERLOADED with a retry-after; surfaces answer 429 in
 * their own shape (unlike a full pool, which Ollama clients see as "server busy").
 */
export class TenantLimitError extends OverloadedError {
  readonly tenant: string;
  readonly limit: TenantLimit;

  constructor(tenant: string, limit: TenantLimit, message: string, retryAfterSeconds: number) {
    super(message, retryAfterSeconds);
    this.name = "TenantLimitError";
    this.tenant = tenant;
    this.limit = limit;
  }
}

/** An admitted request: its tenant's share of a pool, held until the run ends. */
export interface TenantLease extends QueueShare {
  /** Ends the lease (once; later calls do nothing), charging `usage` to the tenant's tokens. */
  finish(usage?: Usage): void;
}

/** A continuously refilling budget of `perMinute` units that may go below zero. */
class Bucket {
  #level: number;
  #atMs: number;

  constructor(perMinute: number, nowMs: number) {
    this.#level = perMinute;
    this.#atMs = nowMs;
  }

  /** The level now, refilled at `perMinute` up to one minute's worth. */
  level(perMinute: number, nowMs: number): number {
    const refill = ((nowMs - this.#atMs) * perMinute) / 60_000;
    this.#level = Math.min(perMinute, this.#level + refill);
    this.#atMs = nowMs;
    return this.#level;
  }

  take(units: number): void {
    this.#level -= units;
  }

  /** Seconds until the level reaches `needed` at `perMinute` (at least 1). */
  static secondsUntil(level: number, needed: number, perMinute: number): number {
    return Math.max(1, Math.ceil(((needed - level) * 60) / perMinute));
  }
}

/** One tenant's metric children, resolved once (a `labels()` lookup hashes its values). */
interface TenantMeters {
  admitted: { inc(): void };
  inFlight: { set(value: number): void };
  input: { inc(value: number): void };
  output: { inc(value: number): void };
}

interface TenantState {
  inFlight: number;
  /** Runs in flight per public model name; a model leaves the map at zero. */
  models: Map<string, number>;
  meters: TenantMeters | undefined;
  requests: Bucket | undefined;
  tokens: Bucket | undefined;
  /** Smoothed run duration, to tell a tenant at its concurrency limit when to come back. */
  runMs: number;
}

const FIRST_RUN_ESTIMATE_MS = 1_000;

/** The limits of every tenant of one Edge. */
export class TenantLimiter {
  readonly #state = new Map<string, TenantState>();
  readonly #now: () => number;
  readonly #metrics: TenantMetrics | undefined;

  constructor(options: { now?: () => number; metrics?: TenantMetrics } = {}) {
    this.#now = options.now ?? Date.now;
    this.#metrics = options.metrics;
  }

  /** Runs `tenant` has in flight. */
  inFlight(tenant: string): number {
    return this.#state.get(tenant)?.inFlight ?? 0;
  }

  /** The public models `tenant` has runs in flight on now, with how many each. */
  modelsInFlight(tenant: string): ReadonlyMap<string, number> {
    return this.#state.get(tenant)?.models ?? new Map();
  }

  /**
   * Admits one request of `tenant` (for the public `model`, when it names one), or throws
   * {@linkcode TenantLimitError} naming the limit it is over. A refused request uses up nothing.
   */
  admit(tenant: TenantRecord, model = ""): TenantLease {
    const now = this.#now();
    const state = this.#stateOf(tenant.name);
    const refusal = this.#check(tenant, state, now);
    if (refusal) {
      this.#metrics?.requests.labels(tenant.name, `limited_${refusal.limit}`).inc();
      throw refusal;
    }
    if (tenant.requestsPerMinute > 0) {
      (state.requests ??= new Bucket(tenant.requestsPerMinute, now)).take(1);
    }
    state.inFlight++;
    if (model !== "") state.models.set(model, (state.models.get(model) ?? 0) + 1);
    state.meters?.admitted.inc();
    state.meters?.inFlight.set(state.inFlight);
    const startedAt = now;
    let finished = false;
    return {
      name: tenant.name,
      weight: tenant.weight,
      priority: tenant.priority,
      maxQueued: tenant.maxQueued,
      finish: (usage) => {
        if (finished) return;
        finished = true;
        const end = this.#now();
        state.inFlight--;
        if (model !== "") {
          const left = (state.models.get(model) ?? 1) - 1;
          if (left > 0) state.models.set(model, left);
          else state.models.delete(model);
        }
        state.runMs = state.runMs * 0.8 + (end - startedAt) * 0.2;
        state.meters?.inFlight.set(state.inFlight);
        if (!usage) return;
        const spent = usage.inputTokens + usage.outputTokens;
        if (spent > 0 && tenant.tokensPerMinute > 0) {
          (state.tokens ??= new Bucket(tenant.tokensPerMinute, end)).level(
            tenant.tokensPerMinute,
            end,
          );
          state.tokens.take(spent);
        }
        state.meters?.input.inc(usage.inputTokens);
        state.meters?.output.inc(usage.outputTokens);
      },
    };
  }

  #check(tenant: TenantRecord, state: TenantState, now: number): TenantLimitError | undefined {
    const name = tenant.name;
    if (tenant.concurrentRuns > 0 && state.inFlight >= tenant.concurrentRuns) {
      return new TenantLimitError(
        name,
        "concurrent_runs",
        `Tenant '${name}' already has ${state.inFlight} runs in flight, its limit of concurrent runs is ${tenant.concurrentRuns}`,
        Math.max(1, Math.ceil(state.runMs / 1000)),
      );
    }
    const rpm = tenant.requestsPerMinute;
    if (rpm > 0 && state.requests) {
      const level = state.requests.level(rpm, now);
      if (level < 1) {
        return new TenantLimitError(
          name,
          "requests_per_minute",
          `Tenant '${name}' is over its limit of ${rpm} requests per minute`,
          Bucket.secondsUntil(level, 1, rpm),
        );
      }
    }
    const tpm = tenant.tokensPerMinute;
    if (tpm > 0 && state.tokens) {
      const level = state.tokens.level(tpm, now);
      if (level <= 0) {
        return new TenantLimitError(
          name,
          "tokens_per_minute",
          `Tenant '${name}' is over its limit of ${tpm} tokens per minute`,
          Bucket.secondsUntil(level, 1, tpm),
        );
      }
    }
    return undefined;
  }

  #stateOf(name: string): TenantState {
    let state = this.#state.get(name);
    if (!state) {
      const m = this.#metrics;
      const meters = m && {
        admitted: m.requests.labels(name, "admitted"),
        inFlight: m.inFlight.labels(name),
        input: m.tokens.labels(name, "input"),
        output: m.tokens.labels(name, "output"),
      };
      state = {
        inFlight: 0,
        models: new Map(),
        meters,
        requests: undefined,
        tokens: undefined,
        runMs: FIRST_RUN_ESTIMATE_MS,
      };
      this.#state.set(name, state);
    }
    return state;
  }
}

/**
 * Holds `lease` for the life of the run `started` dispatches: ends it with the run's usage when
 * the run ends, or at once when the run could not start. Returns `started`.
 */
export function holdLease<H extends { done: Promise<TerminalRunEvent> }>(
  lease: TenantLease,
  started: Promise<H>,
): Promise<H> {
  return started.then(
    (handle) => {
      void handle.done.then((end) =>
        lease.finish(end.type === "completed" ? end.usage : undefined)
      );
      return handle;
    },
    (err) => {
      lease.finish();
      throw err;
    },
  );
}
