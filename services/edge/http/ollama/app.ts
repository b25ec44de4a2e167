/**
 * The Ollama-compatible surface, mounted at `/api`: `GET /api/tags`, `/api/ps`, `/api/version`,
 * `POST /api/show`, `/api/chat` and `/api/generate` (NDJSON streaming by default), so tools that
 * speak Ollama can use the whole fleet. Every chat or generate request becomes a run through the
 * service layer; the model routes answer from the config, the status snapshot and (`/api/ps`)
 * the caller's own runs in flight.
 * @module
 */
import { type Context, Hono } from "hono";
import { httpStatusOf, OverloadedError, toIopError } from "../../../../shared/errors.ts";
import { TenantLimitError } from "../../tenants/limiter.ts";
import { apiKeyAuth, callerOf } from "../auth.ts";
import { currentBodyLimit } from "../body_limit.ts";
import { checkDeclared, checkFeatures, type FeatureFields } from "../capabilities.ts";
import type { Logger } from "../../../../shared/log.ts";
import { type HttpMetrics, meterOf, meterRoute } from "../http_metrics.ts";
import { requireJsonBody } from "../json_content_type.ts";
import { readJsonBody } from "../json_fields.ts";
import { modelsFor, resolveModel, submissionFor } from "../model_resolver.ts";
import { digestOf, modelDetails } from "./model_info.ts";
import { runningModels } from "./running.ts";
import { parseShowRequest, showResponse } from "./show.ts";
import { collectAnswer, startRun, streamBody } from "../run_bridge.ts";
import {
  ollamaAnswer,
  ollamaLines,
  type OllamaRequest,
  parseOllamaChat,
  parseOllamaGenerate,
} from "./convert.ts";
import { mountOllamaEmbed } from "./embed.ts";
import type { RunGateway } from "../../ports.ts";
import { servableModels } from "../../servable.ts";
import { sessionFor, sessionHeaders } from "../session_header.ts";

/** The message Ollama answers with when its queue is full. */
export const OLLAMA_BUSY = "server busy, please try again.  maximum pending requests exceeded";

/** The Ollama version this surface reports to clients that check it. */
export const OLLAMA_COMPAT_VERSION = "0.6.4";

/**
 * How Ollama requests name the fields the capability check refuses; Ollama has no
 * `tool_choice` or `parallel_tool_calls`, so runs from this surface never carry them.
 */
const OLLAMA_FIELDS: FeatureFields = {
  output_format: "format",
  tool_choice: "tool_choice",
  parallel_tool_calls: "parallel_tool_calls",
  tool_result: (i) => `messages[${i}].tool_name`,
  image: (i) => `messages[${i}].images`,
  embed: "input",
  tools: "tools",
  truncate: "truncate",
  sampling: "options",
};

/** `/api/generate` takes its images at the top level (`images`), not per message. */
const GENERATE_FIELDS: FeatureFields = { ...OLLAMA_FIELDS, image: () => "images" };

/** Dependencies of {@linkcode createOllamaApp}. */
export interface OllamaAppDeps {
  service: RunGateway;
  metrics?: HttpMetrics;
  /** Where dropped `options` are warned about; absent: not logged. */
  logger?: Logger;
}

/** Answers with Ollama's `{"error": "..."}` for anything thrown. */
export function ollamaErrorResponse(c: Context, err: unknown): Response {
  const e = toIopError(err);
  // A tenant over its limit is told so (429); a full pool looks like a busy Ollama server.
  if (err instanceof TenantLimitError) {
    return c.json({ error: err.message }, 429, { "retry-after": String(err.retryAfterSeconds) });
  }
  if (e.code === "OVERLOADED") {
    const headers: Record<string, string> = {};
    if (err instanceof OverloadedError) headers["retry-after"] = String(err.retryAfterSeconds);
    return c.json({ error: OLLAMA_BUSY }, 503, headers);
  }
  const message = e.code === "NOT_FOUND" && e.message.startsWith("The model '")
    ? `model '${e.message.slice("The model '".length, e.message.lastIndexOf("'"))}' not found`
    : e.message;
  return c.json({ error: message }, httpStatusOf(e.code) as 400);
}

/** Builds the `/api` sub-app (without `/api/iop/*`, which the base app serves). */
export function createOllamaApp(deps: OllamaAppDeps): Hono {
  const { service, metrics } = deps;
  const app = new Hono();
  app.use(
    "*",
    apiKeyAuth({
      tenants: () => service.config.tenants,
      unauthorized: (c) => c.json({ error: "unauthorized" }, 401),
    }),
  );
  app.use(
    "*",
    currentBodyLimit(
      () => service.config.http.maxBodyBytes,
      (c, limit) => c.json({ error: `request body exceeds the limit of ${limit} bytes` }, 413),
    ),
  );
  app.onError((err, c) => ollamaErrorResponse(c, err));

  app.get("/version", (c) => c.json({ version: OLLAMA_COMPAT_VERSION }));

  // Only models some connected, healthy node can run now (see servable.ts).
  app.get("/tags", meterRoute(metrics, "/api/tags"), async (c) => {
    const status = service.status();
    const modifiedAt = new Date(status.startedAtMs).toISOString();
    const models = await Promise.all(
      servableModels(modelsFor(service.config, callerOf(c)), status).map(async (name) => ({
        name,
        model: name,
        modified_at: modifiedAt,
        size: 0,
        digest: await digestOf(name),
        details: modelDetails(),
      })),
    );
    return c.json({ models });
  });

  // The models the caller's own runs are in flight on at this Edge (see running.ts).
  app.get("/ps", meterRoute(metrics, "/api/ps"), async (c) => {
    const caller = callerOf(c);
    const inFlight = service.tenants.modelsInFlight(caller.name);
    const models = modelsFor(service.config, caller);
    return c.json({ models: await runningModels(models, inFlight, Date.now()) });
  });

  // Any model the caller may use, servable now or not; another tenant's model is not found.
  app.post("/show", meterRoute(metrics, "/api/show"), requireJsonBody(), async (c) => {
    const req = parseShowRequest(await readJsonBody(c.req.raw));
    const model = resolveModel(service.config, req.model, callerOf(c));
    const modifiedAt = new Date(service.status().startedAtMs).toISOString();
    return c.json(showResponse(service.config, model, req, modifiedAt));
  });

  const run = (kind: "chat" | "generate", parse: typeof parseOllamaChat) => async (c: Context) => {
    const signal = c.req.raw.signal;
    const startedNs = performance.now() * 1e6;
    const req: OllamaRequest = parse(await readJsonBody(c.req.raw));
    if (req.droppedOptions.length > 0) {
      deps.logger?.warn("ollama options dropped", {
        route: `/api/${kind}`,
        options: req.droppedOptions.join(","),
      });
    }
    const model = resolveModel(service.config, req.model, callerOf(c));
    const fields = kind === "generate" ? GENERATE_FIELDS : OLLAMA_FIELDS;
    checkDeclared(model, req.input, fields);
    checkFeatures(service.config, model, req.input, fields);
    req.input.sessionId = sessionFor(c.req.raw, model, service);
    const started = await startRun(
      service,
      submissionFor(model, req.input),
      signal,
      callerOf(c),
      model.name,
    );
    const meter = meterOf(c);
    meter.model?.(model.name);
    const session = sessionHeaders(req.input.sessionId);
    if (!req.stream) {
      const answer = await collectAnswer(started.events);
      meter.firstToken();
      meter.usage(answer.usage.inputTokens, answer.usage.outputTokens);
      return c.json(ollamaAnswer(kind, req.model, answer, startedNs), 200, session);
    }
    const body = streamBody(
      started,
      (out) => ollamaLines(kind, req.model, startedNs, meter, out),
      meter.streamEnded,
    );
    return new Response(body, {
      headers: { "content-type": "application/x-ndjson", ...session },
    });
  };
  const json = requireJsonBody();
  app.post("/chat", meterRoute(metrics, "/api/chat"), json, run("chat", parseOllamaChat));
  app.post(
    "/generate",
    meterRoute(metrics, "/api/generate"),
    json,
    run("generate", parseOllamaGenerate),
  );
  mountOllamaEmbed(app, deps);
  // Known paths asked with another method. The allowed method passes on, so a route registered
  // after this table still answers it (HEAD is served by each GET route).
  const methods: [string, string][] = [
    ["/version", "GET"],
    ["/tags", "GET"],
    ["/ps", "GET"],
    ["/show", "POST"],
    ["/chat", "POST"],
    ["/generate", "POST"],
    ["/embed", "POST"],
    ["/embeddings", "POST"],
  ];
  for (const [path, allow] of methods) {
    app.all(
      path,
      (c, next) =>
        c.req.method === allow || (allow === "GET" && c.req.method === "HEAD")
          ? next()
          : c.json({ error: `method ${c.req.method} not allowed; use ${allow}` }, 405, { allow }),
    );
  }
  return app;
}

/** Answers an unknown `/api` path in Ollama's `{"error": …}` shape. */
export function ollamaNotFound(c: Context): Response {
  return c.json({ error: `unknown path ${c.req.method} ${new URL(c.req.url).pathname}` }, 404);
}
