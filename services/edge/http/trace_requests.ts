/**
 * The trace of each HTTP request: the client's W3C `traceparent` (parsed strictly, with its
 * `tracestate`) or a fresh one, made the current request trace for the handler, so a run it
 * submits joins the client's trace. While tracing is on, the request also gets a server span
 * (`<method> <route>`), which ends when the handler returns its response — for a stream, when
 * the stream begins; the run's own spans cover the rest.
 * @module
 */
import type { MiddlewareHandler } from "hono";
import {
  cleanTracestate,
  formatTraceparent,
  freshTraceContext,
  parseTraceparent,
} from "../../../shared/trace_context.ts";
import { type RequestTrace, startSpan, withTrace } from "../../../shared/tracing.ts";
import { callerName } from "./auth.ts";

/** Paths never traced: probes and scrapes, which run no model. */
const UNTRACED = new Set(["/healthz", "/readyz", "/metrics"]);

/** Middleware that gives every request a trace (see the module doc). */
export function traceRequests(): MiddlewareHandler {
  return async function traceRequest(c, next) {
    const path = c.req.path;
    if (UNTRACED.has(path)) return await next();
    const incoming = parseTraceparent(c.req.header("traceparent"));
    const state = incoming ? cleanTracestate(c.req.header("tracestate")) : undefined;
    const method = c.req.method;
    const span = startSpan(method, {
      role: "server",
      parent: incoming ? formatTraceparent(incoming) : undefined,
      state,
      attributes: { "http.request.method": method, "url.path": path },
    });
    const requestTrace: RequestTrace = span
      ? { traceparent: span.traceparent, tracestate: span.tracestate, span }
      : { traceparent: formatTraceparent(incoming ?? freshTraceContext()), tracestate: state };
    if (!span) return await withTrace(requestTrace, next);
    try {
      await withTrace(requestTrace, next);
    } finally {
      // The matched route of the last handler that ran, e.g. `/v1/chat/completions`.
      const route = c.req.routePath;
      if (route && route !== "*" && !route.endsWith("/*")) {
        span.rename(`${method} ${route}`);
        span.set({ "http.route": route });
      }
      const status = c.res.status;
      span.set({ "http.response.status_code": status, "iop.tenant": callerName(c) });
      span.end(status >= 500 ? { code: String(status), message: `HTTP ${status}` } : undefined);
    }
  };
}
