/**
 * A fake service layer for unit tests of the provider pools: connected sessions whose links
 * record what is sent, a dispatch that returns real ActiveRun handles the test drives (output,
 * completion, node loss), and a clock the test moves. The pools themselves are the real ones.
 * @module
 */
import { IopError } from "../../../shared/errors.ts";
import { createLogger } from "../../../shared/log.ts";
import { type RunEvent, runInput } from "../../../shared/run.ts";
import { ActiveRun } from "../active_run.ts";
import { type EdgeConfig, type NodeRecord, parseEdgeConfig } from "../config.ts";
import type { NodeSession } from "../nodes/registry.ts";
import type { RunHandle, RunSubmission, SubmitOptions } from "../ports.ts";
import type { PoolMetrics } from "./pool_metrics.ts";
import { ProviderPools } from "./provider_pools.ts";

const silent = createLogger("edge.pools.test", { writer: () => {} });

/** Test options: leaked queue timers or pending async work fail the test. */
export const strict = { sanitizeOps: true, sanitizeResources: true };

/** A node of a test fleet: its id and its providers (model group "demo" unless named). */
export interface NodeSpec {
  id: string;
  providers: { id: string; max: number; group?: string }[];
}

/** An Edge config of mock-adapter nodes and a "demo" pool with `queue` limits. */
export function fleetConfig(
  nodes: NodeSpec[],
  queue: { max_length?: number; max_wait_ms?: number; wait_for_provider_ms?: number } = {},
): EdgeConfig {
  return parseEdgeConfig({
    nodes: nodes.map((n) => ({
      id: n.id,
      token: `t-${n.id}`,
      adapters: [{ name: "mock", kind: "mock" }],
      providers: n.providers.map((p) => ({
        id: p.id,
        adapter: "mock",
        target: `model-${p.id}`,
        model_group: p.group ?? "demo",
        max_concurrency: p.max,
      })),
    })),
    models: [
      { name: "demo", route: "pool", queue: { max_length: 8, max_wait_ms: 5_000, ...queue } },
    ],
  }, "edge.yaml");
}

/** A run the pool handed to the fake dispatch, with controls to play the node's part. */
export interface Sent {
  session: NodeSession;
  submission: RunSubmission;
  run: ActiveRun;
  seq: number;
}

/** A fake service layer: connected sessions, a recording link per node and a dispatch log. */
export class Fleet {
  readonly config: EdgeConfig;
  readonly sessions: NodeSession[];
  readonly sent: Sent[] = [];
  readonly cancels: { nodeId: string; runId: string; reason: string }[] = [];
  readonly acks: { nodeId: string; runId: string; seq: number }[] = [];
  readonly pools: ProviderPools;
  nowMs = 1_000;
  /** Nodes whose link refuses new runs. */
  readonly linkDown = new Set<string>();

  constructor(config: EdgeConfig, options: { metrics?: PoolMetrics } = {}) {
    this.config = config;
    this.sessions = config.nodes.map((r) => this.session(r));
    this.pools = new ProviderPools({
      ...options,
      config: () => this.config,
      sessions: () => this.sessions,
      dispatch: (session, submission, options) => this.#dispatch(session, submission, options),
      logger: silent,
      now: () => this.nowMs,
    });
  }

  /** A connected session of `record` whose link records what the pool sends. */
  session(record: NodeRecord, extra: Partial<NodeSession> = {}): NodeSession {
    return {
      id: record.id,
      alias: record.alias,
      record,
      link: {
        run: (runId) =>
          this.linkDown.has(record.id) ? Promise.reject(new Error(`link ${runId} down`)) : (
            Promise.resolve()
          ),
        cancel: (runId, reason) => this.cancels.push({ nodeId: record.id, runId, reason }),
        ack: (runId, seq) => this.acks.push({ nodeId: record.id, runId, seq }),
        command: () => Promise.reject(new Error("not used by the pools")),
        close: () => {},
      },
      version: "1",
      hostname: "host",
      connectedAtMs: 0,
      lastSeenMs: 0,
      inFlight: 0,
      draining: false,
      adapters: [],
      wantedConfigVersion: 1,
      configVersion: 1,
      ...extra,
    };
  }

  async #dispatch(
    session: NodeSession,
    submission: RunSubmission,
    options: SubmitOptions,
  ): Promise<RunHandle> {
    const runId = `run-${this.sent.length + 1}`;
    const run = new ActiveRun(
      {
        runId,
        nodeId: session.id,
        adapter: submission.adapter,
        target: submission.target,
        startedAtMs: this.nowMs,
      },
      (reason) => session.link.cancel(runId, reason),
    );
    try {
      await session.link.run(runId, submission);
    } catch (err) {
      // As EdgeService.dispatch: a pool run the link could not take comes back already failed.
      const message = `Cannot send run to node '${session.id}': ${(err as Error).message}`;
      if (options.pool === undefined) {
        throw new IopError("UNAVAILABLE", message, { cause: err });
      }
      run.finish({ type: "failed", code: "UNAVAILABLE", message, retryable: true }, this.nowMs);
      return run;
    }
    this.sent.push({ session, submission, run, seq: 0 });
    this.#emit(this.sent.at(-1)!, {
      type: "started",
      nodeId: session.id,
      adapter: submission.adapter,
      target: submission.target,
    });
    return run;
  }

  #emit(s: Sent, event: DistributiveOmit<RunEvent, "runId" | "seq" | "timestampMs">): void {
    s.run.offer(
      { ...event, runId: s.run.runId, seq: ++s.seq, timestampMs: this.nowMs } as RunEvent,
    );
  }

  /** Run `i` produces output text. */
  output(i: number, text: string): void {
    this.#emit(this.sent[i]!, { type: "output", text });
  }

  /** Run `i` completes normally. */
  complete(i: number): void {
    this.#emit(this.sent[i]!, { type: "completed", finishReason: "stop", exitCode: 0 });
  }

  /** Ends run `i` the way the service does when its node disconnects. */
  lose(i: number): void {
    const s = this.sent[i]!;
    s.run.finish({ type: "failed", code: "NODE_LOST", message: "node lost", retryable: true }, 0);
  }

  /** Run `i` is refused by its node as a stopping node refuses it: retryable UNAVAILABLE. */
  refuse(i: number, retryable = true): void {
    this.#emit(this.sent[i]!, {
      type: "failed",
      code: "UNAVAILABLE",
      message: `Cannot start run '${this.sent[i]!.run.runId}' as node is stopping`,
      retryable,
      exitCode: 0,
    });
  }

  /**
   * Node `id` connects (again) on a new connection, as a fresh session replacing any old one,
   * and the pools hear of it as the service tells them after a node's config_applied report.
   */
  connect(id: string): NodeSession {
    const record = this.config.nodes.find((n) => n.id === id)!;
    const session = this.session(record);
    const at = this.sessions.findIndex((s) => s.id === id);
    if (at >= 0) this.sessions.splice(at, 1, session);
    else this.sessions.push(session);
    this.pools.admitWaiting();
    return session;
  }

  /** Node `id` disconnects: its session is gone. */
  disconnect(id: string): void {
    const at = this.sessions.findIndex((s) => s.id === id);
    if (at >= 0) this.sessions.splice(at, 1);
  }

  /** Node ids of the dispatched runs, in dispatch order. */
  get nodes(): string[] {
    return this.sent.map((s) => s.session.id);
  }

  /** Prompts of the dispatched runs, in dispatch order. */
  get prompts(): string[] {
    return this.sent.map((s) => s.submission.prompt);
  }
}

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

/** A pool submission to model group "demo" carrying `prompt`. */
export const sub = (prompt: string): RunSubmission => ({
  ...runInput({ adapter: "", target: "" }),
  prompt,
  modelGroup: "demo",
});

/** Lets every pending promise reaction and timer callback run. */
export const settle = () => new Promise((r) => setTimeout(r, 0));

/** Tracks whether a promise settled, without letting its rejection go unhandled. */
export function track<T>(p: Promise<T>): { settled: () => boolean; promise: Promise<T> } {
  let done = false;
  p.then(() => (done = true), () => (done = true));
  return { settled: () => done, promise: p };
}

/** Collects every event a run handle yields. */
export async function drain(handle: RunHandle): Promise<RunEvent[]> {
  const out: RunEvent[] = [];
  for await (const e of handle.events()) out.push(e);
  return out;
}
