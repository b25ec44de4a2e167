/**
 * The Node's ledger of its runs on the Edge link (node.proto, "Flow control" and "Resume"): per
 * run, the events it sent that the Edge has not acknowledged yet.
 *
 * Flow control: with a window (RegisterResponse.run_window_bytes above 0), a run whose
 * unacknowledged events reach the window, counted by `estimatedEventBytes`, has no room: its
 * `ready()` hands out a promise that resolves once RunAcks brings it back under the window, and
 * its adapter stops reading its backend meanwhile. Events emitted while over the window are
 * still taken. Those events are retained until acknowledged.
 *
 * Resume: when the link is lost the runs go on (until their windows fill) and are held for the
 * grace period (`edge.resume_grace_ms`). The next registration lists them
 * (RegisterRequest.held_runs); on a link that accepts it, each run the Edge resumes gets its
 * events after the seq the Edge received sent again, in order, and goes on live; the others are
 * cancelled ("the edge no longer waits for run <id>") and forgotten. Past the grace period
 * without such a link, the held runs are cancelled ("link to edge lost for <ms> ms
 * (edge.resume_grace_ms)"). A run is forgotten once its terminal event is acknowledged.
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
 * past the grace period and being cancelled (a registration already under way may still resume
 * it); `gone` forgotten (its remaining events are dropped).
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
  /** The highest seq acknowledged (or received by the Edge at a resume). */
  ackedSeq = 0;
  /** Seq of its terminal event once emitted; 0 before. */
  terminalSeq = 0;
  /** Bytes of the retained events. */
  unacked = 0;
  /** Events with seq > ackedSeq from `head` on, and their sizes. */
  readonly #events: (RunEvent | undefined)[] = [];
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
    if (wire.window === 0) {
      // No flow control: straight to the link, nothing kept.
      wire.link?.send(event, bytes);
      this.lastSeq = event.seq;
      if (isTerminal(event)) wire.forget(this);
      return;
    }
    // Refused before it is kept, so a detached run never holds what no link could carry.
    refuseOversized(event, bytes, wire.maxFrameBytes);
    if (this.state === "live") wire.link?.send(event, bytes);
    this.#events.push(event);
    this.#sizes.push(bytes);
    this.unacked += bytes;
    this.lastSeq = event.seq;
    if (!isTerminal(event)) return;
    this.terminalSeq = event.seq;
    // An expired run's end, with no link to tell: nobody will ask for it.
    if (this.state === "expired" && wire.link === undefined) wire.forget(this);
  };

  ready = (): Promise<void> | undefined => {
    const window = this.#wire.window;
    if (window === 0 || this.unacked < window || this.state === "gone") return undefined;
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
   * Goes live on `link` after a resume: drops what the Edge received (up to `receivedSeq`) and
   * sends the rest again, in order.
   */
  resume(receivedSeq: number, link: LedgerLink): void {
    this.state = "live";
    this.#drop(Math.min(receivedSeq, this.lastSeq));
    for (let i = this.#head; i < this.#events.length; i++) {
      link.send(this.#events[i]!, this.#sizes[i]!);
    }
    if (this.terminalSeq !== 0 && this.ackedSeq >= this.terminalSeq) {
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
    if (this.state !== "gone" && window !== 0 && this.unacked >= window) return;
    this.#room = undefined;
    room.resolve();
  }

  /** Forgets the retained events up to `seq`. */
  #drop(seq: number): void {
    if (seq <= this.ackedSeq) return;
    this.ackedSeq = seq;
    const events = this.#events;
    let head = this.#head;
    while (head < events.length && events[head]!.seq <= seq) {
      this.unacked -= this.#sizes[head]!;
      events[head] = undefined;
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

  /** Runs it keeps an account of now (live, held, or ending). */
  get size(): number {
    return this.#runs.size;
  }

  /** True while a link is attached. */
  get attached(): boolean {
    return this.#wire.link !== undefined;
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
    const received = new Map(resumed.map((r) => [r.runId, r.receivedSeq]));
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

  /** The grace period passed with no link taking the held runs up: they are cancelled. */
  #expire(): void {
    this.#grace = undefined;
    const reason = `${LINK_LOST} for ${this.#options.graceMs} ms (edge.resume_grace_ms)`;
    const cancelled: string[] = [];
    for (const entry of [...this.#runs.values()]) {
      if (entry.state !== "held") continue;
      if (entry.terminalSeq !== 0 || !this.#options.core.cancelRun(entry.runId, reason)) {
        this.#forget(entry);
        continue;
      }
      // Kept until its cancellation is emitted, in case a registration under way resumes it.
      entry.state = "expired";
      cancelled.push(entry.runId);
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
