/**
 * The waiting runs of one provider pool, fair across tenants: each tenant's runs wait in their
 * own FIFO lane, a higher priority class is always admitted first, and within a class lanes take
 * turns by weight (start-time fair queueing: a lane's turn comes at its virtual time, which
 * advances by `1 / weight` per admitted run, and an idle lane rejoins at the pool's current
 * virtual time, so waiting earlier buys no credit). A tenant with weight 2 is admitted twice as
 * often as one with weight 1 while both wait; a flooding tenant cannot starve a quiet one.
 * Lanes are kept per tenant name once seen, so their number is bounded by the config's tenants.
 * @module
 */
import type { QueueShare } from "../tenants/tenant.ts";

interface Lane<T> {
  share: QueueShare;
  items: T[];
  /** Virtual time at which this lane's head is due. */
  due: number;
  /** Admission sequence number of this lane's last admitted item; breaks ties in due time. */
  served: number;
}

/** Waiting items grouped by tenant, taken in fair order. */
export class FairQueue<T> {
  readonly #lanes = new Map<string, Lane<T>>();
  #size = 0;
  /** Virtual time of the last admission. */
  #clock = 0;
  #admissions = 0;

  /** Items waiting, over every lane. */
  get size(): number {
    return this.#size;
  }

  /** Items `tenant` has waiting. */
  countOf(tenant: string): number {
    return this.#lanes.get(tenant)?.items.length ?? 0;
  }

  /** Appends `item` to the lane of `share.name` (whose share is updated to `share`). */
  push(share: QueueShare, item: T): void {
    let lane = this.#lanes.get(share.name);
    if (!lane) {
      lane = { share, items: [], due: this.#clock, served: 0 };
      this.#lanes.set(share.name, lane);
    }
    lane.share = share;
    if (lane.items.length === 0) lane.due = Math.max(lane.due, this.#clock);
    lane.items.push(item);
    this.#size++;
  }

  /** The item admitted next, left in place. */
  peek(): T | undefined {
    return this.#nextLane()?.items[0];
  }

  /** Takes the item {@linkcode peek} returns, advancing its lane's turn. */
  shift(): T | undefined {
    const lane = this.#nextLane();
    if (!lane) return undefined;
    const item = lane.items.shift()!;
    this.#size--;
    this.#clock = lane.due;
    lane.due += 1 / lane.share.weight;
    lane.served = ++this.#admissions;
    return item;
  }

  /** Removes `item` from `tenant`'s lane (an abandoned or timed-out wait); false if absent. */
  remove(tenant: string, item: T): boolean {
    const lane = this.#lanes.get(tenant);
    const i = lane?.items.indexOf(item) ?? -1;
    if (i < 0) return false;
    lane!.items.splice(i, 1);
    this.#size--;
    return true;
  }

  /**
   * The tenant holding the most waiting items for its weight, with its newest item: whom to
   * displace when the pool's queue is full and a tenant with fewer waiting arrives.
   */
  heaviest(): { tenant: string; load: number; newest: T } | undefined {
    let best: Lane<T> | undefined;
    for (const lane of this.#lanes.values()) {
      if (lane.items.length === 0) continue;
      if (!best || loadOf(lane) > loadOf(best)) best = lane;
    }
    return best && { tenant: best.share.name, load: loadOf(best), newest: best.items.at(-1)! };
  }

  /**
   * Waiting items that would be admitted before one more item of `share` (an estimate: the
   * lanes' turns as they stand): its own lane's items, and the others' items due before it.
   */
  ahead(share: QueueShare): number {
    const lane = this.#lanes.get(share.name);
    const count = lane?.items.length ?? 0;
    const start = count > 0 ? lane!.due : Math.max(lane?.due ?? 0, this.#clock);
    return count + this.#dueBefore(share, start + count / share.weight);
  }

  /** 1-based place of `item` of `tenant` in the admission order (estimated); 0 if absent. */
  positionOf(tenant: string, item: T): number {
    const lane = this.#lanes.get(tenant);
    const index = lane?.items.indexOf(item) ?? -1;
    if (index < 0) return 0;
    return index + this.#dueBefore(lane!.share, lane!.due + index / lane!.share.weight) + 1;
  }

  /**
   * Items of other lanes admitted before an item of `share` due at virtual time `due`: all of
   * a higher class, and of its class those due earlier, or at the same time in a lane that wins
   * the tie (admitted less recently, as {@linkcode #nextLane} decides).
   */
  #dueBefore(share: QueueShare, due: number): number {
    const own = this.#lanes.get(share.name);
    const ownServed = own?.served ?? Infinity;
    let before = 0;
    let pastOwn = false;
    for (const lane of this.#lanes.values()) {
      if (lane === own) pastOwn = true;
      const n = lane.items.length;
      if (lane.share.name === share.name || n === 0) continue;
      if (lane.share.priority > share.priority) before += n;
      else if (lane.share.priority === share.priority) {
        const winsTie = lane.served < ownServed || (lane.served === ownServed && !pastOwn);
        // Items k = 0, 1, … of this lane are due at lane.due + k / weight.
        const span = (due - lane.due) * lane.share.weight;
        const whole = Math.round(span);
        const count = Math.abs(span - whole) < 1e-9 ? whole + (winsTie ? 1 : 0) : Math.ceil(span);
        before += Math.min(n, Math.max(0, count));
      }
    }
    return before;
  }

  #nextLane(): Lane<T> | undefined {
    let best: Lane<T> | undefined;
    for (const lane of this.#lanes.values()) {
      if (lane.items.length === 0) continue;
      if (
        !best || lane.share.priority > best.share.priority ||
        (lane.share.priority === best.share.priority &&
          (lane.due < best.due || (lane.due === best.due && lane.served < best.served)))
      ) {
        best = lane;
      }
    }
    return best;
  }
}

function loadOf(lane: { share: QueueShare; items: unknown[] }): number {
  return lane.items.length / lane.share.weight;
}
