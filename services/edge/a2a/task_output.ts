/**
 * The byte cap on a task's output text (`a2a.max_task_bytes`): output beyond it is dropped and
 * a marker line says so, so one chatty run cannot grow the task store without bound.
 * @module
 */

/** How much output a task has taken so far. */
export interface OutputBudget {
  /** UTF-8 bytes of output kept. */
  bytes: number;
  /** True once output was cut; later output is dropped. */
  truncated: boolean;
}

const encoder = new TextEncoder();

/** The line that ends an output cut at `maxBytes`. */
export function truncationMarker(maxBytes: number): string {
  return `\n[output truncated by the Edge: the task keeps at most ${maxBytes} bytes of output ` +
    "(a2a.max_task_bytes); the rest was dropped]\n";
}

/**
 * The part of `text` the task keeps, updating `budget`: all of it while it fits in `maxBytes`,
 * else its head up to the cap (never splitting a character) plus {@linkcode truncationMarker};
 * "" once the output was cut.
 */
export function takeOutput(budget: OutputBudget, text: string, maxBytes: number): string {
  if (budget.truncated || text === "") return "";
  const room = maxBytes - budget.bytes;
  const bytes = encoder.encode(text).byteLength;
  if (bytes <= room) {
    budget.bytes += bytes;
    return text;
  }
  const head = new Uint8Array(Math.max(0, room));
  const { read, written } = encoder.encodeInto(text, head);
  budget.bytes += written;
  budget.truncated = true;
  return text.slice(0, read) + truncationMarker(maxBytes);
}
