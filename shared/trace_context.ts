/**
 * W3C Trace Context (`traceparent`, `tracestate`): strict parsing, formatting and fresh ids.
 * No dependencies, no clock: cheap enough to run once per request whether tracing is on or not.
 * @module
 */

/** A parsed `traceparent`: whose trace, which span is the parent, whether it is sampled. */
export interface TraceContext {
  /** 32 lowercase hex digits, not all zero. */
  traceId: string;
  /** 16 lowercase hex digits, not all zero. */
  spanId: string;
  /** The `sampled` flag (bit 0 of trace-flags). */
  sampled: boolean;
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
const ZERO_TRACE = "0".repeat(32);
const ZERO_SPAN = "0".repeat(16);
/** Longest `tracestate` carried: the W3C limit of 32 members of at most 256 characters is far above it in practice. */
const MAX_TRACESTATE_CHARS = 512;

/**
 * Parses a `traceparent` header strictly: version `00`, lowercase hex ids of 32 and 16 digits
 * that are not all zero, two hex flag digits, nothing else. Anything else is undefined, so the
 * caller starts a trace of its own.
 */
export function parseTraceparent(value: string | null | undefined): TraceContext | undefined {
  if (!value || value.length !== 55) return undefined;
  const match = TRACEPARENT.exec(value);
  if (!match) return undefined;
  const [, traceId, spanId, flags] = match as unknown as [string, string, string, string];
  if (traceId === ZERO_TRACE || spanId === ZERO_SPAN) return undefined;
  return { traceId, spanId, sampled: (parseInt(flags, 16) & 1) === 1 };
}

/** The `traceparent` header of `context`. */
export function formatTraceparent(context: TraceContext): string {
  return `00-${context.traceId}-${context.spanId}-${context.sampled ? "01" : "00"}`;
}

/**
 * A `tracestate` fit to carry on, or undefined: empty, longer than 512 characters, or holding
 * characters outside printable ASCII is dropped (W3C: a malformed one may be discarded).
 */
export function cleanTracestate(value: string | null | undefined): string | undefined {
  if (!value) return undefined;
  const trimmed = value.trim();
  if (trimmed === "" || trimmed.length > MAX_TRACESTATE_CHARS) return undefined;
  return /^[\x20-\x7e]+$/.test(trimmed) ? trimmed : undefined;
}

/** 32 random lowercase hex digits (a UUIDv4 without its dashes: native and cheap per request). */
function randomHex32(): string {
  return crypto.randomUUID().replaceAll("-", "");
}

/** A fresh, sampled trace context with random ids (a new trace's root parent). */
export function freshTraceContext(): TraceContext {
  let traceId = randomHex32();
  while (traceId === ZERO_TRACE) traceId = randomHex32();
  let spanId = randomHex32().slice(16);
  while (spanId === ZERO_SPAN) spanId = randomHex32().slice(16);
  return { traceId, spanId, sampled: true };
}

/**
 * The trace id of a `traceparent` for log fields: the boundaries that take one in (HTTP
 * middleware, the wire codec) parse it strictly, so this only cuts it out; "" when absent.
 */
export function traceIdOf(traceparent: string | undefined): string {
  return traceparent?.length === 55 ? traceparent.slice(3, 35) : "";
}
