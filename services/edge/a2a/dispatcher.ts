/**
 * The A2A JSON-RPC endpoint of one agent, on web-standard Request/Response. It validates the
 * envelope strictly (-32700 bad JSON, -32600 wrong shape, -32601 unknown method, -32602 bad
 * params), picks the dialect by method name (1.0 `SendMessage`… or 0.3 `message/send`…; the
 * names never overlap, so a request without `A2A-Version` is answered in 0.3 only when it uses
 * 0.3 names), and answers streams as SSE whose `data:` lines carry the request's id. Every
 * task lookup is scoped to the agent and the calling tenant.
 *
 * Streams are bounded (`sse_stream.ts`): while the client of the stream that started a task
 * reads nothing, the task's run is paused (the node stops producing) and, after
 * `runs.stall_timeout_ms`, cancelled by the Edge as on every surface; a resubscriber that falls
 * more than the task manager's `streamBufferBytes` behind gets a final -32000 error event
 * (`data.reason: "slow_consumer"`) and its stream closes, while the task goes on. A send answers only once its run
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
import { BoundedSse, SSE_HIGH_WATER_BYTES } from "./sse_stream.ts";
import type { A2aTaskManager, TaskScope, TaskWatch } from "./task_manager.ts";
import { isFinalState, type TaskUpdate, withHistory } from "./task_model.ts";

/** What the endpoint needs. */
export interface RpcContext {
  agent: AgentRecord;
  /** The tenant calling: it sees only the tasks it created. */
  caller: TenantRecord;
  tasks: A2aTaskManager;
  logger: Logger;
  /**
   * How long a stream may stay full (its client reading nothing) before it is cut off: the
   * Edge's `runs.stall_timeout_ms`; 0 = never.
   */
  stallTimeoutMs: number;
  /** A stream silent this long sends a keep-alive comment (`http.sse_keepalive_ms`); 0 = never. */
  keepAliveMs: number;
  /**
   * The node's flow-control window (`runs.window_bytes`): the stream that started a task may
   * hold this much more (four times, for JSON's escapes), as the node may still send up to a
   * window after the run was paused.
   */
  windowBytes: number;
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
      const watch = tasks.watch(scope, started.task.id, { drivesRun: true })!;
      try {
        await started.admitted;
      } catch (err) {
        watch.close();
        throw err;
      }
      return sse(dialect, id, watch, ctx, true);
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
      return sse(dialect, id, watch, ctx, false);
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

/** The SSE answer of a stream: the task as it stands, then its updates up to a final state. */
function sse(
  dialect: Dialect,
  id: RpcId,
  watch: TaskWatch,
  ctx: RpcContext,
  drivesRun: boolean,
): Response {
  const encoder = new TextEncoder();
  // Each frame's envelope is built as it is sent: one object per frame on the hot path.
  const frame = (result: unknown) =>
    encoder.encode(`data: ${JSON.stringify({ jsonrpc: "2.0", id, result })}\n\n`);
  const update = (u: TaskUpdate) => frame(dialect.encodeStreamUpdate(u));
  const { snapshot } = watch;
  const log = ctx.logger.with({ agent_id: ctx.agent.id, task_id: snapshot.id });
  const maxBufferedBytes = ctx.tasks.streamBufferBytes + (drivesRun ? 4 * ctx.windowBytes : 0);
  const stream = new BoundedSse({
    highWaterBytes: SSE_HIGH_WATER_BYTES,
    maxBufferedBytes,
    stallTimeoutMs: ctx.stallTimeoutMs,
    keepAliveMs: ctx.keepAliveMs,
  }, {
    onFull: (full) => watch.setReaderPaused(full),
    lagFrame: (maxBytes) =>
      encoder.encode(`data: ${
        JSON.stringify({
          jsonrpc: "2.0",
          id,
          error: {
            code: RPC_CODE.OVERLOADED,
            message: `Overloaded: this stream fell more than ${maxBytes} bytes behind task ` +
              `'${snapshot.id}' and was closed; the task goes on: get it, or subscribe to it again`,
            data: { reason: "slow_consumer", taskId: snapshot.id, maxBufferedBytes: maxBytes },
          },
        })
      }\n\n`),
    onDetach: (reason) => {
      // A stalled stream leaves its run paused: the Edge cancels the run once it has been
      // paused for runs.stall_timeout_ms, as on every surface, and the task says why.
      if (reason !== "stalled") watch.setReaderPaused(false);
      watch.close();
      if (reason === "stalled") {
        log.warn("a2a stream cut off: its client read nothing", {
          stall_timeout_ms: ctx.stallTimeoutMs,
        });
      } else if (reason === "lagged") {
        log.warn("a2a stream cut off: its client fell too far behind", {
          max_buffered_bytes: maxBufferedBytes,
        });
      }
    },
  });
  stream.send(frame(dialect.encodeStreamTask(snapshot)));
  if (isFinalState(snapshot.status.state)) {
    // A 0.3 client waits for `final: true`; a task already finished still sends one.
    stream.end(
      dialect.version === "0.3"
        ? update({
          kind: "status",
          taskId: snapshot.id,
          contextId: snapshot.contextId,
          status: snapshot.status,
          final: true,
        })
        : undefined,
    );
  } else {
    watch.updates.subscribe((u) => {
      if (u.kind === "status" && u.final) stream.end(update(u));
      else stream.send(update(u));
    });
  }
  return new Response(stream.body, {
    headers: {
      "Content-Type": "text/event-stream",
      "Cache-Control": "no-cache",
      "Connection": "keep-alive",
    },
  });
}
