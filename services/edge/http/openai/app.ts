/**
 * The OpenAI-compatible surface, mounted at `/v1`: `GET /v1/models`,
 * `POST /v1/chat/completions` and `POST /v1/responses`, streaming and not. Every request
 * becomes a run through the service layer; a client that goes away cancels it.
 * @module
 */
import { Hono } from "hono";
import { apiKeyAuth, callerOf } from "../auth.ts";
import { currentBodyLimit } from "../body_limit.ts";
import {
  checkDeclared,
  checkFeatures,
  type FeatureFields,
  modelFeatures,
} from "../capabilities.ts";
import { type HttpMetrics, meterOf, meterRoute } from "../http_metrics.ts";
import { requireJsonBody } from "../json_content_type.ts";
import { readJsonBody } from "../json_fields.ts";
import { modelsFor, resolveModel, submissionFor } from "../model_resolver.ts";
import { SSE_KEEP_ALIVE } from "../idle_ticker.ts";
import { collectAnswer, type KeepAlive, startRun, streamBody } from "../run_bridge.ts";
import { chatChunks, chatCompletion, parseChatRequest } from "./chat.ts";
import {
  openaiErrorResponse,
  openaiMethodNotAllowed,
  openaiNotFound,
  openaiUnauthorized,
} from "./errors.ts";
import {
  parseResponsesRequest,
  responseEvents,
  responseObject,
  responsesFeatureFields,
} from "./responses.ts";
import {
  continueConversation,
  deleteResponse,
  listInputItems,
  responseKeeper,
  retrieveResponse,
} from "./stored_responses.ts";
import type { Logger } from "../../../../shared/log.ts";
import { mountEmbeddings } from "./embeddings.ts";
import type { ResponseStore, RunGateway } from "../../ports.ts";
import { servableModels } from "../../servable.ts";
import { sessionFor, sessionHeaders } from "../session_header.ts";

/** Dependencies of {@linkcode createOpenAIApp}. */
export interface OpenAIAppDeps {
  service: RunGateway;
  metrics?: HttpMetrics;
  /** Where Responses API responses are stored; without it none is (`store: false` answers). */
  responses?: ResponseStore;
  logger?: Logger;
}

/** How Chat Completions names the fields the capability check refuses. */
const CHAT_FIELDS: FeatureFields = {
  output_format: "response_format",
  tool_choice: "tool_choice",
  parallel_tool_calls: "parallel_tool_calls",
  tool_result: (i) => `messages[${i}].tool_call_id`,
  image: (i, j) => `messages[${i}].content[${j}]`,
  embed: "input",
  tools: "tools",
  truncate: "truncate",
  sampling: "input",
};

const sseKeepAlive = (everyMs: number): KeepAlive => ({ everyMs, text: SSE_KEEP_ALIVE });

const SSE_HEADERS = {
  "content-type": "text/event-stream; charset=utf-8",
  "cache-control": "no-cache",
  "x-accel-buffering": "no",
};

/** Builds the `/v1` sub-app. */
export function createOpenAIApp(deps: OpenAIAppDeps): Hono {
  const { service, metrics } = deps;
  const app = new Hono();
  app.use(
    "*",
    apiKeyAuth({ tenants: () => service.config.tenants, unauthorized: openaiUnauthorized }),
  );
  app.use(
    "*",
    currentBodyLimit(() => service.config.http.maxBodyBytes, (c, limit) =>
      c.json({
        error: {
          message: `The request body exceeds the limit of ${limit} bytes`,
          type: "invalid_request_error",
          param: null,
          code: "request_too_large",
        },
      }, 413)),
  );
  app.onError((err, c) => openaiErrorResponse(c, err));
  app.notFound(openaiNotFound);

  // Only models some connected, healthy node can run now (see servable.ts).
  app.get("/models", meterRoute(metrics, "/v1/models"), (c) => {
    const status = service.status();
    const created = Math.floor(status.startedAtMs / 1000);
    return c.json({
      object: "list",
      data: servableModels(modelsFor(service.config, callerOf(c)), status).map((id) => ({
        id,
        object: "model",
        created,
        owned_by: "iop",
        capabilities: modelFeatures(service.config, resolveModel(service.config, id)),
      })),
    });
  });

  app.get("/models/:model{.+}", meterRoute(metrics, "/v1/models/:model"), (c) => {
    const model = resolveModel(service.config, c.req.param("model"), callerOf(c));
    const created = Math.floor(service.status().startedAtMs / 1000);
    return c.json({
      id: model.name,
      object: "model",
      created,
      owned_by: "iop",
      capabilities: modelFeatures(service.config, model),
    });
  });

  const parseOptions = () => ({
    allowMockMetadata: service.config.http.allowMockMetadata,
    allowImageLinks: service.config.http.allowImageLinks,
  });
  const json = requireJsonBody();
  app.post("/chat/completions", meterRoute(metrics, "/v1/chat/completions"), json, async (c) => {
    const signal = c.req.raw.signal;
    const req = parseChatRequest(await readJsonBody(c.req.raw), parseOptions());
    const model = resolveModel(service.config, req.model, callerOf(c));
    checkDeclared(model, req.input, CHAT_FIELDS);
    checkFeatures(service.config, model, req.input, CHAT_FIELDS);
    req.input.sessionId = sessionFor(c.req.raw, model, service);
    const run = await startRun(
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
      const answer = await collectAnswer(run.events);
      meter.firstToken();
      meter.usage(answer.usage.inputTokens, answer.usage.outputTokens);
      return c.json(chatCompletion(req.model, answer), 200, session);
    }
    const body = streamBody(
      run,
      (out) => chatChunks(req.model, req.includeUsage, meter, out),
      meter.streamEnded,
      sseKeepAlive(service.config.http.sseKeepaliveMs),
    );
    return new Response(body, { headers: { ...SSE_HEADERS, ...session } });
  });

  app.post("/responses", meterRoute(metrics, "/v1/responses"), json, async (c) => {
    const signal = c.req.raw.signal;
    const parse = parseOptions();
    const req = parseResponsesRequest(await readJsonBody(c.req.raw), parse);
    const model = resolveModel(service.config, req.model, callerOf(c));
    checkDeclared(model, req.input, responsesFeatureFields(req));
    const refused = continueConversation(c, req, model, deps.responses, {
      maxHistoryBytes: service.config.wire.maxFrameBytes,
      parse,
    });
    if (refused) return refused;
    checkFeatures(service.config, model, req.input, responsesFeatureFields(req));
    req.input.sessionId = sessionFor(c.req.raw, model, service);
    const run = await startRun(
      service,
      submissionFor(model, req.input),
      signal,
      callerOf(c),
      model.name,
    );
    const meter = meterOf(c);
    meter.model?.(model.name);
    const session = sessionHeaders(req.input.sessionId);
    const keep = responseKeeper(c, req, deps.responses, deps.logger);
    if (!req.stream) {
      const answer = await collectAnswer(run.events);
      meter.firstToken();
      meter.usage(answer.usage.inputTokens, answer.usage.outputTokens);
      return c.json(responseObject(req, answer, keep), 200, session);
    }
    const body = streamBody(
      run,
      (out) => responseEvents(req, meter, out, keep),
      meter.streamEnded,
      sseKeepAlive(service.config.http.sseKeepaliveMs),
    );
    return new Response(body, { headers: { ...SSE_HEADERS, ...session } });
  });

  app.get(
    "/responses/:id",
    meterRoute(metrics, "/v1/responses/:id"),
    (c) => retrieveResponse(c, deps.responses),
  );
  app.get(
    "/responses/:id/input_items",
    meterRoute(metrics, "/v1/responses/:id/input_items"),
    (c) => listInputItems(c, deps.responses),
  );
  app.delete(
    "/responses/:id",
    meterRoute(metrics, "/v1/responses/:id"),
    (c) => deleteResponse(c, deps.responses),
  );

  mountEmbeddings(app, { service, metrics });

  // Known paths asked with another method (mounted routes match in order, these last).
  app.all("/models", openaiMethodNotAllowed("GET"));
  app.all("/models/:model{.+}", openaiMethodNotAllowed("GET"));
  app.all("/chat/completions", openaiMethodNotAllowed("POST"));
  app.all("/responses", openaiMethodNotAllowed("POST"));
  app.all("/responses/:id", openaiMethodNotAllowed("GET, DELETE"));
  app.all("/responses/:id/input_items", openaiMethodNotAllowed("GET"));

  return app;
}
