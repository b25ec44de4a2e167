/**
 * The A2A JSON-RPC endpoint of one agent, on web-standard Request/Response. It validates the
 * envelope strictly (-32700 bad JSON, -32600 wrong shape, -32601 unknown method, -32602 bad
 * params), picks the dialect by method name (1.0 `SendMessage`… or 0.3 `message/send`…; the
 * names never overlap, so a request without `A2A-Version` is answered in 0.3 only when it uses
 * 0.3 names), and answers streams as SSE whose `data:` lines carry the request's id. Every
 * task lookup is scoped to the agent and the calling tenant. A send answers only once its run
 * was admitted, so a refusal (-32000 Overloaded) comes back as HTTP 429 with `Retry-After`
 * instead of as a task that fails.
 * @module
 */
import type { Logger } from "../../../shared/log.ts";
import type { AgentRecord } from "../config.ts";
import type { TenantRecord } from "../tenants/tenant.ts";
import { V03_DIALECT } from "./codec_v03.ts";
import { V1_DIALECT } from "./codec_v1.ts";
import type { Dialect } from "./dialect.ts";
import { isObject } from "./params.ts";
import { A2aRpcError, invalidParams, RPC_CODE, taskNotFound } from "./rpc_error.ts";
import type { A2aTaskManager, TaskScope, TaskWatch } from "./task_manager.ts";
import { withHistory } from "./task_model.ts";

/** What the endpoint needs. */
export interface RpcContext {
  agent: AgentRecord;
  /** The tenant calling: it sees only the tasks it created. */
  caller: TenantRecord;
  tasks: A2aTaskManager;
  logger: Logger;
}

type RpcId = string | number | null;

const SUPPORTED_VERSIONS = /^(0\.3|1\.0|1)(\.\d+)?$/;

function rpcError(id: RpcId, err: A2aRpcError): Response {
  const error = { code: err.code, message: err.message, ...(err.data ? { data: err.data } : {}) };
  const headers: Record<string, string> = err.retryAfterSeconds === undefined
    ? {}
    : { "Retry-After": String(err.retryAfterSeconds) };
  return Response.json({ jsonrpc: "2.0", id, error }, { status: err.httpStatus ?? 200, headers });
}

/** Answers one JSON-RPC request to `ctx.agent`. */
export async function handleRpc(request: Request, ctx: RpcContext): Promise<Response> {
  let id: RpcId = null;
  try {
    // Its size was bounded as it arrived (the surface's body limit answers 413).
    const body = await request.text();
    let parsed: unknown;
    try {
      parsed = JSON.parse(body);
    } catch (err) {
      throw new A2aRpcError(RPC_CODE.PARSE_ERROR, `Parse error: ${(err as Error).message}`);
    }
    if (!isObject(parsed)) {
      throw new A2aRpcError(RPC_CODE.INVALID_REQUEST, "Invalid request: expected one JSON object");
    }
    const rawId = parsed.id;
    if (typeof rawId === "string" || (typeof rawId === "number" && Number.isInteger(rawId))) {
      id = rawId;
    } else {
      throw new A2aRpcError(
        RPC_CODE.INVALID_REQUEST,
        "Invalid request: 'id' must be a string or integer",
      );
    }
    if (parsed.jsonrpc !== "2.0") {
      throw new A2aRpcError(RPC_CODE.INVALID_REQUEST, "Invalid request: 'jsonrpc' must be \"2.0\"");
    }
    if (typeof parsed.method !== "string" || parsed.method === "") {
      throw new A2aRpcError(RPC_CODE.INVALID_REQUEST, "Invalid request: 'method' must be a string");
    }
    const params = parsed.params;
    if (params !== undefined && params !== null && typeof params !== "object") {
      throw new A2aRpcError(
        RPC_CODE.INVALID_REQUEST,
        "Invalid request: 'params' must be structured",
      );
    }
    const version = request.headers.get("A2A-Version");
    if (version && !SUPPORTED_VERSIONS.test(version.trim())) {
      throw new A2aRpcError(
        RPC_CODE.VERSION_NOT_SUPPORTED,
        `A2A version '${version}' is not supported; use 1.0 or 0.3`,
      );
    }
    const method = parsed.method;
    const dialect = V1_DIALECT.methods.has(method)
      ? V1_DIALECT
      : V03_DIALECT.methods.has(method)
      ? V03_DIALECT
      : undefined;
    if (!dialect) {
      throw new A2aRpcError(RPC_CODE.METHOD_NOT_FOUND, `Method not found: '${method}'`);
    }
    if (Array.isArray(params)) throw invalidParams("params", "must be an object, not an array");
    return await dispatch(dialect, method, params ?? undefined, id, ctx);
  } catch (err) {
    if (err instanceof A2aRpcError) return rpcError(id, err);
    ctx.logger.error("a2a request failed inside the edge", { agent_id: ctx.agent.id, err });
    return rpcError(id, new A2aRpcError(RPC_CODE.INTERNAL_ERROR, "Internal error"));
  }
}

async function dispatch(
  dialect: Dialect,
  method: string,
  params: unknown,
  id: RpcId,
  ctx: RpcContext,
): Promise<Response> {
  const { agent, tasks } = ctx;
  const scope: TaskScope = { agentId: agent.id, owner: ctx.caller.name };
  const tenant = { tenant: ctx.caller };
  const ok = (result: unknown) => Response.json({ jsonrpc: "2.0", id, result });
  switch (dialect.methods.get(method)!) {
    case "send": {
      const send = dialect.decodeSend(params);
      const started = tasks.start(agent, send.message, tenant);
      await started.admitted;
      const task = send.blocking
        ? await tasks.settled(scope, started.task.id)
        : tasks.get(scope, started.task.id) ?? started.task;
      return ok(dialect.encodeSendResult(withHistory(task, send.historyLength)));
    }
    case "stream": {
      const send = dialect.decodeSend(params);
      const started = tasks.start(agent, send.message, tenant);
      const watch = tasks.watch(scope, started.task.id)!;
      try {
        await started.admitted;
      } catch (err) {
        watch.close();
        throw err;
      }
      return sse(dialect, id, watch);
    }
    case "get": {
      const q = dialect.decodeTaskQuery(params);
      const task = tasks.get(scope, q.id);
      if (!task) throw taskNotFound(q.id);
      return ok(dialect.encodeTask(withHistory(task, q.historyLength)));
    }
    case "list":
      return ok(dialect.encodePage(tasks.list(scope, dialect.decodeList(params))));
    case "cancel": {
      const q = dialect.decodeTaskId(params);
      return ok(dialect.encodeTask(await tasks.cancel(scope, q.id)));
    }
    case "subscribe": {
      const q = dialect.decodeTaskId(params);
      const watch = tasks.watch(scope, q.id);
      if (!watch) throw taskNotFound(q.id);
      return sse(dialect, id, watch);
    }
    case "push_config":
      throw new A2aRpcError(
        RPC_CODE.PUSH_NOTIFICATION_NOT_SUPPORTED,
        "Push notifications are not supported by this agent",
      );
    case "extended_card":
      throw new A2aRpcError(-32007, "This agent has no extended agent card");
  }
}

function sse(dialect: Dialect, id: RpcId, watch: TaskWatch): Response {
  const encoder = new TextEncoder();
  const frame = (result: unknown) =>
    encoder.encode(`data: ${JSON.stringify({ jsonrpc: "2.0", id, result })}\n\n`);
  const body = new ReadableStream<Uint8Array>({
    async start(controller) {
      try {
        controller.enqueue(frame(dialect.encodeStreamTask(watch.snapshot)));
        let sawFinal = false;
        for await (const update of watch.updates) {
          controller.enqueue(frame(dialect.encodeStreamUpdate(update)));
          if (update.kind === "status" && update.final) sawFinal = true;
        }
        const { snapshot } = watch;
        if (!sawFinal && dialect.version === "0.3") {
          // A 0.3 client waits for `final: true`; a task already finished still sends one.
          controller.enqueue(frame(dialect.encodeStreamUpdate({
            kind: "status",
            taskId: snapshot.id,
            contextId: snapshot.contextId,
            status: snapshot.status,
            final: true,
          })));
        }
        controller.close();
      } catch {
        // The client went away; the task runs on.
      } finally {
        watch.close();
      }
    },
    cancel() {
      watch.close();
    },
  });
  return new Response(body, {
    headers: {
      "Content-Type": "text/event-stream",
      "Cache-Control": "no-cache",
      "Connection": "keep-alive",
    },
  });
}
