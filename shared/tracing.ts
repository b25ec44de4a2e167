/**
 * Distributed tracing for every tier: spans exported over OTLP/HTTP when the standard
 * `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, and nothing at
 * all otherwise — {@linkcode startSpan} then returns undefined, so callers write `span?.…` and
 * pay one branch. The OpenTelemetry SDK (`@opentelemetry/sdk-trace` with a batch processor and
 * the OTLP exporter) is loaded only when tracing is on.
 *
 * Environment: `OTEL_SERVICE_NAME` (default: the tier's, e.g. `iop-edge`),
 * `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_EXPORTER_OTLP_PROTOCOL` / `..._TRACES_PROTOCOL`
 * (`http/protobuf`, the default, or `http/json`), `OTEL_EXPORTER_OTLP_HEADERS` and `..._TIMEOUT`
 * (read by the exporter), `OTEL_BSP_SCHEDULE_DELAY`, `OTEL_BSP_MAX_QUEUE_SIZE` (spans beyond it
 * are dropped, never buffered without bound), `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`,
 * `OTEL_BSP_EXPORT_TIMEOUT`. `OTEL_SDK_DISABLED=true` turns it off.
 *
 * The trace of the request being served travels in an async-local {@linkcode RequestTrace}
 * (set by the HTTP surfaces and the command paths, read where a run is submitted); from there
 * on it is carried explicitly, as `traceParent` on the run.
 * @module
 */
import { AsyncLocalStorage } from "node:async_hooks";
import {
  type Attributes,
  createTraceState,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  trace,
  TraceFlags,
  type Tracer,
} from "@opentelemetry/api";
import type { Logger } from "./log.ts";
import { cleanTracestate, parseTraceparent } from "./trace_context.ts";

/** Attribute values a span takes: semantic-convention names (`http.route`) or `iop.*`. */
export type SpanAttributes = Record<string, string | number | boolean | string[] | undefined>;

/** What a span is to the trace: the standard OpenTelemetry span kinds. */
export type SpanRole = "server" | "client" | "internal" | "producer" | "consumer";

/** Options of {@linkcode startSpan}. */
export interface SpanOptions {
  role?: SpanRole;
  /** The parent's `traceparent`; absent or malformed starts a new trace. */
  parent?: string | undefined;
  /** The `tracestate` that travels with `parent`. */
  state?: string | undefined;
  attributes?: SpanAttributes;
}

/** A recording span; exists only while tracing is on. */
export interface TraceSpan {
  /** The `traceparent` that names this span as the parent. */
  readonly traceparent: string;
  /** The `tracestate` carried on with it, if any. */
  readonly tracestate: string | undefined;
  readonly traceId: string;
  /** Adds attributes; undefined values are skipped. */
  set(attributes: SpanAttributes): void;
  /** Renames the span (e.g. once the HTTP route is known). */
  rename(name: string): void;
  /** Records a point in time on the span. */
  event(name: string, attributes?: SpanAttributes): void;
  /**
   * Ends the span; with `failure` it ends with error status and `error.type` = its code. Only
   * the first call counts.
   */
  end(failure?: { code: string; message: string }): void;
}

/** The trace of the request or command being served, carried across its awaits. */
export interface RequestTrace {
  /** The `traceparent` children of this request take as parent. */
  traceparent: string;
  tracestate?: string | undefined;
  /** The request's own span, while tracing is on. */
  span?: TraceSpan | undefined;
}

const KINDS: Record<SpanRole, SpanKind> = {
  server: SpanKind.SERVER,
  client: SpanKind.CLIENT,
  internal: SpanKind.INTERNAL,
  producer: SpanKind.PRODUCER,
  consumer: SpanKind.CONSUMER,
};

interface Exporting {
  tracer: Tracer;
  flush(): Promise<void>;
  shutdown(): Promise<void>;
}

let active: Exporting | undefined;
const current = new AsyncLocalStorage<RequestTrace>();

function clean(attributes: SpanAttributes | undefined): Attributes | undefined {
  if (!attributes) return undefined;
  const out: Attributes = {};
  for (const [k, v] of Object.entries(attributes)) if (v !== undefined) out[k] = v;
  return out;
}

class OtelSpan implements TraceSpan {
  readonly #span: Span;
  #ended = false;
  readonly traceparent: string;
  readonly tracestate: string | undefined;
  readonly traceId: string;

  constructor(span: Span) {
    this.#span = span;
    const ctx = span.spanContext();
    this.traceId = ctx.traceId;
    const flags = (ctx.traceFlags & TraceFlags.SAMPLED) ? "01" : "00";
    this.traceparent = `00-${ctx.traceId}-${ctx.spanId}-${flags}`;
    this.tracestate = ctx.traceState?.serialize() || undefined;
  }

  set(attributes: SpanAttributes): void {
    this.#span.setAttributes(clean(attributes)!);
  }

  rename(name: string): void {
    this.#span.updateName(name);
  }

  event(name: string, attributes?: SpanAttributes): void {
    this.#span.addEvent(name, clean(attributes));
  }

  end(failure?: { code: string; message: string }): void {
    if (this.#ended) return;
    this.#ended = true;
    if (failure) {
      this.#span.setAttribute("error.type", failure.code);
      this.#span.setStatus({ code: SpanStatusCode.ERROR, message: failure.message });
    }
    this.#span.end();
  }
}

/** True while spans are exported (after {@linkcode initTracing} found an endpoint). */
export function tracingEnabled(): boolean {
  return active !== undefined;
}

/**
 * Starts a span when tracing is on; undefined (and no work) when it is off. The parent is the
 * given `traceparent`; without one the span roots a new trace.
 */
export function startSpan(name: string, options: SpanOptions = {}): TraceSpan | undefined {
  if (!active) return undefined;
  const parent = parseTraceparent(options.parent);
  let context = ROOT_CONTEXT;
  if (parent) {
    const state = cleanTracestate(options.state);
    context = trace.setSpanContext(ROOT_CONTEXT, {
      traceId: parent.traceId,
      spanId: parent.spanId,
      traceFlags: parent.sampled ? TraceFlags.SAMPLED : TraceFlags.NONE,
      isRemote: true,
      ...(state ? { traceState: createTraceState(state) } : {}),
    });
  }
  const attributes = clean(options.attributes);
  const span = active.tracer.startSpan(
    name,
    { kind: KINDS[options.role ?? "internal"], ...(attributes ? { attributes } : {}) },
    context,
  );
  return new OtelSpan(span);
}

/** Runs `fn` with `trace` as the current request trace (see {@linkcode currentTrace}). */
export function withTrace<T>(requestTrace: RequestTrace, fn: () => T): T {
  return current.run(requestTrace, fn);
}

/** The trace of the request or command being served, when there is one. */
export function currentTrace(): RequestTrace | undefined {
  return current.getStore();
}

/** Options of {@linkcode initTracing}. */
export interface TracingOptions {
  /** `service.name` when `OTEL_SERVICE_NAME` does not say: `iop-edge`, `iop-node`, `iop-cp`. */
  serviceName: string;
  serviceVersion?: string;
  /** Defaults to `Deno.env.get`; tests pass a map. */
  env?: (name: string) => string | undefined;
}

function readEnv(name: string): string | undefined {
  try {
    return Deno.env.get(name);
  } catch {
    return undefined;
  }
}

function positive(value: string | undefined): number | undefined {
  const n = Number(value);
  return value !== undefined && value !== "" && Number.isInteger(n) && n > 0 ? n : undefined;
}

/**
 * Parses `OTEL_RESOURCE_ATTRIBUTES` (`key=value,key2=value2`, values percent-encoded); a
 * malformed member is skipped.
 */
export function resourceAttributes(value: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const member of (value ?? "").split(",")) {
    const eq = member.indexOf("=");
    if (eq <= 0) continue;
    const key = member.slice(0, eq).trim();
    try {
      const v = decodeURIComponent(member.slice(eq + 1).trim());
      if (key !== "") out[key] = v;
    } catch {
      // A bad percent-escape: the member is skipped, as the specification allows.
    }
  }
  return out;
}

/**
 * Turns tracing on when an OTLP endpoint is configured, loading the SDK; resolves to whether it
 * did. Call once at process start; a second call is a no-op.
 */
export async function initTracing(options: TracingOptions): Promise<boolean> {
  if (active) return true;
  const env = options.env ?? readEnv;
  if (env("OTEL_SDK_DISABLED")?.trim().toLowerCase() === "true") return false;
  const signalUrl = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")?.trim();
  const baseUrl = env("OTEL_EXPORTER_OTLP_ENDPOINT")?.trim();
  if (!signalUrl && !baseUrl) return false;
  const url = signalUrl || `${baseUrl!.replace(/\/+$/, "")}/v1/traces`;
  const protocol = (env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") ??
    env("OTEL_EXPORTER_OTLP_PROTOCOL") ?? "http/protobuf").trim();
  if (protocol !== "http/protobuf" && protocol !== "http/json") {
    throw new RangeError(
      `Cannot start tracing as OTEL_EXPORTER_OTLP_PROTOCOL must be http/protobuf or http/json: current value is '${protocol}'`,
    );
  }
  const [{ TracerProvider, BatchSpanProcessor }, resources, exporterModule] = await Promise.all([
    import("@opentelemetry/sdk-trace"),
    import("@opentelemetry/resources"),
    protocol === "http/json"
      ? import("@opentelemetry/exporter-trace-otlp-http")
      : import("@opentelemetry/exporter-trace-otlp-proto"),
  ]);
  // OTEL_RESOURCE_ATTRIBUTES, then OTEL_SERVICE_NAME, override the tier's defaults.
  const resource = resources.resourceFromAttributes({
    "service.name": options.serviceName,
    ...(options.serviceVersion ? { "service.version": options.serviceVersion } : {}),
    ...resourceAttributes(env("OTEL_RESOURCE_ATTRIBUTES")),
    ...(env("OTEL_SERVICE_NAME")?.trim()
      ? { "service.name": env("OTEL_SERVICE_NAME")!.trim() }
      : {}),
  });
  const exporter = new exporterModule.OTLPTraceExporter({ url });
  const processor = new BatchSpanProcessor({
    exporter,
    maxQueueSize: positive(env("OTEL_BSP_MAX_QUEUE_SIZE")) ?? 2048,
    maxExportBatchSize: positive(env("OTEL_BSP_MAX_EXPORT_BATCH_SIZE")) ?? 512,
    scheduledDelayMillis: positive(env("OTEL_BSP_SCHEDULE_DELAY")) ?? 5000,
    exportTimeoutMillis: positive(env("OTEL_BSP_EXPORT_TIMEOUT")) ?? 30000,
  });
  const provider = new TracerProvider({ resource, spanProcessors: [processor] });
  active = {
    tracer: provider.getTracer("iop", options.serviceVersion),
    flush: () => provider.forceFlush(),
    shutdown: () => provider.shutdown(),
  };
  return true;
}

/** Exports every span still queued and turns tracing off; call on graceful stop. */
export async function shutdownTracing(): Promise<void> {
  const exporting = active;
  active = undefined;
  await exporting?.shutdown();
}

/** Exports every span still queued now (tests, and before a hard exit). */
export async function flushTracing(): Promise<void> {
  await active?.flush();
}

/**
 * {@linkcode initTracing} for a tier's `main.ts`: logs whether spans are exported, and on a bad
 * setting (an unknown protocol) logs why and runs without tracing rather than not at all.
 */
export async function setUpTracing(
  options: TracingOptions & { logger: Pick<Logger, "info" | "warn"> },
): Promise<void> {
  try {
    if (await initTracing(options)) {
      options.logger.info("tracing on: exporting spans over OTLP/HTTP", {
        service_name: (options.env ?? readEnv)("OTEL_SERVICE_NAME") || options.serviceName,
      });
    }
  } catch (err) {
    options.logger.warn("tracing off: cannot start the span exporter", { err });
  }
}
