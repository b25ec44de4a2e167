/**
 * Waiting for room in a run's sink ({@linkcode EventSink.ready}) without outliving the run: the
 * promise `ready()` hands out resolves only when the consumer made room, so an adapter races it
 * with its run's signal, and a cancel (or a time limit) ends the wait at once.
 *
 * The hot path allocates nothing while there is room:
 * `const wait = sink.ready(); if (wait) await untilRoom(wait, signal);`
 * @module
 */
import type { EventSink } from "../ports.ts";

/**
 * Resolves when `wait` (a promise from `sink.ready()`) does, or rejects with `signal.reason` as
 * soon as `signal` aborts; leaves no listener behind either way.
 */
export function untilRoom(wait: Promise<void>, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<void>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    wait.then(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, (err) => {
      signal.removeEventListener("abort", onAbort);
      reject(err);
    });
  });
}

/** Undefined while `sink` has room; else a promise that settles as {@linkcode untilRoom} says. */
export function roomIn(sink: EventSink, signal: AbortSignal): Promise<void> | undefined {
  const wait = sink.ready();
  return wait === undefined ? undefined : untilRoom(wait, signal);
}
