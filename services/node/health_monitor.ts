/**
 * Keeps the health of the Node's adapters current: probes each one (`Adapter.probe`, see
 * `adapters/health.ts`) when a config is applied, every `intervalMs` (node.yaml
 * `health.interval_ms`, default 15 s), and soon after a run on it failed with UNAVAILABLE or
 * BACKEND_ERROR (a dead backend shows there first). Listeners hear each change only.
 *
 * The picture is keyed by adapter name, plus `<adapter>/<target>` for adapters whose health
 * differs by target (CLI profiles). An adapter without a probe counts as healthy; one not yet
 * probed is absent from the picture.
 * @module
 */
import { toIopError } from "../../shared/errors.ts";
import type { Logger } from "../../shared/log.ts";
import type { AdapterFactories } from "./adapters/registry.ts";
import type { Adapter, ProbeResult } from "./ports.ts";

/** The health of one adapter (or one of its targets). */
export interface HealthState {
  healthy: boolean;
  detail: string;
}

/** Receives one change of the picture. */
export type HealthListener = (key: string, state: HealthState) => void;

/** Default time between two probes of every adapter. */
export const DEFAULT_HEALTH_INTERVAL_MS = 15_000;
/** Default limit of one probe; a backend slower than this is unhealthy. */
export const DEFAULT_PROBE_TIMEOUT_MS = 3_000;

/** Options of {@linkcode HealthMonitor}. */
export interface HealthMonitorOptions {
  /** Time between periodic probes; 0 disables them. Defaults to 15 s. */
  intervalMs?: number;
  /** Limit of one probe; defaults to 3 s. */
  probeTimeoutMs?: number;
  /** Logs transitions (warn when unhealthy, info when healthy again); absent = silent. */
  logger?: Logger;
}

/** Probes the Node's adapters and tells listeners what changed. */
export class HealthMonitor {
  readonly #options: HealthMonitorOptions;
  #adapters = new Map<string, Adapter>();
  readonly #states = new Map<string, HealthState>();
  readonly #listeners = new Set<HealthListener>();
  readonly #inFlight = new Map<string, Promise<void>>();
  #round: Promise<void> = Promise.resolve();
  #timer: ReturnType<typeof setInterval> | undefined;
  readonly #stop = new AbortController();

  constructor(options: HealthMonitorOptions = {}) {
    this.#options = options;
  }

  /** Starts the periodic probes (no-op when `intervalMs` is 0). */
  start(): void {
    const ms = this.#options.intervalMs ?? DEFAULT_HEALTH_INTERVAL_MS;
    if (ms <= 0 || this.#timer !== undefined || this.#stop.signal.aborted) return;
    this.#timer = setInterval(() => void this.checkAll(), ms);
  }

  /** Stops the periodic probes and abandons those in flight; the monitor stays readable. */
  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.#stop.abort();
  }

  /**
   * Replaces the adapters watched (after a config is applied): forgets the health of those no
   * longer present and probes all of them now.
   */
  track(adapters: readonly Adapter[]): void {
    this.#adapters = new Map(adapters.map((a) => [a.name, a]));
    for (const key of [...this.#states.keys()]) {
      if (!this.#adapters.has(adapterOf(key))) this.#states.delete(key);
    }
    this.#inFlight.clear();
    this.#round = this.checkAll();
  }

  /** Probes every adapter now; resolves when all answered (or timed out). */
  async checkAll(): Promise<void> {
    await Promise.all([...this.#adapters.keys()].map((name) => this.check(name)));
  }

  /** Probes one adapter; a probe already in flight for it is shared, not repeated. */
  check(name: string): Promise<void> {
    const adapter = this.#adapters.get(name);
    if (!adapter || this.#stop.signal.aborted) return Promise.resolve();
    const running = this.#inFlight.get(name);
    if (running) return running;
    const done = this.#probe(adapter).finally(() => {
      if (this.#inFlight.get(name) === done) this.#inFlight.delete(name);
    });
    this.#inFlight.set(name, done);
    return done;
  }

  /** Resolves once the probes started by the last `track` ended: the full picture then. */
  async settled(): Promise<Map<string, HealthState>> {
    await this.#round;
    return this.current();
  }

  /** The current picture (a copy), by adapter name and `<adapter>/<target>`. */
  current(): Map<string, HealthState> {
    return new Map(this.#states);
  }

  /** True when at least one adapter was probed healthy. */
  anyHealthy(): boolean {
    return [...this.#adapters.keys()].some((name) => this.#states.get(name)?.healthy === true);
  }

  /** Adds a change listener; returns the function that removes it. */
  onChange(listener: HealthListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  async #probe(adapter: Adapter): Promise<void> {
    const timeout = this.#options.probeTimeoutMs ?? DEFAULT_PROBE_TIMEOUT_MS;
    const signal = AbortSignal.any([this.#stop.signal, AbortSignal.timeout(timeout)]);
    let result: ProbeResult;
    try {
      result = adapter.probe
        ? await adapter.probe({ signal })
        : { healthy: true, detail: "no health probe" };
    } catch (err) {
      if (this.#stop.signal.aborted) return;
      result = { healthy: false, detail: `health probe failed: ${toIopError(err).message}` };
    }
    // A config applied meanwhile replaced this instance: its answer is no longer news.
    if (this.#adapters.get(adapter.name) !== adapter || this.#stop.signal.aborted) return;
    this.#set(adapter.name, { healthy: result.healthy, detail: result.detail });
    const targets = result.targets ?? {};
    const prefix = `${adapter.name}/`;
    for (const key of [...this.#states.keys()]) {
      if (key.startsWith(prefix) && !Object.hasOwn(targets, key.slice(prefix.length))) {
        this.#states.delete(key);
      }
    }
    for (const [target, state] of Object.entries(targets)) this.#set(prefix + target, state);
  }

  #set(key: string, state: HealthState): void {
    const before = this.#states.get(key);
    if (before?.healthy === state.healthy && before.detail === state.detail) return;
    this.#states.set(key, state);
    const log = this.#options.logger;
    if (!state.healthy && before?.healthy !== false) {
      log?.warn("adapter unhealthy", { adapter: key, detail: state.detail });
    } else if (state.healthy && before?.healthy === false) {
      log?.info("adapter healthy again", { adapter: key, detail: state.detail });
    }
    for (const listener of this.#listeners) listener(key, state);
  }
}

/** The adapter a picture key belongs to (`cli/claude` → `cli`). */
function adapterOf(key: string): string {
  const slash = key.indexOf("/");
  return slash < 0 ? key : key.slice(0, slash);
}

/** True for a run failure that may mean the backend is gone, worth a probe at once. */
export function suggestsBackendDown(err: unknown): boolean {
  const code = toIopError(err).code;
  return code === "UNAVAILABLE" || code === "BACKEND_ERROR";
}

/**
 * Wraps adapter factories so that a run failing with UNAVAILABLE or BACKEND_ERROR (see
 * {@linkcode suggestsBackendDown}) calls `onFailure` with its adapter's name; a cancelled run
 * does not.
 */
export function probeOnFailure(
  factories: AdapterFactories,
  onFailure: (adapter: string) => void,
): AdapterFactories {
  const out: AdapterFactories = {};
  for (const [kind, factory] of Object.entries(factories)) {
    if (!factory) continue;
    out[kind as keyof AdapterFactories] = (config) => {
      const adapter = factory(config);
      const execute = adapter.execute.bind(adapter);
      return {
        ...adapter,
        execute: (...args: Parameters<Adapter["execute"]>) =>
          execute(...args).catch((err) => {
            if (!args[2].signal.aborted && suggestsBackendDown(err)) onFailure(adapter.name);
            throw err;
          }),
      };
    };
  }
  return out;
}
