/**
 * How many bytes a run event takes on the node wire, bounded from above from its own fields
 * without encoding it: the Node's outbox sizes its batches by it, and both ends count a run's
 * flow-control window (node.proto, "Flow control") in it, so they agree on what was credited.
 * @module
 */
import type { RunEvent } from "./run.ts";
import { utf8Length } from "./utf8.ts";

/** An event's fixed fields (seq, time, the oneof's tags) and its framing in a batch. */
const EVENT_OVERHEAD_BYTES = 48;

/** Strings up to this length are counted at 3 bytes a UTF-16 unit, without reading them. */
const CHEAP_TEXT_CHARS = 1024;

/**
 * At least the bytes `text` takes in UTF-8: a bound from its length for short strings (so a
 * streamed delta costs no scan), counted exactly for long ones.
 */
function textBytes(text: string): number {
  return text.length <= CHEAP_TEXT_CHARS ? text.length * 3 : utf8Length(text);
}

/**
 * An upper bound of the bytes `event` takes in a frame, from its own fields: float32 values are
 * 4 bytes each (packed), strings their UTF-8, the rest a fixed allowance.
 */
export function estimatedEventBytes(event: RunEvent): number {
  const base = EVENT_OVERHEAD_BYTES + textBytes(event.runId);
  switch (event.type) {
    case "embedding":
      return base + 16 + event.values.length * 4;
    case "output":
      return base + textBytes(event.text);
    case "tool_call":
      return base + 16 + textBytes(event.call.id) + textBytes(event.call.name) +
        textBytes(event.call.arguments);
    case "log":
      return base + textBytes(event.stream) + textBytes(event.text);
    case "started":
      return base + textBytes(event.nodeId) + textBytes(event.adapter) + textBytes(event.target);
    case "failed":
      return base + 16 + textBytes(event.code) + textBytes(event.message);
    case "cancelled":
      return base + textBytes(event.reason);
    case "usage":
    case "completed":
      return base + 64;
  }
}
