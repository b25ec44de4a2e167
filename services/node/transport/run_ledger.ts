/**
 * The Node's ledger of its runs on the Edge link (node.proto, "Flow control" and "Resume"): per
 * run, the events it sent that the Edge has not acknowledged yet.
 *
 * Flow control: with a window (RegisterResponse.run_window_bytes above 0), a run whose
 * unacknowledged events reach the window, counted by `estimatedEventBytes`, has no room: its
 * `ready()` hands out a promise that resolves once RunAcks brings it back under the window, and
 * its adapter stops reading its backend meanwhile. Events emitted while over the window are
 * still taken. Those events are retained until acknowledged. Only an acknowledgement makes
 * room: events the Edge received (a resume says so) but its client has not taken yet are not
 * sent again, yet still count against the window until acknowledged.
 *
 * Resume: when the link is lost the runs go on (until their windows fill) and are held for the
 * grace period (`edge.resume_grace_ms`). The next registration lists them
 * (RegisterRequest.held_runs); on a link that accepts it, each run the Edge resumes gets its
 * events after the seq the Edge received sent again, in order, and goes on live; the others are
 * cancelled ("the edge no longer waits for run <id>") and forgotten. Past the grace period
 * without such a link, the held runs are cancelled ("link to edge lost for <ms> ms
 * (edge.resume_grace_ms)") but kept, with their events, until the next link: a registration
 * under way when the grace ran out may still resume them, and then gets their real end. A run
 * the Edge resumes that the node no longer has at all gets a `cancelled` event right after the
 * seq the Edge received, so the Edge never waits for a run the node dropped. A run is forgotten
 * once its terminal event is acknowledged (or the Edge, resuming it, already has it).
 *
 * The ledger refuses an event too large for one frame before it keeps or sends it (the outbox
 * trusts it), so a held run never keeps what no link could carry.
 *
 * Without a window (an older Edge, which never acknowledges) nothing waits and nothing is
 * retained, so nothing can be resumed: a lost link cancels the runs at once, as does a grace
 * period of 0.
 * @module
 */
import type { Logger } from "../../../shared/log.ts";
import { isTerminal, type RunEvent } from "../../../shared/run.ts";
import { estimatedEventBytes } from "../../../shared/run_event_size.ts";
import type { NodeCore, RunOutlet } from "../node.ts";
import { type OutboxSink, refuseOversized } from "./event_outbox.ts";

/** Default `edge.resume_grace_ms`. */
export const DEFAULT_RESUME_GRACE_MS = 30_000;

/** Why runs end when a lost link cannot be waited out (no window, or no grace period). */
const LINK_LOST = "link to edge lost";

/** Retained events dropped from the front before the arrays are compacted. */
const COMPACT_AFTER = 256;

/** Options of {@linkcode RunLedger}. */
export interface RunLedgerOptions {
  /** Cancels the runs the ledger gives up. */
  core: Pick<NodeCore, "cancelRun">;
  /** `edge.resume_grace_ms`: how long runs are held after a link loss; 0 = not at all. */
  graceMs: number;
  /** The link's frame limit: an event that cannot fit one is refused even while detached. */
  maxFrameBytes: number;
  logger: Logger;
}

/** A registered link as the ledger uses it. */
export interface LedgerLink {
  /** The link's outbox. */
  send: OutboxSink;
  /** RegisterResponse.run_window_bytes: 0 = no flow control (an older Edge). */
  windowBytes: number;
  /** The largest frame the link carries, when the Edge's is below the node's own limit. */
  maxFrameBytes?: number;
}

/** A held run offered at registration (RegisterRequest.held_runs). */
export interface HeldRunOffer {
  runId: string;
  /** The highest seq it produced so far. */
  lastSeq: number;
}

/** A held run the Edge still waits for (RegisterResponse.resumed_runs). */
export interface ResumedRun {
  runId: string;
  /** The last seq the Edge received of it (0: none). */
  receivedSeq: number;
}

/**
 * Where a run stands: `live` on the current link; `held` through a link loss; `expired` held
 * past the grace period and cancelled, kept until the next link (a registration already under
 * way may still resume it); `gone` forgotten (its remaining events are dropped).
 */
type EntryState = "live" | "held" | "expired" | "gone";

/** The link state every entry reads. */
interface Wire {
  link: LedgerLink | undefined;
  /** The window of the current (or last) link. */
  window: number;
  maxFrameBytes: number;
  forget(entry: RunEntry): void;
}

/** One run's account; it is the run's {@linkcode RunOutlet}. */
class RunEntry implements RunOutlet {
  readonly runId: string;
  state: EntryState = "live";
  /** The highest seq emitted. */
  lastSeq = 0;
  /** The highest seq the Edge acknowledged. */
  ackedSeq = 0;
  /** Seq of its terminal event once emitted; 0 before. */
  terminalSeq = 0;
  /** Bytes of its events the Edge has not acknowledged (seq > ackedSeq): what fills the window. */
  outstandingBytes = 0;
  /**
   * From `head` on, its events with seq > ackedSeq, and their sizes: each event itself while it
   * may have to be sent again, only its seq once the Edge received it (a resume said so) but has
   * not acknowledged it. Slots before `head` hold 0.
   */
  readonly #events: (RunEvent | number)[] = [];
  readonly #sizes: number[] = [];
  #head = 0;
  #room: PromiseWithResolvers<void> | undefined;
  readonly #wire: Wire;

  constructor(runId: string, wire: Wire) {
    this.runId = runId;
    this.#wire = wire;
  }

  emit = (event: RunEvent): void => {
    if (this.state === "gone") return;
    const wire = this.#wire;
    const bytes = estimatedEventBytes(event);
    // The one size check of the event's way out (the outbox trusts it).
    refuseOversized(event, bytes, wire.maxFrameBytes);
    this.lastSeq = event.seq;
    if (wire.window === 0) {
      // No flow control: straight to the link, nothing kept.
      wire.link?.send(event, bytes);
      if (isTerminal(event)) wire.forget(this);
      return;
    }
    if (this.state === "live") wire.link?.send(event, bytes);
    this.#events.push(event);
    this.#sizes.push(bytes);
    this.outstandingBytes += bytes;
    if (isTerminal(event)) this.terminalSeq = event.seq;
  };

  ready = (): Promise<void> | undefined => {
    const window = this.#wire.window;
    if (window === 0 || this.outstandingBytes < window || this.state === "gone") return undefined;
    return (this.#room ??= Promise.withResolvers<void>()).promise;
  };

  /** The Edge took its events up to `seq`. */
  acked(seq: number): void {
    if (seq <= this.ackedSeq) return;
    this.#drop(Math.min(seq, this.lastSeq));
    if (this.terminalSeq !== 0 && this.ackedSeq >= this.terminalSeq) this.#wire.forget(this);
    else this.wake();
  }

  /**
   * Goes live on `link` after a resume: sends again, in order, what the Edge did not receive
   * (past `receivedSeq`). What it received stays counted against the window until acknowledged:
   * its client may not have taken it yet.
   */
  resume(receivedSeq: number, link: LedgerLink): void {
    this.state = "live";
    const events = this.#events;
    for (let i = this.#head; i < events.length; i++) {
      const event = events[i]!;
      if (typeof event === "number") continue;
      if (event.seq <= receivedSeq) events[i] = event.seq;
      else link.send(event, this.#sizes[i]!);
    }
    if (this.terminalSeq !== 0 && Math.max(receivedSeq, this.ackedSeq) >= this.terminalSeq) {
      // The Edge has its end: nothing more to send, and no ack of it need come.
      this.#wire.forget(this);
    } else if (this.#wire.window === 0) {
      // An Edge without a window never acknowledges: keep nothing from now on.
      this.#drop(this.lastSeq);
      if (this.terminalSeq !== 0) this.#wire.forget(this);
    }
    this.wake();
  }

  /** Resolves a pending `ready()` once there is room (or the run is gone). */
  wake(): void {
    const room = this.#room;
    if (room === undefined) return;
    const window = this.#wire.window;
    if (this.state !== "gone" && window !== 0 && this.outstandingBytes >= window) return;
    this.#room = undefined;
    room.resolve();
  }

  /** Forgets the events up to `seq`: acknowledged, they no longer count against the window. */
  #drop(seq: number): void {
    if (seq <= this.ackedSeq) return;
    this.ackedSeq = seq;
    const events = this.#events;
    let head = this.#head;
    while (head < events.length && seqOf(events[head]!) <= seq) {
      this.outstandingBytes -= this.#sizes[head]!;
      events[head] = 0;
      head++;
    }
    if (head >= COMPACT_AFTER && head * 2 >= events.length) {
      events.splice(0, head);
      this.#sizes.splice(0, head);
      head = 0;
    }
    this.#head = head;
  }
}

/** The seq of a slot of {@linkcode RunEntry}'s events. */
function seqOf(slot: RunEvent | number): number {
  return typeof slot === "number" ? slot : slot.seq;
}

/** The ledger; one per Edge client, across its links. */
export class RunLedger {
  readonly #options: RunLedgerOptions;
  readonly #runs = new Map<string, RunEntry>();
  readonly #wire: Wire;
  #grace: ReturnType<typeof setTimeout> | undefined;

  constructor(options: RunLedgerOptions) {
    this.#options = options;
    this.#wire = {
      link: undefined,
      window: 0,
      maxFrameBytes: options.maxFrameBytes,
      forget: (entry) => this.#forget(entry),
    };
  }

  /**
   * Runs it keeps an account of now (live, held, or ending): 0 once every run's end was
   * acknowledged, so nothing is lost by leaving the link.
   */
  get size(): number {
    return this.#runs.size;
  }

  /** Runs held through a link loss within their grace period, waiting for a link to resume them. */
  get holding(): number {
    let held = 0;
    for (const entry of this.#runs.values()) if (entry.state === "held") held++;
    return held;
  }

  /**
   * The outlet of a run that starts on the current link. A run id it already has (the Edge
   * sent it twice) gets a plain outlet to the link, so the refusal the core sends reaches the
   * Edge without touching the first run's account.
   */
  open(runId: string): RunOutlet {
    if (this.#runs.has(runId)) {
      return { emit: (event) => this.#wire.link?.send(event), ready: () => undefined };
    }
    const entry = new RunEntry(runId, this.#wire);
    this.#runs.set(runId, entry);
    return entry;
  }

  /** The held runs to offer at the next registration. */
  held(): HeldRunOffer[] {
    const offers: HeldRunOffer[] = [];
    for (const entry of this.#runs.values()) {
      if (entry.state === "held") offers.push({ runId: entry.runId, lastSeq: entry.lastSeq });
    }
    return offers;
  }

  /**
   * Attaches a link that accepted the registration: the held runs in `resumed` go on on it,
   * their events after what the Edge received sent again; the other held runs are cancelled.
   */
  attach(link: LedgerLink, resumed: readonly ResumedRun[]): void {
    clearTimeout(this.#grace);
    this.#grace = undefined;
    this.#wire.link = link;
    this.#wire.window = link.windowBytes;
    this.#wire.maxFrameBytes = link.maxFrameBytes ?? this.#options.maxFrameBytes;
    const received = new Map(resumed.map((r) => [r.runId, r.receivedSeq]));
    const unknown = resumed.filter((r) => !this.#runs.has(r.runId));
    const went: string[] = [];
    const dropped: string[] = [];
    for (const entry of [...this.#runs.values()]) {
      if (entry.state === "live") continue;
      const seq = received.get(entry.runId);
      if (seq !== undefined) {
        entry.resume(seq, link);
        went.push(entry.runId);
      } else {
        this.#giveUp(entry, `the edge no longer waits for run ${entry.runId}`);
        dropped.push(entry.runId);
      }
    }
    if (went.length > 0 || dropped.length > 0) {
      this.#options.logger.info("held runs taken up by the edge", {
        resumed: went,
        cancelled: dropped,
      });
    }
    // The Edge waits for these (it re-attached them), so it must hear that they ended.
    for (const { runId, receivedSeq } of unknown) {
      link.send({
        runId,
        seq: receivedSeq + 1,
        timestampMs: Date.now(),
        type: "cancelled",
        reason: `the node no longer had run ${runId} when the edge resumed it`,
      });
    }
    if (unknown.length > 0) {
      this.#options.logger.warn("edge resumed runs the node no longer had; told it they ended", {
        runs: unknown.map((r) => r.runId),
      });
    }
  }

  /**
   * Detaches the lost link: the runs are held for the grace period, or cancelled at once when
   * they cannot be resumed (no window, or no grace period). Idempotent.
   */
  detach(): void {
    const wire = this.#wire;
    if (wire.link === undefined) return;
    wire.link = undefined;
    if (this.#runs.size === 0) return;
    const graceMs = this.#options.graceMs;
    if (wire.window === 0 || graceMs === 0) {
      for (const entry of [...this.#runs.values()]) this.#giveUp(entry, LINK_LOST);
      return;
    }
    for (const entry of this.#runs.values()) if (entry.state === "live") entry.state = "held";
    this.#options.logger.info("holding runs for the edge to resume", {
      runs: this.#runs.size,
      grace_ms: graceMs,
    });
    this.#grace ??= setTimeout(() => this.#expire(), graceMs);
  }

  /** The Edge acknowledged `runId`'s events up to `seq`. */
  ack(runId: string, seq: number): void {
    this.#runs.get(runId)?.acked(seq);
  }

  /** Stops the grace timer and forgets every run (the client stopped; its runs are cancelled). */
  close(): void {
    clearTimeout(this.#grace);
    this.#grace = undefined;
    this.#wire.link = undefined;
    for (const entry of [...this.#runs.values()]) this.#forget(entry);
  }

  /**
   * The grace period passed with no link taking the held runs up: they are cancelled, and kept
   * (with their end) until the next link, in case a registration under way resumes them.
   */
  #expire(): void {
    this.#grace = undefined;
    const reason = `${LINK_LOST} for ${this.#options.graceMs} ms (edge.resume_grace_ms)`;
    const cancelled: string[] = [];
    for (const entry of [...this.#runs.values()]) {
      if (entry.state !== "held") continue;
      entry.state = "expired";
      if (entry.terminalSeq !== 0) continue;
      if (this.#options.core.cancelRun(entry.runId, reason)) cancelled.push(entry.runId);
      // Not running, yet no end: none will come, so a resume is told it is gone (attach).
      else this.#forget(entry);
    }
    if (cancelled.length > 0) {
      this.#options.logger.warn("held runs cancelled", { runs: cancelled, reason });
    }
  }

  /** Cancels a run the ledger cannot keep (unless it ended or already is) and forgets it. */
  #giveUp(entry: RunEntry, reason: string): void {
    if (entry.terminalSeq === 0 && entry.state !== "expired") {
      this.#options.core.cancelRun(entry.runId, reason);
    }
    this.#forget(entry);
  }

  #forget(entry: RunEntry): void {
    if (entry.state === "gone") return;
    entry.state = "gone";
    this.#runs.delete(entry.runId);
    entry.wake();
  }
}
