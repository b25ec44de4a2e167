/**
 * An unbounded single-consumer queue: producers push without waiting; the consumer either
 * iterates it with `for await`, receiving everything buffered at each wake-up in one go, or
 * subscribes and is handed each item synchronously as it is pushed.
 * @module
 */

/** A push-based async iterable with one consumer. */
export class AsyncQueue<T> implements AsyncIterable<T> {
  #items: T[] = [];
  #ended = false;
  #waiter: PromiseWithResolvers<void> | undefined;
  #listener: ((item: T) => void) | undefined;
  #taken = false;

  /** Adds an item (or hands it to the subscriber); ignored after `end`. */
  push(item: T): void {
    if (this.#ended) return;
    if (this.#listener) {
      this.#listener(item);
      return;
    }
    this.#items.push(item);
    this.#wake();
  }

  /** Ends the queue; the consumer receives what is buffered, then stops. */
  end(): void {
    this.#ended = true;
    this.#wake();
  }

  /** True once ended. */
  get ended(): boolean {
    return this.#ended;
  }

  /**
   * Hands every item to `listener` from now on, synchronously, the buffered ones first: the
   * consumer then never waits on a promise per item. Instead of iterating, not as well.
   */
  subscribe(listener: (item: T) => void): void {
    if (this.#taken) throw new TypeError("Cannot subscribe to a queue that is being iterated");
    this.#taken = true;
    this.#listener = listener;
    const buffered = this.#items;
    this.#items = [];
    for (const item of buffered) listener(item);
  }

  [Symbol.asyncIterator](): AsyncIterator<T> {
    if (this.#taken) throw new TypeError("Cannot iterate the queue twice as it has one consumer");
    this.#taken = true;
    let batch: T[] = [];
    let index = 0;
    return {
      next: async (): Promise<IteratorResult<T>> => {
        while (index >= batch.length) {
          // Everything buffered comes in one batch, so a burst costs one wake-up.
          if (this.#items.length > 0) {
            batch = this.#items;
            this.#items = [];
            index = 0;
            break;
          }
          if (this.#ended) return { done: true, value: undefined };
          this.#waiter = Promise.withResolvers<void>();
          await this.#waiter.promise;
        }
        return { done: false, value: batch[index++]! };
      },
      return: (): Promise<IteratorResult<T>> => {
        this.#ended = true;
        this.#items = [];
        batch = [];
        return Promise.resolve({ done: true, value: undefined });
      },
    };
  }

  #wake(): void {
    const waiter = this.#waiter;
    if (!waiter) return;
    this.#waiter = undefined;
    waiter.resolve();
  }
}
