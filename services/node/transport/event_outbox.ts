/**
 * The Node's outbox of run events: sends them in order, and those emitted in one turn of the
 * event loop (the deltas of one backend read, a run's output and its completion a few promise
 * hops later, the vectors of an embedding answer, the events of every run whose backend answered
 * in that turn) as one RunEventBatch frame when the Edge accepts batches. The batch leaves with
 * `setImmediate`, after the turn's I/O callbacks and their promise chains, not at the first
 * microtask checkpoint: a non-streamed answer's output and completion then cost the link one
 * write and the Edge one wake-up instead of two.
 * Without batches every event leaves at once. A run's `started` event leaves in its own turn:
 * held for the run's first output it saved a non-streamed run a frame, but cost a stream's first
 * chunk about a millisecond at concurrency 1 (the Edge then woke cold for it).
 *
 * A receiver closes a link that sends a frame over its limit (`edge.max_frame_bytes`, 4 MiB by
 * default), which ends every run on it. So a batch leaves early, in the same task, as soon as
 * the next event would take its estimated size past the frame limit, however many runs emit at
 * once and however large their events. An event that cannot fit a frame on its own (a vector
 * of a million values) must not reach the outbox: its sender refuses it first with
 * {@linkcode refuseOversized} (the run ledger does, for every event), which fails the run that
 * emitted it and leaves the link and every other run alone. The outbox trusts that and does not
 * check again.
 * @module
 */
import { setImmediate } from "node:timers";
import { create } from "@bufbuild/protobuf";
import {
  type NodeEnvelope,
  type RunEvent as WireRunEvent,
  RunEventBatchSchema,
} from "../../../proto/gen/iop/v1/node_pb.ts";
import { IopError } from "../../../shared/errors.ts";
import type { RunEvent } from "../../../shared/run.ts";
import { toWireRunEvent } from "../../../shared/run_codec.ts";
import { estimatedEventBytes } from "../../../shared/run_event_size.ts";

/** Options of {@linkcode eventOutbox}. */
export interface EventOutboxOptions {
  /** The Edge accepts RunEventBatch frames (else every event is a frame of its own). */
  batches: boolean;
  /** The link's frame limit, in bytes of a frame's body. */
  maxFrameBytes: number;
}

/** What a frame's envelope and batch add around its events, with room to spare. */
const FRAME_OVERHEAD_BYTES = 64;

/** Takes a run event, with its `estimatedEventBytes` when the caller has counted them. */
export type OutboxSink = (event: RunEvent, bytes?: number) => void;

/**
 * Throws the IopError (BACKEND_ERROR) that refuses `event`, of about `bytes`, when it cannot fit
 * one frame of a link limited to `maxFrameBytes`.
 */
export function refuseOversized(event: RunEvent, bytes: number, maxFrameBytes: number): void {
  if (bytes <= maxFrameBytes - FRAME_OVERHEAD_BYTES) return;
  throw new IopError(
    "BACKEND_ERROR",
    `Cannot send the ${event.type} event of run '${event.runId}' as it takes about ` +
      `${bytes} bytes, more than the link's frame limit of ${maxFrameBytes} ` +
      "bytes (edge.max_frame_bytes)",
  );
}

/** The outbox of one link. */
export interface EventOutbox {
  /** Queues a run event for the next batch. */
  emit: OutboxSink;
  /** Sends at once what waits for the end of the turn: before the link closes. */
  flush(): void;
}

/**
 * An outbox that sends each run event through `send`, batched as the module doc says. The
 * caller has refused events too large for a frame ({@linkcode refuseOversized}).
 */
export function eventOutbox(
  send: (msg: NodeEnvelope["msg"]) => void,
  options: EventOutboxOptions,
): EventOutbox {
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
  const emit: OutboxSink = (event, bytes = estimatedEventBytes(event)) => {
    const wire = toWireRunEvent(event);
    if (!options.batches) {
      send({ case: "runEvent", value: wire });
      return;
    }
    if (pendingBytes + bytes > budget) flush();
    pending.push(wire);
    pendingBytes += bytes;
    if (queued) return;
    queued = true;
    setImmediate(flushQueued);
  };
  return { emit, flush };
}
