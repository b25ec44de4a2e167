/**
 * The Edge's node wire server: accepts Node connections, runs the registration handshake,
 * keeps each link alive with heartbeats, and converts between wire messages and the service
 * layer's domain calls. The only Edge module that speaks NodeEnvelope.
 * @module
 */
import { create } from "@bufbuild/protobuf";
import {
  type EdgeNodeEvent,
  type NodeCommandRequest,
  NodeCommandRequestSchema,
  type NodeCommandResponse,
  type NodeEnvelope,
  NodeEnvelopeSchema,
  type RegisterRequest,
} from "../../../proto/gen/iop/v1/node_pb.ts";
import { IopError, unhandled } from "../../../shared/errors.ts";
import type { Logger } from "../../../shared/log.ts";
import { fromWireError, fromWireRunEvent, toRunRequest } from "../../../shared/run_codec.ts";
import {
  closedByPeer,
  FrameConnection,
  OversizeSendError,
  type WireMetrics,
} from "../../../shared/wire/connection.ts";
import { FrameError } from "../../../shared/wire/frame.ts";
import { type HeartbeatGroup, heartbeatGroup } from "../../../shared/wire/heartbeat.ts";
import { type Listener, listenFrames } from "../../../shared/wire/listener.ts";
import type { ListenTls } from "../../../shared/wire/tls.ts";
import { PendingRequests } from "../../../shared/wire/pending.ts";
import type { EdgeMetrics } from "../edge_metrics.ts";
import {
  type Admission,
  admitNode,
  isTemporaryRefusal,
  type RefusalCode,
  refused,
  shownId,
} from "../nodes/admission.ts";
import { buildNodeConfigPayload, type PayloadSettings } from "../nodes/mapper.ts";
import type { NodeSession } from "../nodes/registry.ts";
import type { NodeCommand, NodeCommandResult, NodeLink } from "../ports.ts";
import type { EdgeService } from "../service.ts";

/** Largest frame a node may send before it has registered (a register request is ~200 B). */
const REGISTER_FRAME_MAX_BYTES = 16 * 1024;

/** Wire protocol version this Edge speaks. */
export const NODE_PROTOCOL_VERSION = 2;

type Conn = FrameConnection<typeof NodeEnvelopeSchema, typeof NodeEnvelopeSchema>;

/** Options of {@linkcode startNodeServer}. */
export interface NodeServerOptions {
  hostname: string;
  port: number;
  service: EdgeService;
  logger: Logger;
  /**
   * Absent: plain TCP. With `clientCa`, nodes must show a certificate naming their id (or, for a
   * node enrolling by a rule, the rule's `iop://enroll/<rule>`).
   */
  tls?: ListenTls;
  wireMetrics?: WireMetrics;
  metrics?: EdgeMetrics;
}

/** The options of a running server, with what its connections share. */
type ServerContext = NodeServerOptions & {
  /** Every node link's heartbeat, on one timer: a thousand idle nodes wake the Edge less. */
  beats: HeartbeatGroup;
};

/**
 * Starts accepting Node connections; resolves once the port is bound. Closing it ends the runs
 * that wait for a node to come back: none can.
 */
export async function startNodeServer(options: NodeServerOptions): Promise<Listener> {
  const { service, logger } = options;
  const context: ServerContext = { ...options, beats: heartbeatGroup() };
  const listener = await listenFrames({
    hostname: options.hostname,
    port: options.port,
    logger,
    ...(options.tls ? { tls: options.tls } : {}),
    ...(options.wireMetrics
      ? { onHandshakeFailed: () => options.wireMetrics?.rejected("handshake") }
      : {}),
    maxPending: service.config.wire.maxPendingConnections,
    // A peer has register_timeout_ms to log in, the TLS handshake included.
    handshakeTimeoutMs: service.config.wire.registerTimeoutMs,
    ...(options.wireMetrics ? { onCrowded: () => options.wireMetrics?.rejected("crowded") } : {}),
    handle: async (raw, admitted) => {
      const conn: Conn = new FrameConnection(raw, {
        inSchema: NodeEnvelopeSchema,
        outSchema: NodeEnvelopeSchema,
        // Until it has registered, a peer may send only a small frame: an anonymous socket
        // announcing a 4 MiB frame is refused from its length prefix alone.
        maxFrameBytes: REGISTER_FRAME_MAX_BYTES,
        ...(options.wireMetrics ? { metrics: options.wireMetrics } : {}),
      });
      await serveNode(conn, context, admitted);
    },
  });
  const close = async () => {
    service.stopAwaitingNodes("the edge stopped serving nodes");
    await listener.close();
  };
  return {
    hostname: listener.hostname,
    port: listener.port,
    close,
    [Symbol.asyncDispose]: close,
  };
}

async function serveNode(
  conn: Conn,
  options: ServerContext,
  admitted: () => void,
): Promise<void> {
  const { service } = options;
  // With client certificates required, a node may register only under the id its certificate
  // names, whatever token it holds.
  const mutualTls = options.tls?.clientCa !== undefined;
  const wire = service.config.wire;
  const messages = conn.messages();
  const first = await firstMessage(messages, wire.registerTimeoutMs).catch((err: Error) => err);
  if (first instanceof Error || first.msg.case !== "registerRequest") {
    const reason = first instanceof Error
      ? first.message
      : `expected register_request as first frame, got ${first.msg.case ?? "an empty envelope"}`;
    refuse(conn, options, reason, "no_register");
    return;
  }
  const request = first.msg.value;
  const verdict = checkRegistration(request, conn.link.peerIds, mutualTls, service);
  if (!verdict.ok) {
    await conn.send(create(NodeEnvelopeSchema, {
      msg: {
        case: "registerResponse",
        value: {
          accepted: false,
          reason: verdict.reason,
          retryable: isTemporaryRefusal(verdict.code),
        },
      },
    })).catch(() => {});
    refuse(conn, options, verdict.reason, verdict.code, request.nodeId);
    return;
  }
  const pending = new PendingRequests<NodeCommandResponse>();
  const acks = batchAcks(conn);
  let session: NodeSession;
  try {
    session = await acceptNode(conn, { request, verdict, pending, acks }, options, admitted);
  } catch (err) {
    // Until the service took the node, the id it was admitted under is free again.
    verdict.seat.release();
    throw err;
  }
  await serveSession(conn, { session, pending, messages, acks }, options);
}

/** Answers an admitted node with its configuration and hands it to the service. */
async function acceptNode(
  conn: Conn,
  { request, verdict, pending, acks }: {
    request: RegisterRequest;
    verdict: Extract<Admission, { ok: true }>;
    pending: PendingRequests<NodeCommandResponse>;
    acks: RunAcker;
  },
  options: NodeServerOptions,
  admitted: () => void,
): Promise<NodeSession> {
  const { service } = options;
  const wire = service.config.wire;
  const record = verdict.record;
  // The connection keeps the interval it started with; a reload changes it for new ones.
  const payloadSettings = { heartbeatIntervalMs: wire.heartbeatIntervalMs };
  const configVersion = service.configVersion;
  // The connection keeps the window it was given, as the node counts in it.
  const runWindowBytes = service.config.runs.windowBytes;
  // Decided before the answer goes out: the node resumes exactly these and cancels the rest.
  const resumed = service.resumableRuns(
    record.id,
    request.heldRuns.map((held) => ({ runId: held.runId, lastSeq: Number(held.lastSeq) })),
  );
  await conn.send(create(NodeEnvelopeSchema, {
    msg: {
      case: "registerResponse",
      value: {
        accepted: true,
        config: buildNodeConfigPayload(record, payloadSettings),
        acceptsEventBatches: true,
        configVersion: BigInt(configVersion),
        runWindowBytes,
        resumedRuns: resumed.map((r) => ({ runId: r.runId, receivedSeq: BigInt(r.receivedSeq) })),
        maxFrameBytes: wire.maxFrameBytes,
      },
    },
  }));
  options.metrics?.registrations.labels("accepted").inc();
  conn.maxFrameBytes = wire.maxFrameBytes;
  // A node drops its link for a frame over its limit (the same setting on its side): a run too
  // large for it is refused here instead, and every other run on the link goes on.
  conn.maxSendBytes = wire.maxFrameBytes;
  admitted();
  return service.nodeConnected({
    record,
    link: createLink(conn, pending, acks, payloadSettings),
    seat: verdict.seat,
    version: request.version,
    hostname: request.host?.hostname ?? "",
    configVersion,
    runWindowBytes,
    resumed: resumed.map((r) => r.runId),
  });
}

/** Serves a registered node's link until it closes. */
async function serveSession(
  conn: Conn,
  { session, pending, messages, acks }: {
    session: NodeSession;
    pending: PendingRequests<NodeCommandResponse>;
    messages: AsyncGenerator<NodeEnvelope>;
    acks: RunAcker;
  },
  options: ServerContext,
): Promise<void> {
  const { service, logger } = options;
  const wire = service.config.wire;
  const record = session.record;
  const log = logger.with({ node_id: record.id, remote: conn.remote });
  log.info("node registered", {
    version: session.version,
    ...(record.enrolledBy ? { rule: record.enrolledBy } : {}),
  });

  const heartbeat = options.beats.start({
    intervalMs: wire.heartbeatIntervalMs,
    send: () => {
      acks.beforeSend();
      conn.send(create(NodeEnvelopeSchema, {
        msg: { case: "heartbeat", value: { sentAtMs: BigInt(Date.now()) } },
      })).catch(() => {});
    },
    onDead: (silentMs) => {
      options.wireMetrics?.rejected("heartbeat");
      log.warn("node missed heartbeats, closing its link", { silent_ms: silentMs });
      conn.close(`no heartbeat for ${silentMs} ms`);
    },
  });

  let reason = "connection closed";
  try {
    for await (const envelope of messages) {
      heartbeat.seen();
      session.lastSeenMs = Date.now();
      const violation = handleMessage(envelope, session, service, pending, log);
      if (violation) {
        options.wireMetrics?.rejected("protocol");
        log.warn("node broke the protocol, closing its link", { reason: violation });
        conn.close(violation);
        break;
      }
      if (session.abandoned) {
        // Closed here rather than by the node: no new run goes to a link it gave up on, and
        // its runs wait for it to register again, whatever frames arrived just before.
        conn.close("node gave up on the link");
        break;
      }
    }
  } catch (err) {
    if (err instanceof FrameError) log.warn("bad frame from node, closing its link", { err });
    else throw err;
  } finally {
    heartbeat.stop();
    conn.close();
    reason = await conn.closed;
    pending.rejectAll(new IopError("NODE_LOST", `Node '${record.id}' disconnected: ${reason}`));
    service.nodeDisconnected(session, reason, { peerClosed: closedByPeer(reason) });
    log.info("node disconnected", { reason });
  }
}

function firstMessage(
  messages: AsyncGenerator<NodeEnvelope>,
  timeoutMs: number,
): Promise<NodeEnvelope> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`no register_request within ${timeoutMs} ms`)),
      timeoutMs,
    );
  });
  const next = messages.next().then((r) => {
    if (r.done) throw new Error("connection closed before register_request");
    return r.value;
  });
  return Promise.race([next, timeout]).finally(() => clearTimeout(timer));
}

/**
 * A listed node by its record, another by an enrollment rule (`nodes/admission.ts`); with mutual
 * TLS, the certificate must name the node (or its rule) whatever token it holds.
 */
function checkRegistration(
  request: RegisterRequest,
  peerIds: readonly string[],
  mutualTls: boolean,
  service: EdgeService,
): Admission {
  if (request.protocolVersion !== NODE_PROTOCOL_VERSION) {
    return refused(
      "protocol",
      `unsupported protocol version ${request.protocolVersion} (edge speaks ${NODE_PROTOCOL_VERSION})`,
    );
  }
  const claim = {
    nodeId: request.nodeId,
    token: request.token,
    nodeKey: request.nodeKey,
    peerIds,
    mutualTls,
  };
  return admitNode(claim, service.nodeStore, service.enrollment);
}

function refuse(
  conn: Conn,
  options: NodeServerOptions,
  reason: string,
  code: RefusalCode,
  nodeId = "",
): void {
  options.metrics?.registrations.labels("refused").inc();
  options.metrics?.registrationRefusals.labels(code).inc();
  options.logger.warn("node registration refused", {
    node_id: shownId(nodeId),
    remote: conn.remote,
    refusal: code,
    reason,
  });
  options.service.publish({ type: "node_refused", atMs: Date.now(), remote: conn.remote, reason });
  conn.close(`registration refused: ${reason}`);
}

/** Returns a protocol violation, or undefined when the message was handled. */
function handleMessage(
  envelope: NodeEnvelope,
  session: NodeSession,
  service: EdgeService,
  pending: PendingRequests<NodeCommandResponse>,
  log: Logger,
): string | undefined {
  const msg = envelope.msg;
  switch (msg.case) {
    case "heartbeat":
      return undefined;
    case "runEvent": {
      const event = fromWireRunEvent(msg.value);
      if (!event) return "run_event without an event";
      service.runEvent(session, event);
      return undefined;
    }
    case "runEvents":
      for (const wire of msg.value.events) {
        const event = fromWireRunEvent(wire);
        if (!event) return "run_events with an empty event";
        service.runEvent(session, event);
      }
      return undefined;
    case "commandResponse":
      pending.settle(envelope.correlationId, msg.value);
      return undefined;
    case "nodeEvent":
      handleNodeEvent(msg.value, session, service, log);
      return undefined;
    case "registerRequest":
    case "registerResponse":
    case "runRequest":
    case "cancelRequest":
    case "commandRequest":
    case "configUpdate":
    case "runAcks":
      return `unexpected ${msg.case} from a registered node`;
    case undefined:
      return "empty envelope";
  }
  return unhandled(msg, "node envelope");
}

/** Applies a node's lifecycle or status news. */
function handleNodeEvent(
  event: EdgeNodeEvent,
  session: NodeSession,
  service: EdgeService,
  log: Logger,
): void {
  const ev = event.event;
  switch (ev.case) {
    case "configApplied":
      service.nodeAdaptersApplied(
        session,
        ev.value.adapters,
        { ...ev.value.rejected },
        Number(ev.value.version),
      );
      return;
    case "adapterHealth":
      service.nodeAdapterHealth(session, ev.value.adapter, ev.value.healthy, ev.value.detail);
      return;
    case "draining":
      // A stopping node: no new runs go to it; those in flight stream on until they end,
      // after which its link closing fails nothing. Marked on the session of this link: a
      // frame from a link a newer connection replaced leaves that newer one alone.
      log.info("node draining: it is stopping", {
        runs_in_flight: ev.value.runsInFlight,
        deadline_ms: ev.value.deadlineMs,
      });
      service.nodeStopping(session);
      return;
    case "linkAbandoned":
      log.warn("node gives up on its link: it heard nothing from the edge", {
        silent_ms: ev.value.silentMs,
      });
      session.abandoned = true; // the session's loop closes the link
      return;
    case "registered":
    case "disconnected":
    case undefined:
      // What the Edge tells the Control Plane about nodes, not news a node sends.
      log.debug("ignoring a node event the edge does not take from a node", {
        event: ev.case ?? "empty",
      });
      return;
  }
  unhandled(ev, "node event");
}

function createLink(
  conn: Conn,
  pending: PendingRequests<NodeCommandResponse>,
  acks: RunAcker,
  payloadSettings: PayloadSettings,
): NodeLink {
  return {
    run: (runId, input) => {
      // The frames leave in one write: a run's request carries the acks of the runs before it.
      acks.beforeSend();
      return conn.send(create(NodeEnvelopeSchema, {
        msg: { case: "runRequest", value: toRunRequest(runId, input) },
      })).catch((err) => {
        if (!(err instanceof OversizeSendError)) throw err;
        throw new IopError(
          "INVALID_ARGUMENT",
          `Cannot send the run as its request is ${err.bytes} bytes, over the node wire's ` +
            `limit of ${err.limit} bytes (wire.max_frame_bytes)`,
          { cause: err },
        );
      });
    },
    cancel: (runId, reason) => {
      conn.send(create(NodeEnvelopeSchema, {
        msg: { case: "cancelRequest", value: { runId, reason } },
      })).catch(() => {});
    },
    ack: acks.ack,
    command: async (command, timeoutMs) => {
      const { id, response } = pending.open(timeoutMs, `node command ${command.type}`);
      await conn.send(create(NodeEnvelopeSchema, {
        correlationId: id,
        msg: { case: "commandRequest", value: toWireCommand(command) },
      }));
      return fromWireCommandResponse(await response);
    },
    close: (reason) => conn.close(reason),
    configure: (record, version) =>
      conn.send(create(NodeEnvelopeSchema, {
        msg: {
          case: "configUpdate",
          value: {
            version: BigInt(version),
            config: buildNodeConfigPayload(record, payloadSettings),
          },
        },
      })),
  };
}

/**
 * The link's `ack`: acks given during one turn of the event loop leave together, one RunAcks
 * frame after the current microtasks, with the highest seq given for each run.
 */
function batchAcks(conn: Conn): RunAcker {
  const acks = new Map<string, number>();
  /** A credit is due: the acks leave at the end of this turn. */
  let soon = false;
  const flush = () => {
    soon = false;
    if (acks.size === 0) return;
    const batch = [];
    for (const [runId, seq] of acks) batch.push({ runId, seq: BigInt(seq) });
    acks.clear();
    // A link going down drops them: the node is told again where to resume.
    conn.send(create(NodeEnvelopeSchema, {
      msg: { case: "runAcks", value: { acks: batch } },
    })).catch(() => {});
  };
  return {
    ack: (runId, seq, final) => {
      if ((acks.get(runId) ?? 0) < seq) acks.set(runId, seq);
      // Final acks wait for the next frame to the node (a run request, a heartbeat at the
      // latest): nothing waits on them, and a run costs no frame of its own.
      if (final || soon) return;
      soon = true;
      queueMicrotask(flush);
    },
    beforeSend: flush,
  };
}

/** The acks of one link: `beforeSend` puts those waiting ahead of a frame about to leave. */
interface RunAcker {
  ack(runId: string, seq: number, final: boolean): void;
  beforeSend(): void;
}

function toWireCommand(command: NodeCommand): NodeCommandRequest {
  switch (command.type) {
    case "history":
      return create(NodeCommandRequestSchema, {
        command: { case: "history", value: { limit: command.limit } },
      });
    case "capabilities":
      return create(NodeCommandRequestSchema, { command: { case: "capabilities", value: {} } });
    case "run_output":
      return create(NodeCommandRequestSchema, {
        command: { case: "runOutput", value: { runId: command.runId } },
      });
  }
}

function fromWireCommandResponse(res: NodeCommandResponse): NodeCommandResult {
  const r = res.result;
  switch (r.case) {
    case "history":
      return {
        type: "history",
        runs: r.value.runs.map((run) => ({
          runId: run.runId,
          adapter: run.adapter,
          target: run.target,
          status: run.status,
          startedAtMs: Number(run.startedAtMs),
          firstOutputAtMs: Number(run.firstOutputAtMs),
          finishedAtMs: Number(run.finishedAtMs),
          usage: {
            inputTokens: run.usage?.inputTokens ?? 0,
            outputTokens: run.usage?.outputTokens ?? 0,
          },
          errorCode: run.error?.code ?? "",
          errorMessage: run.error?.message ?? "",
          outputSummary: run.outputSummary,
          exitCode: run.exitCode,
          ...(run.traceId ? { traceId: run.traceId } : {}),
        })),
      };
    case "capabilities":
      return {
        type: "capabilities",
        adapters: r.value.adapters.map((a) => ({
          name: a.name,
          kind: a.kind,
          healthy: a.healthy,
          detail: a.detail,
          targets: [...a.targets],
          streaming: a.streaming,
          tools: a.tools,
          sessions: a.sessions,
        })),
      };
    case "runOutput":
      return {
        type: "run_output",
        runId: r.value.runId,
        found: r.value.found,
        output: r.value.output,
        truncated: r.value.truncated,
      };
    case "error":
      throw fromWireError(r.value);
    case undefined:
      throw new IopError("INTERNAL", "Node answered a command with an empty result");
  }
}
