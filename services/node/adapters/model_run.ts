/**
 * The frame around one model-server run shared by the Ollama and OpenAI-compatible adapters:
 * limits from settings, a {@linkcode RequestGuard}, debug logs, metrics, and the rule that a
 * cancelled run rejects with the signal's reason and is not counted as a failure.
 * @module
 */
import { IopError, toIopError } from "../../../shared/errors.ts";
import { type Unhonoured, unhonoured } from "../../../shared/adapter_kinds/features.ts";
import type { KindFeatures } from "../../../shared/adapter_kinds/kind.ts";
import type { Logger } from "../../../shared/log.ts";
import type { ExecutionResult, ExecutionSpec, HttpModelSettings } from "../ports.ts";
import type { AdapterMetrics } from "./adapter_metrics.ts";
import { RequestGuard } from "./http_stream.ts";
import { traceIdOf } from "../../../shared/trace_context.ts";
import { startSpan } from "../../../shared/tracing.ts";

/** Options every model-server adapter accepts. */
export interface ModelAdapterOptions {
  /** Records time to first token, tokens and errors; absent = not recorded. */
  metrics?: AdapterMetrics;
  /** Defaults to a logger named after the adapter kind. */
  logger?: Logger;
  /** The largest embeddings answer read (default `MAX_EMBEDDINGS_ANSWER_BYTES`, 64 MiB). */
  maxEmbeddingsAnswerBytes?: number;
}

/** Who runs: the adapter's identity plus where it logs and records. */
export interface RunContext {
  kind: string;
  name: string;
  logger: Logger;
  metrics: AdapterMetrics | undefined;
}

/**
 * Runs `body` under a guard built from `settings` and `spec.timeoutMs`, logging and recording
 * the outcome; any failure becomes an IopError, a cancellation stays the signal's reason.
 */
export async function guardedRun(
  ctx: RunContext,
  spec: ExecutionSpec,
  settings: HttpModelSettings,
  signal: AbortSignal,
  body: (guard: RequestGuard) => Promise<ExecutionResult>,
): Promise<ExecutionResult> {
  const guard = new RequestGuard(signal, {
    connectTimeoutMs: settings.connectTimeoutMs,
    firstTokenTimeoutMs: settings.firstTokenTimeoutMs,
    idleTimeoutMs: settings.idleTimeoutMs,
    totalTimeoutMs: spec.timeoutMs,
  });
  // OpenTelemetry's GenAI operation names: "chat", or "embeddings" for an embedding run.
  const operation = spec.embed ? "embeddings" : "chat";
  const span = startSpan(`${operation} ${spec.target}`, {
    role: "client",
    parent: spec.traceParent,
    state: spec.traceState,
    attributes: {
      "gen_ai.operation.name": operation,
      "gen_ai.request.model": spec.target,
      "iop.adapter": ctx.name,
      "iop.adapter.kind": ctx.kind,
      "iop.run_id": spec.runId,
    },
  });
  // The backend's span is a child of the adapter's call, or of the run when tracing is off.
  const traceparent = span?.traceparent ?? spec.traceParent;
  const tracestate = span ? span.tracestate : spec.traceState;
  if (traceparent) {
    guard.traceHeaders = tracestate ? { traceparent, tracestate } : { traceparent };
  }
  const log = ctx.logger.with({
    run_id: spec.runId,
    target: spec.target,
    trace_id: traceIdOf(spec.traceParent),
  });
  log.debug("model request started");
  try {
    const result = await body(guard);
    guard.dispose();
    if (span) {
      if (result.usage) {
        span.set({
          "gen_ai.usage.input_tokens": result.usage.inputTokens,
          "gen_ai.usage.output_tokens": result.usage.outputTokens,
        });
      }
      span.set({ "gen_ai.response.finish_reasons": [result.finishReason] });
      span.end();
    }
    const ttft = guard.timeToFirstTokenSeconds;
    if (ttft !== undefined) ctx.metrics?.observeFirstToken(ctx.kind, ttft);
    if (result.usage) {
      ctx.metrics?.addTokens(ctx.kind, "input", result.usage.inputTokens);
      ctx.metrics?.addTokens(ctx.kind, "output", result.usage.outputTokens);
    }
    log.debug("model request finished", { finish_reason: result.finishReason });
    return result;
  } catch (err) {
    if (signal.aborted) {
      span?.end();
      log.debug("model request cancelled");
      throw signal.reason;
    }
    const failure = err instanceof IopError ? err : toIopError(err, "BACKEND_ERROR");
    span?.end({ code: failure.code, message: failure.message });
    ctx.metrics?.countError(ctx.kind, failure.code);
    log.debug("model request failed", { err: failure });
    throw failure;
  } finally {
    // A whole answer leaves its connection to the pool; anything else closes it.
    if (!guard.disposed) guard.abandon();
    guard.dispose();
  }
}

/** The API key from settings: `apiKey`, else the variable named by `apiKeyEnv`, else "". */
export function apiKeyOf(settings: HttpModelSettings): string {
  if (settings.apiKey !== "") return settings.apiKey;
  if (settings.apiKeyEnv === "") return "";
  try {
    return Deno.env.get(settings.apiKeyEnv) ?? "";
  } catch {
    return "";
  }
}

/** The base URL without trailing slashes. */
export function baseOf(settings: HttpModelSettings): string {
  return settings.baseUrl.replace(/\/+$/, "");
}

/**
 * Refuses a run this kind cannot honour (the Edge checks first; this holds for any other
 * caller) as INVALID_ARGUMENT, not retryable.
 */
export function refuseUnhonoured(
  kind: string,
  features: KindFeatures,
  spec: ExecutionSpec,
): void {
  const gap = unhonoured(features, spec);
  if (gap) throw unhonouredError(kind, gap);
}

/**
 * The INVALID_ARGUMENT a run gets for a field `kind` cannot honour: "Cannot run as image
 * (message 0, part 1): ollama takes images as data: URLs (base64) only, not as links".
 */
export function unhonouredError(kind: string, gap: Unhonoured): IopError {
  const where = gap.index === undefined
    ? ""
    : gap.part === undefined
    ? ` (message ${gap.index})`
    : ` (message ${gap.index}, part ${gap.part})`;
  return new IopError(
    "INVALID_ARGUMENT",
    `Cannot run as ${gap.field}${where}: ${kind} ${gap.reason}`,
  );
}
