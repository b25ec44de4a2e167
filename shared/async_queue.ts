/**
 * An unbounded single-consumer queue that can be iterated with `for await`: producers push
 * without waiting, the consumer receives items in order until the queue is ended.
 * @module
 */

/** A push-based async iterable. */
export class AsyncQueue<T> implements AsyncIterable<T> {
  #items: T[] = [];
  #ended = false;
  #wake: (() => void) | undefined;
  #taken = false;

  /** Adds an item; ignored after `end`. */
  push(item: T): void {
    if (this.#ended) return;
    this.#items.push(item);
    this.#wake?.();
  }

  /** Ends the queue; the consumer receives what is buffered, then stops. */
  end(): void {
    this.#ended = true;
    this.#wake?.();
  }

  /** True once ended. */
  get ended(): boolean {
    return this.#ended;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    if (this.#taken) throw new TypeError("Cannot iterate the queue twice as it has one consumer");
    this.#taken = true;
    while (true) {
      if (this.#items.length > 0) {
        const batch = this.#items;
        this.#items = [];
        yield* batch;
        continue;
      }
      if (this.#ended) return;
      await new Promise<void>((resolve) => (this.#wake = resolve));
      this.#wake = undefined;
    }
  }
}
