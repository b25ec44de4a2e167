/**
 * How much of a run's output the Node keeps: measured in UTF-8 bytes (what the history file and
 * the wire carry), cut on a character boundary, with a trailing line marking a cut.
 * @module
 */
import { cutToBytes } from "../../shared/utf8.ts";

/** Default of node.yaml `history.output_cap_bytes`: 1 MiB of output per run. */
export const DEFAULT_OUTPUT_CAP_BYTES = 1024 * 1024;

/**
 * Largest accepted `history.output_cap_bytes`: one run's output must fit, with room to spare,
 * in the single frame that answers a run-output command (4 MiB by default).
 */
export const MAX_OUTPUT_CAP_BYTES = 3 * 1024 * 1024;

/** The line a cut output ends with. */
export function truncationMark(capBytes: number): string {
  return `[output truncated at ${capBytes} bytes]`;
}

/**
 * Caps `text` at `capBytes`; a cut (or `options.alreadyCut`: an earlier stage cut it) ends the
 * text with the {@linkcode truncationMark} on a line of its own.
 */
export function capOutput(
  text: string,
  capBytes: number,
  options: { alreadyCut?: boolean } = {},
): { output: string; truncated: boolean } {
  const kept = cutToBytes(text, capBytes);
  const truncated = (options.alreadyCut ?? false) || kept.length < text.length;
  if (!truncated) return { output: kept, truncated };
  const sep = kept === "" || kept.endsWith("\n") ? "" : "\n";
  return { output: `${kept}${sep}${truncationMark(capBytes)}\n`, truncated };
}
