/**
 * Request/response correlation over a message link: each request gets a fresh id; the matching
 * response settles it; a deadline or a lost link rejects it.
 * @module
 */
import { IopError } from "../errors.ts";

interface Waiter<T> {
  resolve(value: T): void;
  reject(err: unknown): void;
  timer: ReturnType<typeof setTimeout>;
}

/** Outstanding requests awaiting their responses, keyed by correlation id. */
export class PendingRequests<T> {
  #nextId = 1n;
  readonly #waiting = new Map<bigint, Waiter<T>>();

  /** Number of requests still waiting. */
  get size(): number {
    return this.#waiting.size;
  }

  /** Registers a request; the promise settles with its response or rejects with TIMEOUT. */
  open(timeoutMs: number, what: string): { id: bigint; response: Promise<T> } {
    const id = this.#nextId++;
    const { promise, resolve, reject } = Promise.withResolvers<T>();
    // A caller may give up before awaiting (e.g. its send failed); a later rejection of the
    // abandoned request must not surface as an unhandled rejection that ends the process.
    promise.catch(() => {});
    const timer = setTimeout(() => {
      this.#waiting.delete(id);
      reject(new IopError("TIMEOUT", `No answer to ${what} within ${timeoutMs} ms`));
    }, timeoutMs);
    this.#waiting.set(id, { resolve, reject, timer });
    return { id, response: promise };
  }

  /** Settles the request with this id; returns false when none waits (late or unknown). */
  settle(id: bigint, value: T): boolean {
    const waiter = this.#waiting.get(id);
    if (!waiter) return false;
    this.#waiting.delete(id);
    clearTimeout(waiter.timer);
    waiter.resolve(value);
    return true;
  }

  /** Rejects every waiting request, e.g. when the link is lost. */
  rejectAll(err: unknown): void {
    for (const waiter of this.#waiting.values()) {
      clearTimeout(waiter.timer);
      waiter.reject(err);
    }
    this.#waiting.clear();
  }
}
