/**
 * Mounts the Edge's public API surfaces onto its HTTP app. Each surface is a Hono sub-app built
 * from the service layer; none reaches a backend except through a run on a Node.
 * @module
 */
import type { Context, Hono } from "hono";
import type { Registry } from "prom-client";
import type { Logger } from "../../../shared/log.ts";
import { createA2aSurface } from "../a2a/surface.ts";
import type { A2aTaskManager } from "../a2a/task_manager.ts";
import { apiKeyAuth, callerOf } from "./auth.ts";
import { currentBodyLimit } from "./body_limit.ts";
import { createHttpMetrics } from "./http_metrics.ts";
import { requireJsonBody } from "./json_content_type.ts";
import { createOllamaApp, ollamaNotFound } from "./ollama/app.ts";
import { createOpenAIApp } from "./openai/app.ts";
import { openaiNotFound } from "./openai/errors.ts";
import { refuse } from "./refusal.ts";
import type { ResponseStore, RunGateway } from "../ports.ts";

/** What every surface may use. */
export interface SurfaceDeps {
  service: RunGateway;
  registry: Registry;
  logger: Logger;
  /** A2A task manager; the A2A surface is mounted only when it is given. */
  a2aTasks?: A2aTaskManager;
  /** Version string published in agent cards. */
  version?: string;
  /** The store of Responses API responses (`responses.store_path`); none is stored without it. */
  responses?: ResponseStore;
}

/** Adds every public surface to `app`. */
export function mountSurfaces(app: Hono, deps: SurfaceDeps): void {
  mountA2a(app, deps);
  mountModelApis(app, deps);
}

/**
 * OpenAI-compatible `/v1/*` and Ollama-compatible `/api/*` (the base app's `/api/iop/status`
 * is registered first and keeps precedence), plus Ollama's `GET /` liveness text.
 */
function mountModelApis(app: Hono, deps: SurfaceDeps): void {
  const metrics = createHttpMetrics(deps.registry);
  app.route(
    "/v1",
    createOpenAIApp({
      service: deps.service,
      metrics,
      ...(deps.responses ? { responses: deps.responses } : {}),
      logger: deps.logger.with({ surface: "openai" }),
    }),
  );
  app.route(
    "/api",
    createOllamaApp({
      service: deps.service,
      metrics,
      logger: deps.logger.with({ surface: "ollama" }),
    }),
  );
  app.get("/", (c) => c.text("Ollama is running"));
  // A mounted app's own notFound never runs: unknown paths answer here, in each API's shape.
  app.notFound((c) => {
    const path = new URL(c.req.url).pathname;
    if (path === "/v1" || path.startsWith("/v1/")) return openaiNotFound(c);
    if (path === "/api" || path.startsWith("/api/")) return ollamaNotFound(c);
    return c.json({ error: `unknown path ${c.req.method} ${path}` }, 404);
  });
}

/**
 * A2A: the default agent's card at `/.well-known/agent-card.json`, each agent's card at
 * `/a2a/<agent-id>/.well-known/agent-card.json`, JSON-RPC at `/a2a/<agent-id>` (`/a2a` serves
 * the default agent). Cards are public; JSON-RPC needs an API key when the config lists keys,
 * and is served as the key's tenant (its agents, its tasks, its limits).
 */
function mountA2a(app: Hono, deps: SurfaceDeps): void {
  const tasks = deps.a2aTasks;
  if (!tasks) return;
  const a2a = createA2aSurface({
    config: () => deps.service.config,
    tasks,
    logger: deps.logger.with({ surface: "a2a" }),
    version: deps.version ?? "0.0.0",
  });
  app.get("/.well-known/agent-card.json", (c) => a2a.card(c.req.raw));
  app.get("/a2a/.well-known/agent-card.json", (c) => a2a.card(c.req.raw));
  app.get(
    "/a2a/:agent/.well-known/agent-card.json",
    (c) => a2a.card(c.req.raw, c.req.param("agent")),
  );
  const auth = apiKeyAuth({
    tenants: () => deps.service.config.tenants,
    unauthorized: a2aUnauthorized,
  });
  // The body is limited as it streams in, before the endpoint reads it whole.
  const limit = currentBodyLimit(
    () => deps.service.config.http.maxBodyBytes,
    (c, max) =>
      refuse(c, {
        status: 413,
        code: "request_too_large",
        message: `The request body exceeds the limit of ${max} bytes`,
      }),
  );
  const json = requireJsonBody();
  app.post("/a2a", auth, json, limit, (c) => a2a.rpc(c.req.raw, undefined, callerOf(c)));
  app.post(
    "/a2a/:agent",
    auth,
    json,
    limit,
    (c) => a2a.rpc(c.req.raw, c.req.param("agent"), callerOf(c)),
  );
  // Known paths asked with another method: JSON-RPC takes POST, cards GET (and HEAD).
  for (const path of ["/a2a", "/a2a/:agent"]) app.all(path, rpcMethodNotAllowed);
  for (const path of CARD_PATHS) app.all(path, cardMethodNotAllowed);
}

const CARD_PATHS = [
  "/.well-known/agent-card.json",
  "/a2a/.well-known/agent-card.json",
  "/a2a/:agent/.well-known/agent-card.json",
];

/**
 * A2A leaves authentication to HTTP (401 with `WWW-Authenticate`) and has no JSON-RPC code for
 * it; the body is a JSON-RPC error all the same (-32600, as the request is refused as sent, with
 * the id unknown since the body was not read), whose message says "Unauthorized" first: the
 * `@a2a-js/sdk` client throws the body's error, its message, and drops the HTTP status.
 */
function a2aUnauthorized(c: Context, message: string): Response {
  return c.json(
    { jsonrpc: "2.0", id: null, error: { code: -32600, message: `Unauthorized: ${message}` } },
    401,
    { "www-authenticate": 'Bearer realm="a2a"' },
  );
}

/** 405 for a JSON-RPC endpoint asked with another method than POST, as a JSON-RPC error. */
function rpcMethodNotAllowed(c: Context): Response {
  const path = new URL(c.req.url).pathname;
  return c.json(
    {
      jsonrpc: "2.0",
      id: null,
      error: {
        code: -32600,
        message: `Invalid request: method ${c.req.method} is not allowed on ${path}; use POST`,
      },
    },
    405,
    { allow: "POST" },
  );
}

/** 405 for an agent card asked with another method than GET, in the cards' `{error}` shape. */
function cardMethodNotAllowed(c: Context): Response {
  const path = new URL(c.req.url).pathname;
  return c.json({ error: `method ${c.req.method} not allowed on ${path}; use GET` }, 405, {
    allow: "GET",
  });
}
