/**
 * The Edge's in-process event bus: node lifecycle and run summaries for any surface that
 * listens (console, Control Plane link, metrics). A listener that throws is isolated.
 * @module
 */
import type { Logger } from "../../shared/log.ts";
import type { EdgeEvent } from "./ports.ts";

/** Distributes EdgeEvents synchronously to subscribers. */
export class EventBus {
  readonly #listeners = new Set<(event: EdgeEvent) => void>();
  readonly #logger: Logger;

  constructor(logger: Logger) {
    this.#logger = logger;
  }

  /** Subscribes; returns the function that unsubscribes. */
  subscribe(listener: (event: EdgeEvent) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Delivers an event to every subscriber. */
  publish(event: EdgeEvent): void {
    for (const listener of this.#listeners) {
      try {
        listener(event);
      } catch (err) {
        this.#logger.warn("event listener failed", { err, event_type: event.type });
      }
    }
  }
}
