/**
 * The Node's outbox of run events: sends them in order, and those emitted in one task (the
 * deltas of one backend read, a run's usage and completion, the vectors of an embedding answer)
 * as one RunEventBatch frame when the Edge accepts batches.
 *
 * A receiver closes a link that sends a frame over its limit (`edge.max_frame_bytes`, 4 MiB by
 * default), which ends every run on it. So a batch leaves early, in the same task, as soon as
 * the next event would take its estimated size past the frame limit, however many runs emit at
 * once and however large their events; and an event that cannot fit a frame on its own (a
 * vector of a million values) is not sent: the outbox throws, which fails the run that emitted
 * it and leaves the link and every other run alone.
 * @module
 */
import { create } from "@bufbuild/protobuf";
import {
  type NodeEnvelope,
  type RunEvent as WireRunEvent,
  RunEventBatchSchema,
} from "../../../proto/gen/iop/v1/node_pb.ts";
import { IopError } from "../../../shared/errors.ts";
import type { RunEvent } from "../../../shared/run.ts";
import { toWireRunEvent } from "../../../shared/run_codec.ts";
import type { RunEventSink } from "../node.ts";
import { utf8Length } from "../../../shared/utf8.ts";

/** Options of {@linkcode eventOutbox}. */
export interface EventOutboxOptions {
  /** The Edge accepts RunEventBatch frames (else every event is a frame of its own). */
  batches: boolean;
  /** The link's frame limit, in bytes of a frame's body. */
  maxFrameBytes: number;
}

/** What a frame's envelope and batch add around its events, with room to spare. */
const FRAME_OVERHEAD_BYTES = 64;

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

/**
 * A sink that sends each run event through `send`, batched as the module doc says. Throws an
 * IopError (BACKEND_ERROR) for an event too large for any frame, and sends nothing of it.
 */
export function eventOutbox(
  send: (msg: NodeEnvelope["msg"]) => void,
  options: EventOutboxOptions,
): RunEventSink {
  const budget = options.maxFrameBytes - FRAME_OVERHEAD_BYTES;
  let pending: WireRunEvent[] = [];
  let pendingBytes = 0;
  let queued = false;
  const flush = () => {
    const events = pending;
    if (events.length === 0) return;
    pending = [];
    pendingBytes = 0;
    if (events.length === 1) send({ case: "runEvent", value: events[0]! });
    else send({ case: "runEvents", value: create(RunEventBatchSchema, { events }) });
  };
  const flushQueued = () => {
    queued = false;
    flush();
  };
  return (event) => {
    const bytes = estimatedEventBytes(event);
    if (bytes > budget) {
      throw new IopError(
        "BACKEND_ERROR",
        `Cannot send the ${event.type} event of run '${event.runId}' as it takes about ` +
          `${bytes} bytes, more than the link's frame limit of ${options.maxFrameBytes} ` +
          "bytes (edge.max_frame_bytes)",
      );
    }
    const wire = toWireRunEvent(event);
    if (!options.batches) {
      send({ case: "runEvent", value: wire });
      return;
    }
    if (pendingBytes + bytes > budget) flush();
    pending.push(wire);
    pendingBytes += bytes;
    if (!queued) {
      queued = true;
      queueMicrotask(flushQueued);
    }
  };
}
