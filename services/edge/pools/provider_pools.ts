/**
 * Provider pools: a model group's providers across nodes, each with its own concurrency limit
 * and in-flight/queued accounting. A run goes to the least-loaded eligible provider; when all
 * are full it waits in the pool's bounded FIFO queue (length and wait time), and a full queue
 * answers OVERLOADED at once instead of growing. Only pool routes queue here: CLI and direct
 * routes never do, but a direct run on a provider's adapter+target still holds one of that
 * provider's slots ({@linkcode ProviderPools.dispatchDirect}), and every run is counted against
 * the node resource it uses ({@linkcode ProviderPools.usage}) for the status.
 * @module
 */
import { IopError, OverloadedError, toIopError } from "../../../shared/errors.ts";
import type { Logger } from "../../../shared/log.ts";
import type { EdgeConfig, ProviderRecord } from "../config.ts";
import type { NodeSession } from "../nodes/registry.ts";
import type { RunHandle, RunSubmission, SubmitOptions } from "../ports.ts";
import { type Candidate, candidatesOf, providersOf } from "./candidates.ts";
import type { PoolMetrics } from "./pool_metrics.ts";
import { PooledRun } from "./pooled_run.ts";

/** Queue limits of a model group without a `models` entry. */
const DEFAULT_QUEUE = { maxLength: 64, maxWaitMs: 30_000 };

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
  /** Nodes to skip (the node a retried run was lost on). */
  exclude: ReadonlySet<string>;
}

interface Waiter extends Admission {
  /** Provider whose queued count this waiter is accounted to. */
  preferred: string;
  enqueuedAtMs: number;
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
  readonly #queues = new Map<string, Waiter[]>();
  /** Runs in flight per node resource, pool and direct alike, keyed by {@linkcode usageKey}. */
  readonly #usage = new Map<string, number>();
  readonly #metrics: PoolMetrics | undefined;

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
    return this.#queues.get(group)?.length ?? 0;
  }

  /**
   * Runs `submission` on a provider of `group`: at once when one has a free slot and nobody
   * waits, else after waiting in the pool's queue. Rejects with NOT_FOUND for a group with no
   * providers, UNAVAILABLE when none is connected, OVERLOADED ({@linkcode OverloadedError})
   * when the queue is full or the wait runs out.
   */
  submit(
    group: string,
    submission: RunSubmission,
    options: SubmitOptions = {},
  ): Promise<RunHandle> {
    return this.#acquire({ group, submission, options, exclude: new Set() }).then((first) =>
      new PooledRun(first, (lostNode, cancelled) => {
        this.#metrics?.admissions.labels(group, "retried").inc();
        this.#deps.logger.warn("pool run lost its node before any output; retrying", {
          pool: group,
          node_id: lostNode,
        });
        // `cancelled` fires only while the retry waits for a provider; PooledRun itself cancels
        // a retry that was already dispatched.
        const signal = options.signal ? AbortSignal.any([options.signal, cancelled]) : cancelled;
        return this.#acquire({
          group,
          submission,
          options: { ...options, signal },
          exclude: new Set([lostNode]),
        });
      })
    );
  }

  #acquire(admission: Admission): Promise<RunHandle> {
    const { group, submission, options, exclude } = admission;
    const signal = options.signal;
    if (signal?.aborted) return Promise.reject(abortError(signal));
    const config = this.#deps.config();
    if (providersOf(config.nodes, group).length === 0) {
      return Promise.reject(new IopError("NOT_FOUND", `Cannot find model group '${group}'`));
    }
    const candidates = candidatesOf(this.#deps.sessions(), group, exclude);
    if (candidates.length === 0) {
      return Promise.reject(
        new IopError("UNAVAILABLE", `No provider of model group '${group}' is connected now`),
      );
    }
    // Capacity can appear without a run finishing (a node connects or stops draining): the
    // waiters take it first, oldest first, before this newcomer is considered.
    this.#pump(group);
    const queue = this.#queues.get(group) ?? [];
    const free = this.#freeFor(candidates, options);
    if (free && queue.length === 0) {
      this.#metrics?.admissions.labels(group, "dispatched").inc();
      return this.#start(free, submission, options);
    }
    const limits = this.#limits(group);
    if (queue.length >= limits.maxLength) {
      this.#metrics?.admissions.labels(group, "rejected_full").inc();
      return Promise.reject(
        new OverloadedError(
          `Cannot queue for model group '${group}' as its queue is full: ${queue.length} of ${limits.maxLength} waiting`,
          Math.max(1, Math.ceil(limits.maxWaitMs / 1000 / Math.max(1, limits.maxLength))),
        ),
      );
    }
    return this.#enqueue(admission, candidates, limits.maxWaitMs);
  }

  #enqueue(
    admission: Admission,
    candidates: Candidate[],
    maxWaitMs: number,
  ): Promise<RunHandle> {
    const { group, options } = admission;
    const { promise, resolve, reject } = Promise.withResolvers<RunHandle>();
    const preferred = this.#leastLoaded(candidates, false)!.provider.id;
    const signal = options.signal;
    const onAbort = () => {
      if (this.#remove(waiter)) reject(abortError(signal!));
    };
    const timer = setTimeout(() => {
      if (!this.#remove(waiter)) return;
      this.#metrics?.admissions.labels(group, "rejected_timeout").inc();
      reject(
        new OverloadedError(
          `Cannot run on model group '${group}' as no provider freed up within ${maxWaitMs} ms`,
          Math.max(1, Math.ceil(maxWaitMs / 1000)),
        ),
      );
    }, maxWaitMs);
    const waiter: Waiter = {
      ...admission,
      preferred,
      enqueuedAtMs: this.#now(),
      resolve,
      reject,
      cleanup: () => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
      },
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    const queue = this.#queues.get(group) ?? [];
    queue.push(waiter);
    this.#queues.set(group, queue);
    this.#counter(preferred).queued++;
    this.#metrics?.admissions.labels(group, "queued").inc();
    this.#gauges(group, preferred);
    return promise;
  }

  /** Takes a waiter out of its queue; false when it already left. */
  #remove(waiter: Waiter): boolean {
    const queue = this.#queues.get(waiter.group);
    const i = queue?.indexOf(waiter) ?? -1;
    if (i < 0) return false;
    queue!.splice(i, 1);
    waiter.cleanup();
    this.#counter(waiter.preferred).queued--;
    this.#gauges(waiter.group, waiter.preferred);
    return true;
  }

  /**
   * Admits queued runs of every pool that now has free capacity; called when capacity may
   * appear without a run finishing (a node registered, stopped draining, or config changed).
   */
  admitWaiting(): void {
    for (const group of this.#queues.keys()) this.#pump(group);
  }

  /** Admits waiters, oldest first, while a provider has a free slot. */
  #pump(group: string): void {
    const queue = this.#queues.get(group);
    while (queue && queue.length > 0) {
      const waiter = queue[0]!;
      const free = this.#freeFor(
        candidatesOf(this.#deps.sessions(), group, waiter.exclude),
        waiter.options,
      );
      if (!free) return;
      this.#remove(waiter);
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
    return this.#send(session, routed, options, provider);
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
    return () => {
      const left = (this.#usage.get(key) ?? 1) - 1;
      if (left > 0) this.#usage.set(key, left);
      else this.#usage.delete(key);
      if (!provider || !counter) return;
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

  #limits(group: string): { maxLength: number; maxWaitMs: number } {
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

  #gauges(group: string, providerId: string): void {
    const m = this.#metrics;
    if (!m) return;
    const c = this.stats(providerId);
    m.providerInFlight.labels(providerId).set(c.inFlight);
    m.providerQueued.labels(providerId).set(c.queued);
    m.queueDepth.labels(group).set(this.queueDepth(group));
  }
}

/** The #usage key of one node resource (node ids and adapter names never hold NUL). */
function usageKey(nodeId: string, adapter: string, target: string): string {
  return `${nodeId}\u0000${adapter}\u0000${target}`;
}
