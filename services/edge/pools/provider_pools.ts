/**
 * Provider pools: a model group's providers across nodes, each with its own concurrency limit
 * and in-flight/queued accounting. A run goes to the least-loaded eligible provider; when all
 * are full it waits in the pool's bounded queue (length and wait time), fair across tenants
 * (`fair_queue.ts`: FIFO per tenant, turns by weight and priority class). A full queue answers
 * OVERLOADED at once instead of growing — unless the newcomer's tenant has fewer runs waiting
 * for its weight than the heaviest tenant, whose newest waiter then gives up its place — and
 * `Retry-After` estimates when the caller's turn would come from the pool's drain rate. When no
 * node serving the pool is connected and accepting runs (a node restarting or being replaced, an
 * Edge whose nodes are still dialing in), a request waits in the same queue for one to connect,
 * for at most the pool's `queue.wait_for_provider_ms`, then fails UNAVAILABLE (503, retryable).
 * Only pool routes queue here: CLI and direct routes never do, but a direct run on a provider's adapter+target still holds one of that
 * provider's slots ({@linkcode ProviderPools.dispatchDirect}), and every run is counted against
 * the node resource it uses ({@linkcode ProviderPools.usage}) for the status.
 * @module
 */
import { IopError, OverloadedError, toIopError } from "../../../shared/errors.ts";
import type { Logger } from "../../../shared/log.ts";
import type { EdgeConfig, ProviderRecord } from "../config.ts";
import type { NodeSession } from "../nodes/registry.ts";
import type { RunHandle, RunSubmission, SubmitOptions } from "../ports.ts";
import { type Candidate, candidatesOf, noProviderConnected, providersOf } from "./candidates.ts";
import type { PoolMetrics } from "./pool_metrics.ts";
import { PooledRun } from "./pooled_run.ts";
import { FairQueue } from "./fair_queue.ts";
import { traceIdOf } from "../../../shared/trace_context.ts";
import { currentTrace, startSpan, type TraceSpan } from "../../../shared/tracing.ts";
import { PRIORITY_CLASSES, type QueueShare } from "../tenants/tenant.ts";

/** Queue limits of one pool. */
interface QueueLimits {
  maxLength: number;
  maxWaitMs: number;
  /** How long a request waits for a provider to connect when none is; 0 = fail at once. */
  waitForProviderMs: number;
}

/** Queue limits of a model group without a `models` entry. */
const DEFAULT_QUEUE: QueueLimits = { maxLength: 64, maxWaitMs: 30_000, waitForProviderMs: 10_000 };

/** The share of runs without a tenant: the Edge's own (console, domain agents). */
const EDGE_SHARE: QueueShare = {
  name: "",
  weight: 1,
  priority: PRIORITY_CLASSES.indexOf("normal"),
  maxQueued: 0,
};

/**
 * The error an aborted admission rejects with: CANCELLED (TIMEOUT for a timeout signal), so a
 * caller that aborted with a custom reason does not see its abort reported as a failure.
 */
function abortError(signal: AbortSignal): IopError {
  return toIopError(signal.reason, "CANCELLED");
}

/** What the pools need from the service layer. */
export interface PoolDeps {
  config: () => EdgeConfig;
  sessions: () => readonly NodeSession[];
  /** Sends a run to a chosen node (the service's `dispatch`). */
  dispatch: (
    session: NodeSession,
    submission: RunSubmission,
    options: SubmitOptions,
  ) => Promise<RunHandle>;
  logger: Logger;
  now?: () => number;
  /** Where admissions, queue waits and provider load are recorded; absent = not recorded. */
  metrics?: PoolMetrics;
}

/** One request for a provider of a pool: what to run, and on which nodes it may not run. */
interface Admission {
  group: string;
  submission: RunSubmission;
  options: SubmitOptions;
  /** Connections to skip (the one a retried run failed on). */
  exclude: ReadonlySet<NodeSession>;
}

interface Waiter extends Admission {
  /** The tenant lane this waiter waits in. */
  share: QueueShare;
  /** Provider whose queued count this waiter is accounted to; none while no provider is. */
  preferred: string | undefined;
  enqueuedAtMs: number;
  /** The wait's span (`iop.queue`) while tracing is on; ends when the waiter leaves. */
  span: TraceSpan | undefined;
  resolve: (handle: RunHandle) => void;
  reject: (err: unknown) => void;
  cleanup: () => void;
}

/** Live counters of one provider. */
export interface ProviderCounters {
  inFlight: number;
  queued: number;
}

/** The provider pools of one Edge. */
export class ProviderPools {
  readonly #deps: PoolDeps;
  readonly #now: () => number;
  readonly #counters = new Map<string, ProviderCounters>();
  readonly #queues = new Map<string, FairQueue<Waiter>>();
  /** Smoothed run duration per pool, for the pool's drain rate in `Retry-After`. */
  readonly #runMs = new Map<string, number>();
  /** Runs in flight per node resource, pool and direct alike, keyed by {@linkcode usageKey}. */
  readonly #usage = new Map<string, number>();
  readonly #metrics: PoolMetrics | undefined;
  /** The connection each pool attempt was sent on, so that a retry skips exactly that one. */
  readonly #sentOn = new WeakMap<RunHandle, NodeSession>();

  constructor(deps: PoolDeps) {
    this.#deps = deps;
    this.#now = deps.now ?? Date.now;
    this.#metrics = deps.metrics;
  }

  /** In-flight and queued counts of a provider (zeros for an idle or unknown one). */
  stats(providerId: string): ProviderCounters {
    const c = this.#counters.get(providerId);
    return { inFlight: c?.inFlight ?? 0, queued: c?.queued ?? 0 };
  }

  /**
   * Forgets the counters and metric series of providers the config in force no longer has (an
   * enrolled node's record went, a reload removed them), so that they do not pile up as nodes
   * enroll and go; one with runs in flight or queued stays until a later call finds it idle.
   * The service calls it at every config snapshot change.
   */
  forgetRemovedProviders(): void {
    const known = new Set(this.#deps.config().nodes.flatMap((n) => n.providers.map((p) => p.id)));
    for (const [id, c] of this.#counters) {
      if (known.has(id) || c.inFlight > 0 || c.queued > 0) continue;
      this.#counters.delete(id);
      this.#metrics?.providerInFlight.remove(id);
      this.#metrics?.providerQueued.remove(id);
    }
  }

  /**
   * Runs in flight on node `nodeId`'s adapter `adapter` — on `target` only, when given —
   * whether a pool or a direct route started them.
   */
  usage(nodeId: string, adapter: string, target?: string): number {
    if (target !== undefined) return this.#usage.get(usageKey(nodeId, adapter, target)) ?? 0;
    const prefix = usageKey(nodeId, adapter, "");
    let sum = 0;
    for (const [key, n] of this.#usage) if (key.startsWith(prefix)) sum += n;
    return sum;
  }

  /**
   * Sends a direct run (a CLI profile, a pinned run) to the node routing chose. It is never
   * queued nor refused here, but when that node has a provider for the same adapter+target the
   * run holds one of that provider's slots until it ends, so pool runs see the resource busy.
   */
  dispatchDirect(
    session: NodeSession,
    submission: RunSubmission,
    options: SubmitOptions = {},
  ): Promise<RunHandle> {
    const provider = session.record.providers.find((p) =>
      p.adapter === submission.adapter && p.target === submission.target
    );
    return this.#send(session, submission, options, provider);
  }

  /** Requests waiting in the queue of `group`. */
  queueDepth(group: string): number {
    return this.#queues.get(group)?.size ?? 0;
  }

  /**
   * Runs `submission` on a provider of `group`: at once when one has a free slot and nobody
   * waits, else after waiting in the pool's queue (also for a provider to connect, when none
   * is). Rejects with NOT_FOUND for a group with no providers, UNAVAILABLE when none is
   * connected within `wait_for_provider_ms` (at once when a connected one is unusable),
   * OVERLOADED ({@linkcode OverloadedError}) when the queue is full or the wait runs out.
   */
  submit(
    group: string,
    submission: RunSubmission,
    options: SubmitOptions = {},
  ): Promise<RunHandle> {
    // A run that never ran (its node lost it before any output, or its link could not take it
    // as it was closing: dispatch then hands back the run already failed) goes, once, to
    // another provider instead of failing. Only the caller still waiting for the run hears that
    // a replacement queues; one that has its run already is not called back later.
    let handedOut = false;
    const onQueued = options.onQueued;
    const retryOptions: SubmitOptions = onQueued
      ? {
        ...options,
        onQueued: (position) => {
          if (!handedOut) onQueued(position);
        },
      }
      : options;
    return this.#acquire({ group, submission, options, exclude: new Set() }).then(async (first) => {
      const run = new PooledRun(first, (failed, reason, cancelled) => {
        this.#metrics?.admissions.labels(group, "retried").inc();
        this.#deps.logger.warn("pool run never ran on its node; retrying", {
          pool: group,
          node_id: failed.nodeId,
          code: reason.type === "failed" ? reason.code : reason.type,
          err: reason.type === "failed" ? reason.message : "",
          trace_id: traceIdOf(submission.traceParent),
        });
        const skip = this.#sentOn.get(failed);
        // `cancelled` fires only while the retry waits for a provider; PooledRun itself cancels
        // a retry that was already dispatched.
        const signal = options.signal ? AbortSignal.any([options.signal, cancelled]) : cancelled;
        return this.#acquire({
          group,
          submission,
          options: { ...retryOptions, signal },
          exclude: new Set(skip ? [skip] : []),
        });
      });
      await run.settled;
      handedOut = true;
      return run;
    });
  }

  #acquire(admission: Admission): Promise<RunHandle> {
    const { group, submission, options, exclude } = admission;
    const signal = options.signal;
    if (signal?.aborted) return Promise.reject(abortError(signal));
    const config = this.#deps.config();
    // A group only enrollment templates serve exists; its nodes have not joined yet.
    if (
      providersOf(config.nodes, group).length === 0 &&
      !config.enrollment.some((r) => r.sample.providers.some((p) => p.modelGroup === group))
    ) {
      return Promise.reject(new IopError("NOT_FOUND", `Cannot find model group '${group}'`));
    }
    const limits = this.#limits(group);
    const candidates = candidatesOf(this.#deps.sessions(), group, exclude);
    // With no node of the pool connected and accepting runs, one is probably on its way (a
    // restart, a rolling update, a new Edge): wait for it in the queue. A connected node whose
    // adapter is unusable is a backend problem, answered at once.
    if (
      candidates.length === 0 &&
      (limits.waitForProviderMs === 0 ||
        !noProviderConnected(this.#deps.sessions(), group, exclude))
    ) {
      return Promise.reject(
        new IopError("UNAVAILABLE", `No provider of model group '${group}' is connected now`),
      );
    }
    // Capacity can appear without a run finishing (a node connects or stops draining): the
    // waiters take it first, in their fair order, before this newcomer is considered.
    this.#pump(group);
    const queue = this.#queueOf(group);
    const free = this.#freeFor(candidates, options);
    if (free && queue.size === 0) {
      this.#metrics?.admissions.labels(group, "dispatched").inc();
      // Not queued: a point on the request's span instead of a span of its own.
      currentTrace()?.span?.event("iop.pool.admitted", { "iop.pool": group });
      return this.#start(free, submission, options);
    }
    const share = options.tenant ?? EDGE_SHARE;
    const refusal = this.#roomFor(group, queue, share, limits, candidates);
    if (refusal) {
      this.#metrics?.admissions.labels(group, "rejected_full").inc();
      return Promise.reject(refusal);
    }
    return this.#enqueue(admission, share, candidates, limits);
  }

  /**
   * Makes room in a pool's queue for one more waiter of `share`, or returns why there is none:
   * the tenant's own `max_queued` is reached, or the queue is full and no other tenant holds
   * more waiters for its weight (that tenant's newest waiter is displaced otherwise).
   */
  #roomFor(
    group: string,
    queue: FairQueue<Waiter>,
    share: QueueShare,
    limits: QueueLimits,
    candidates: Candidate[],
  ): OverloadedError | undefined {
    const retryAfter = () => this.#retryAfter(group, queue, share, limits, candidates);
    const own = queue.countOf(share.name);
    if (share.maxQueued > 0 && own >= share.maxQueued) {
      return new OverloadedError(
        `Cannot queue for model group '${group}' as tenant '${share.name}' already has ${own} runs waiting, its max_queued`,
        retryAfter(),
      );
    }
    if (queue.size < limits.maxLength) return undefined;
    const heaviest = queue.heaviest();
    if (heaviest && heaviest.tenant !== share.name && heaviest.load > (own + 1) / share.weight) {
      const displaced = heaviest.newest;
      displaced.span?.set({ "iop.queue.outcome": "displaced" });
      this.#remove(displaced);
      this.#metrics?.admissions.labels(group, "displaced").inc();
      displaced.reject(
        new OverloadedError(
          `Cannot keep waiting on model group '${group}': its queue is full and tenant '${heaviest.tenant}' holds more than its share of it`,
          this.#retryAfter(group, queue, displaced.share, limits, candidates),
        ),
      );
      return undefined;
    }
    return new OverloadedError(
      `Cannot queue for model group '${group}' as its queue is full: ${queue.size} of ${limits.maxLength} waiting`,
      retryAfter(),
    );
  }

  /**
   * Seconds until a new waiter of `share` would likely be admitted: the runs ahead of it
   * (`FairQueue.ahead`) over the pool's drain rate (its providers' slots per smoothed run
   * duration), at most the queue's wait limit; before any run finished, a share of that limit.
   */
  #retryAfter(
    group: string,
    queue: FairQueue<Waiter>,
    share: QueueShare,
    limits: QueueLimits,
    candidates: Candidate[],
  ): number {
    const ceiling = Math.max(1, Math.ceil(limits.maxWaitMs / 1000));
    const runMs = this.#runMs.get(group);
    const slots = candidates.reduce((sum, c) => sum + c.provider.maxConcurrency, 0);
    if (runMs === undefined || slots === 0) {
      return Math.max(1, Math.ceil(limits.maxWaitMs / 1000 / Math.max(1, limits.maxLength)));
    }
    const seconds = Math.ceil(((queue.ahead(share) + 1) * runMs) / slots / 1000);
    return Math.min(ceiling, Math.max(1, seconds));
  }

  #queueOf(group: string): FairQueue<Waiter> {
    let queue = this.#queues.get(group);
    if (!queue) {
      queue = new FairQueue();
      this.#queues.set(group, queue);
    }
    return queue;
  }

  #enqueue(
    admission: Admission,
    share: QueueShare,
    candidates: Candidate[],
    limits: QueueLimits,
  ): Promise<RunHandle> {
    const { group, options } = admission;
    const { maxWaitMs, waitForProviderMs } = limits;
    const { promise, resolve, reject } = Promise.withResolvers<RunHandle>();
    const preferred = this.#leastLoaded(candidates, false)?.provider.id;
    const signal = options.signal;
    const onAbort = () => {
      if (this.#remove(waiter)) reject(abortError(signal!));
    };
    const noneWithin = (ms: number) =>
      new IopError(
        "UNAVAILABLE",
        `Cannot run on model group '${group}' as no provider of it connected within ${ms} ms`,
      );
    const timer = setTimeout(() => {
      waiter.span?.set({ "iop.queue.outcome": "timeout" });
      if (!this.#remove(waiter)) return;
      if (this.#noCandidate(waiter)) {
        this.#metrics?.admissions.labels(group, "rejected_no_provider").inc();
        reject(noneWithin(maxWaitMs));
        return;
      }
      this.#metrics?.admissions.labels(group, "rejected_timeout").inc();
      reject(
        new OverloadedError(
          `Cannot run on model group '${group}' as no provider freed up within ${maxWaitMs} ms`,
          Math.max(1, Math.ceil(maxWaitMs / 1000)),
        ),
      );
    }, maxWaitMs);
    // Waiting for a provider to connect is bounded apart; once one did, the run waits on for a
    // free slot like any other waiter.
    const providerTimer = candidates.length === 0 && waitForProviderMs < maxWaitMs
      ? setTimeout(() => {
        if (!this.#noCandidate(waiter)) return;
        waiter.span?.set({ "iop.queue.outcome": "no_provider" });
        if (!this.#remove(waiter)) return;
        this.#metrics?.admissions.labels(group, "rejected_no_provider").inc();
        reject(noneWithin(waitForProviderMs));
      }, waitForProviderMs)
      : undefined;
    const waiter: Waiter = {
      ...admission,
      share,
      preferred,
      enqueuedAtMs: this.#now(),
      span: startSpan("iop.queue", {
        parent: admission.submission.traceParent,
        state: admission.submission.traceState,
        attributes: {
          "iop.pool": group,
          "iop.tenant": share.name || undefined,
          "iop.provider": preferred,
          "iop.queue.waiting_for_provider": preferred === undefined || undefined,
        },
      }),
      resolve,
      reject,
      cleanup: () => {
        clearTimeout(timer);
        clearTimeout(providerTimer);
        signal?.removeEventListener("abort", onAbort);
      },
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    const queue = this.#queueOf(group);
    queue.push(share, waiter);
    if (preferred !== undefined) this.#counter(preferred).queued++;
    options.onQueued?.(() => queue.positionOf(share.name, waiter));
    this.#metrics?.admissions.labels(group, "queued").inc();
    this.#gauges(group, preferred);
    return promise;
  }

  /** True when no provider could take `waiter`'s run now, free or busy. */
  #noCandidate(waiter: Waiter): boolean {
    return candidatesOf(this.#deps.sessions(), waiter.group, waiter.exclude).length === 0;
  }

  /** Takes a waiter out of its queue; false when it already left. */
  #remove(waiter: Waiter): boolean {
    if (!this.#queues.get(waiter.group)?.remove(waiter.share.name, waiter)) return false;
    this.#left(waiter);
    return true;
  }

  /** Accounts for a waiter that left its queue (admitted, abandoned or displaced). */
  #left(waiter: Waiter): void {
    waiter.cleanup();
    waiter.span?.end();
    if (waiter.preferred !== undefined) this.#counter(waiter.preferred).queued--;
    this.#gauges(waiter.group, waiter.preferred);
  }

  /**
   * Admits queued runs of every pool that now has free capacity; called when capacity may
   * appear without a run finishing (a node registered, stopped draining, or config changed).
   */
  admitWaiting(): void {
    for (const group of this.#queues.keys()) this.#pump(group);
  }

  /** Admits waiters, in their fair order, while a provider has a free slot. */
  #pump(group: string): void {
    const queue = this.#queues.get(group);
    while (queue && queue.size > 0) {
      const waiter = queue.peek()!;
      const free = this.#freeFor(
        candidatesOf(this.#deps.sessions(), group, waiter.exclude),
        waiter.options,
      );
      if (!free) return;
      queue.shift();
      waiter.span?.set({ "iop.queue.outcome": "admitted" });
      this.#left(waiter);
      this.#metrics?.queueWait.labels(group).observe((this.#now() - waiter.enqueuedAtMs) / 1000);
      this.#start(free, waiter.submission, waiter.options).then(
        waiter.resolve,
        waiter.reject,
      );
    }
  }

  #start(
    candidate: Candidate,
    submission: RunSubmission,
    options: SubmitOptions,
  ): Promise<RunHandle> {
    const { provider, session } = candidate;
    const { modelGroup: _group, node: _node, ...input } = submission;
    const routed: RunSubmission = { ...input, adapter: provider.adapter, target: provider.target };
    return this.#send(session, routed, { ...options, pool: provider.modelGroup }, provider);
  }

  /** Dispatches a run counted on its resource (and `provider`) until it ends or fails to start. */
  #send(
    session: NodeSession,
    submission: RunSubmission,
    options: SubmitOptions,
    provider: ProviderRecord | undefined,
  ): Promise<RunHandle> {
    const release = this.#occupy(session.id, submission.adapter, submission.target, provider);
    return this.#deps.dispatch(session, submission, options).then(
      (handle) => {
        this.#sentOn.set(handle, session);
        void handle.done.then(release);
        return handle;
      },
      (err) => {
        release();
        throw err;
      },
    );
  }

  /**
   * Counts one run on a node resource and, when it is a provider's, in that provider's slots;
   * the returned release (call it once) frees both and admits the provider's waiters.
   */
  #occupy(
    nodeId: string,
    adapter: string,
    target: string,
    provider: ProviderRecord | undefined,
  ): () => void {
    const key = usageKey(nodeId, adapter, target);
    this.#usage.set(key, (this.#usage.get(key) ?? 0) + 1);
    const counter = provider ? this.#counter(provider.id) : undefined;
    if (counter) counter.inFlight++;
    if (provider) this.#gauges(provider.modelGroup, provider.id);
    const startedAt = this.#now();
    return () => {
      const left = (this.#usage.get(key) ?? 1) - 1;
      if (left > 0) this.#usage.set(key, left);
      else this.#usage.delete(key);
      if (!provider || !counter) return;
      const runMs = this.#now() - startedAt;
      const smoothed = this.#runMs.get(provider.modelGroup);
      this.#runMs.set(
        provider.modelGroup,
        smoothed === undefined ? runMs : smoothed * 0.9 + runMs * 0.1,
      );
      counter.inFlight--;
      this.#gauges(provider.modelGroup, provider.id);
      this.#pump(provider.modelGroup);
    };
  }

  /**
   * A candidate with a free slot for a run: on `options.preferNode` when one there has room
   * (the node of the run's session), else the least loaded.
   */
  #freeFor(candidates: Candidate[], options: SubmitOptions): Candidate | undefined {
    const prefer = options.preferNode;
    const there = prefer === undefined
      ? undefined
      : this.#leastLoaded(candidates.filter((c) => c.session.id === prefer), true);
    return there ?? this.#leastLoaded(candidates, true);
  }

  /** The candidate with the lowest load; with `freeOnly`, only those below their limit. */
  #leastLoaded(candidates: Candidate[], freeOnly: boolean): Candidate | undefined {
    let best: Candidate | undefined;
    let bestLoad = Infinity;
    for (const c of candidates) {
      const counter = this.stats(c.provider.id);
      if (freeOnly && counter.inFlight >= c.provider.maxConcurrency) continue;
      const load = (counter.inFlight + counter.queued) / c.provider.maxConcurrency;
      if (load < bestLoad) {
        best = c;
        bestLoad = load;
      }
    }
    return best;
  }

  #limits(group: string): QueueLimits {
    return this.#deps.config().models.find((m) => m.name === group)?.queue ?? DEFAULT_QUEUE;
  }

  #counter(providerId: string): ProviderCounters {
    let c = this.#counters.get(providerId);
    if (!c) {
      c = { inFlight: 0, queued: 0 };
      this.#counters.set(providerId, c);
    }
    return c;
  }

  #gauges(group: string, providerId: string | undefined): void {
    const m = this.#metrics;
    if (!m) return;
    if (providerId !== undefined) {
      const c = this.stats(providerId);
      m.providerInFlight.labels(providerId).set(c.inFlight);
      m.providerQueued.labels(providerId).set(c.queued);
    }
    m.queueDepth.labels(group).set(this.queueDepth(group));
  }
}

/** The #usage key of one node resource (node ids and adapter names never hold NUL). */
function usageKey(nodeId: string, adapter: string, target: string): string {
  return `${nodeId}\u0000${adapter}\u0000${target}`;
}
