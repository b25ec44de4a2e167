/**
 * An unbounded single-consumer queue that can be iterated with `for await` or read in batches:
 * producers push without waiting, the consumer receives items in order until the queue is
 * ended. Reading in batches lets a consumer handle everything that arrived in one task (e.g.
 * every run event of one socket read) with one wake-up and one write.
 * @module
 */

/** A one-consumer stream of items, read one by one (`for await`) or in batches. */
export interface BatchStream<T> extends AsyncIterable<T> {
  /** Resolves with every item buffered now (at least one), or undefined once the stream ended. */
  nextBatch(): Promise<T[] | undefined>;
}

/** A push-based {@linkcode BatchStream}. */
export class AsyncQueue<T> implements BatchStream<T> {
  #items: T[] = [];
  #ended = false;
  #waiter: PromiseWithResolvers<void> | undefined;
  #taken = false;

  /** Adds an item; ignored after `end`. */
  push(item: T): void {
    if (this.#ended) return;
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

  /** Removes and returns what is buffered now, without waiting. */
  takeAll(): T[] {
    const items = this.#items;
    this.#items = [];
    return items;
  }

  async nextBatch(): Promise<T[] | undefined> {
    while (this.#items.length === 0) {
      if (this.#ended) return undefined;
      this.#waiter = Promise.withResolvers<void>();
      await this.#waiter.promise;
    }
    const batch = this.#items;
    this.#items = [];
    return batch;
  }

  [Symbol.asyncIterator](): AsyncIterator<T> {
    if (this.#taken) throw new TypeError("Cannot iterate the queue twice as it has one consumer");
    this.#taken = true;
    return itemsOf(this);
  }

  #wake(): void {
    const waiter = this.#waiter;
    if (!waiter) return;
    this.#waiter = undefined;
    waiter.resolve();
  }
}

/** An iterator over a batch stream's items, one `nextBatch` per batch rather than per item. */
function itemsOf<T>(stream: BatchStream<T>): AsyncIterator<T> {
  let batch: T[] = [];
  let index = 0;
  let done = false;
  return {
    async next(): Promise<IteratorResult<T>> {
      while (index >= batch.length) {
        if (done) return { done: true, value: undefined };
        const next = await stream.nextBatch();
        if (next === undefined) {
          done = true;
          batch = [];
          return { done: true, value: undefined };
        }
        batch = next;
        index = 0;
      }
      return { done: false, value: batch[index++]! };
    },
    return(): Promise<IteratorResult<T>> {
      done = true;
      batch = [];
      return Promise.resolve({ done: true, value: undefined });
    },
  };
}
