/**
 * Which Edge a node dials when it lists several (`edge.addresses`: the active Edge first, then
 * its standbys, Edges with the same group config and node list), and when it goes back to the
 * first.
 *
 * The rule:
 * - The node dials the addresses in list order, starting with the first.
 * - A dial that ends without a registered link (no connection, a failed TLS handshake, no or a
 *   refused registration) moves on to the next address at once, wrapping around; the node backs
 *   off (`edge.backoff_initial_ms`, doubling up to `edge.backoff_max_ms`) only once every address
 *   failed since the round began.
 * - After a registered link is lost, the next round begins at the address it was on, so that a
 *   blip brings the node back to the same Edge (its runs can re-attach there); only when that
 *   fails does it go on to the others.
 * - While the node holds runs for that Edge to resume (`run_ledger.ts`: after a link loss,
 *   within `edge.resume_grace_ms`), a dial of it that fails by timeout, an unreachable network
 *   or the connection closing before a registration answer (the Edge may be back any moment,
 *   its runs waiting) is retried at the same address, with the usual backoff, until no run is
 *   held any more (their grace ran out): a standby knows nothing of them. A dial refused
 *   outright ({@linkcode refusedOutright}: the host is up and no Edge listens, so the Edge
 *   process and its runs are gone), or a registration refused for good, moves on to the next
 *   address at once as above.
 * - While registered with a later address, every `edge.failback_ms` (default 30 s; 0 = never)
 *   the node checks whether the first address accepts a connection (with TLS: completes the
 *   handshake and proves the Edge's certificate). When it does and the node has no run to
 *   account for (none in flight, and every run's end acknowledged by the standby: leaving
 *   sooner could lose an end still on its way) and is not draining, the node closes the
 *   standby link and registers with the first address over the connection just opened.
 *   Otherwise it checks again later.
 *
 * A single address behaves as before: each failed dial is a whole round and backs off.
 * @module
 */
import type { ByteLink } from "../../../shared/wire/link.ts";

/**
 * True when a dial failed because the host refused the connection (ECONNREFUSED: up, but
 * nothing listens on the port), as `Deno.connect` reports it (`Deno.errors.ConnectionRefused`)
 * or `node:tls` does (`code` "ECONNREFUSED", possibly as the cause of the error wrapping it);
 * false for a timeout, an unreachable network, a failed handshake.
 */
export function refusedOutright(err: unknown): boolean {
  for (let e = err, depth = 0; e instanceof Error && depth < 4; e = e.cause, depth++) {
    if (e instanceof Deno.errors.ConnectionRefused) return true;
    if ((e as { code?: unknown }).code === "ECONNREFUSED") return true;
  }
  return false;
}

/** Where a node is in its list of Edge addresses. */
export class EdgeAddresses {
  readonly all: readonly string[];
  #index = 0;
  /** Where the current round of dials began: returning here means every address failed. */
  #roundStart = 0;

  constructor(addresses: string | readonly string[]) {
    this.all = typeof addresses === "string" ? [addresses] : [...addresses];
    if (this.all.length === 0) throw new Error("Cannot dial an Edge as no address is given");
  }

  /** The address to dial now. */
  get current(): string {
    return this.all[this.#index]!;
  }

  /** The active Edge's address: the first of the list. */
  get first(): string {
    return this.all[0]!;
  }

  /** True while the address to dial is the first. */
  get onFirst(): boolean {
    return this.#index === 0;
  }

  /**
   * The dial of {@linkcode current} got no registered link: moves to the next address. True
   * when that ends a round (every address failed since it began): back off before the next dial.
   */
  failed(): boolean {
    this.#index = (this.#index + 1) % this.all.length;
    return this.#index === this.#roundStart;
  }

  /** A registered link at {@linkcode current} was lost: the next round begins at it again. */
  lost(): void {
    this.#roundStart = this.#index;
  }

  /** Goes back to the first address (a failback), beginning a round there. */
  backToFirst(): void {
    this.#index = 0;
    this.#roundStart = 0;
  }
}

/** Options of {@linkcode watchFailback}. */
export interface FailbackWatchOptions {
  /** The first (active) Edge's address. */
  address: string;
  /** Time between checks; the first check comes one interval after the start. */
  intervalMs: number;
  /** Opens a link to `address` (with TLS, one that proved the Edge's certificate). */
  dial: (address: string) => Promise<ByteLink>;
  /** True when the node may switch now: registered, no run to account for, not draining. */
  mayFailBack: () => boolean;
  /** Called at most once, with the open link to the first address; it owns the link. */
  onBack: (link: ByteLink) => void;
}

/**
 * Checks every `intervalMs` whether the first address accepts a connection while the node may
 * switch, and hands over the link once it does; returns the function that stops it (a link
 * opened after the stop is closed).
 */
export function watchFailback(options: FailbackWatchOptions): () => void {
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const check = async () => {
    if (stopped) return;
    if (options.mayFailBack()) {
      const link = await options.dial(options.address).catch(() => undefined);
      // A run may have started, or the link ended, while the dial was under way.
      if (link && options.mayFailBack() && !stopped) {
        stopped = true;
        options.onBack(link);
        return;
      }
      link?.close();
    }
    if (!stopped) timer = setTimeout(check, options.intervalMs);
  };
  timer = setTimeout(check, options.intervalMs);
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
