/**
 * Prometheus metrics of the Edge's public HTTP surfaces: requests by route and status, request
 * duration, time to first token, tokens in/out and output tokens per second. Route labels are
 * route patterns, never ids; model labels are the configured model a request resolved to (never
 * the client's raw string), or `unknown` before a handler named it.
 * @module
 */
import type { MiddlewareHandler } from "hono";
import { Counter, Histogram, type Registry } from "prom-client";

/** What the surfaces record into. */
export interface HttpMetrics {
  requests: Counter<"route" | "status">;
  duration: Histogram<"route">;
  firstToken: Histogram<"route" | "model">;
  tokens: Counter<"route" | "direction">;
  outputRate: Histogram<"model">;
}

/** Declares the surface metrics in `registry`. */
export function createHttpMetrics(registry: Registry): HttpMetrics {
  const registers = [registry];
  return {
    requests: new Counter({
      name: "iop_edge_http_requests_total",
      help: "Public API requests by route and HTTP status.",
      labelNames: ["route", "status"],
      registers,
    }),
    duration: new Histogram({
      name: "iop_edge_http_request_duration_seconds",
      help: "Time from request to the last byte of the response, by route.",
      labelNames: ["route"],
      buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
      registers,
    }),
    firstToken: new Histogram({
      name: "iop_edge_http_time_to_first_token_seconds",
      help: "Time from request to the first answer token sent to the client, by route and model.",
      labelNames: ["route", "model"],
      buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers,
    }),
    tokens: new Counter({
      name: "iop_edge_http_tokens_total",
      help: "Tokens of answered requests by route and direction (in, out).",
      labelNames: ["route", "direction"],
      registers,
    }),
    outputRate: new Histogram({
      name: "iop_edge_http_output_tokens_per_second",
      help: "Output tokens of a finished answer divided by the time from request to its usage, " +
        "by model.",
      labelNames: ["model"],
      buckets: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000],
      registers,
    }),
  };
}

/** Per-request recorder a handler uses for what only it knows (first token, usage). */
export interface RequestMeter {
  /**
   * Names the configured model the request resolved to; labels what is recorded after. Optional
   * so that a test double of the meter may leave it out.
   */
  model?(name: string): void;
  /** Records the first token once; later calls are ignored. */
  firstToken(): void;
  /** Records the answer's tokens once it finished, and its output tokens per second. */
  usage(inputTokens: number, outputTokens: number): void;
  /** Records the end of a streamed body (duration counts to the last byte). */
  streamEnded(): void;
}

/** Key under which the meter sits in the hono context. */
export const METER_KEY = "iopMeter";

/**
 * Middleware measuring one route: counts the request with its status, and its duration up to
 * the response (for streams, up to `streamEnded`).
 */
export function meterRoute(metrics: HttpMetrics | undefined, route: string): MiddlewareHandler {
  // The route's metric children are resolved once, the model's once per model: `labels()`
  // hashes its values, which adds up on every request of a hot route.
  const duration = metrics?.duration.labels(route);
  const tokensIn = metrics?.tokens.labels(route, "in");
  const tokensOut = metrics?.tokens.labels(route, "out");
  const byModel = new Map<string, { firstToken: Observer; outputRate: Observer }>();
  const modelMeters = (model: string) => {
    let meters = byModel.get(model);
    if (!meters && metrics) {
      meters = {
        firstToken: metrics.firstToken.labels(route, model),
        outputRate: metrics.outputRate.labels(model),
      };
      byModel.set(model, meters);
    }
    return meters;
  };
  return async function meterRouteMiddleware(c, next) {
    const start = performance.now();
    let sawFirst = false;
    let streaming = false;
    let ended = false;
    let model = "unknown";
    const finish = () => {
      if (ended) return;
      ended = true;
      duration?.observe((performance.now() - start) / 1000);
    };
    const meter: RequestMeter = {
      model: (name) => {
        model = name;
      },
      firstToken: () => {
        if (sawFirst) return;
        sawFirst = true;
        modelMeters(model)?.firstToken.observe((performance.now() - start) / 1000);
      },
      usage: (input, output) => {
        tokensIn?.inc(input);
        tokensOut?.inc(output);
        const seconds = (performance.now() - start) / 1000;
        if (output > 0 && seconds > 0) modelMeters(model)?.outputRate.observe(output / seconds);
      },
      streamEnded: finish,
    };
    c.set(METER_KEY as never, meter as never);
    await next();
    streaming = (c.res.headers.get("content-type") ?? "").match(/event-stream|ndjson/) !== null;
    metrics?.requests.labels(route, String(c.res.status)).inc();
    if (!streaming) finish();
  };
}

/** What a histogram child records into. */
interface Observer {
  observe(value: number): void;
}

/** The meter of the current request (a no-op one outside {@linkcode meterRoute}). */
export function meterOf(c: { get: (key: never) => unknown }): RequestMeter {
  return (c.get(METER_KEY as never) as RequestMeter | undefined) ??
    { model() {}, firstToken() {}, usage() {}, streamEnded() {} };
}
