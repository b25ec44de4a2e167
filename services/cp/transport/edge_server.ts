/**
 * The Control Plane's edge wire server: accepts Edge connections, checks each hello, keeps the
 * link alive with heartbeats, asks for status right after attach, and routes relayed events,
 * status reports and command progress/results into the registry and the command center. The
 * only Control Plane module that speaks EdgeEnvelope.
 * @module
 */
import { create } from "@bufbuild/protobuf";
import {
  type EdgeEnvelope,
  EdgeEnvelopeSchema,
  type EdgeHello,
  type EdgeStatusResponse,
} from "../../../proto/gen/iop/v1/control_pb.ts";
import { IopError, unhandled } from "../../../shared/errors.ts";
import type { Logger } from "../../../shared/log.ts";
import { hashSecret, secretMatches } from "../../../shared/secrets.ts";
import { FrameConnection, type WireMetrics } from "../../../shared/wire/connection.ts";
import { FrameError } from "../../../shared/wire/frame.ts";
import { startHeartbeat } from "../../../shared/wire/heartbeat.ts";
import { type Listener, listenFrames } from "../../../shared/wire/listener.ts";
import { identityRefusal, type ListenTls } from "../../../shared/wire/tls.ts";
import { PendingRequests } from "../../../shared/wire/pending.ts";
import type { CommandCenter } from "../commands.ts";
import type { CpConfig } from "../config.ts";
import type { EdgeLinkPort, EdgeRegistry } from "../registry.ts";

/** Control Plane wire protocol version this Control Plane speaks. */
export const CP_PROTOCOL_VERSION = 1;

/** Compared against when an unknown edge id claims to attach, so that it costs the same time. */
const NO_EDGE_CREDENTIAL = hashSecret(crypto.randomUUID());

/** Quiet time after a relayed event before the edge is asked for fresh status. */
const STATUS_REFRESH_DEBOUNCE_MS = 150;

/** Largest frame an edge may send before its hello is accepted (a hello is well under 1 KiB). */
const HELLO_FRAME_MAX_BYTES = 16 * 1024;

type Conn = FrameConnection<typeof EdgeEnvelopeSchema, typeof EdgeEnvelopeSchema>;

/** Options of {@linkcode startEdgeServer}. */
export interface EdgeServerOptions {
  config: CpConfig;
  registry: EdgeRegistry;
  commands: CommandCenter;
  logger: Logger;
  /** Absent: plain TCP. With `clientCa`, edges must show a certificate naming their id. */
  tls?: ListenTls;
  wireMetrics?: WireMetrics;
  /** Counts hellos by verdict. */
  onHello?: (verdict: "accepted" | "refused") => void;
}

/** Starts accepting Edge connections; resolves once the port is bound. */
export function startEdgeServer(options: EdgeServerOptions): Promise<Listener> {
  const wire = options.config.wire;
  return listenFrames({
    hostname: wire.host,
    port: wire.port,
    logger: options.logger,
    ...(options.tls ? { tls: options.tls } : {}),
    ...(options.wireMetrics
      ? { onHandshakeFailed: () => options.wireMetrics?.rejected("handshake") }
      : {}),
    maxPending: wire.maxPendingConnections,
    // An edge has hello_timeout_ms to log in, the TLS handshake included.
    handshakeTimeoutMs: wire.helloTimeoutMs,
    ...(options.wireMetrics ? { onCrowded: () => options.wireMetrics?.rejected("crowded") } : {}),
    handle: async (raw, admitted) => {
      const conn: Conn = new FrameConnection(raw, {
        inSchema: EdgeEnvelopeSchema,
        outSchema: EdgeEnvelopeSchema,
        // Until its hello is accepted, a peer may send only a small frame.
        maxFrameBytes: HELLO_FRAME_MAX_BYTES,
        ...(options.wireMetrics ? { metrics: options.wireMetrics } : {}),
      });
      await serveEdge(conn, options, admitted);
    },
  });
}

async function serveEdge(
  conn: Conn,
  options: EdgeServerOptions,
  admitted: () => void,
): Promise<void> {
  const { config, registry, commands, logger } = options;
  const messages = conn.messages();
  const timer = setTimeout(
    () => conn.close(`no hello within ${config.wire.helloTimeoutMs} ms`),
    config.wire.helloTimeoutMs,
  );
  const first = await messages.next().catch((err: Error) => err).finally(() => clearTimeout(timer));
  if (first instanceof Error || first.done || first.value.msg.case !== "hello") {
    const reason = first instanceof Error
      ? first.message
      : first.done
      ? await conn.closed
      : `expected hello as first frame, got ${first.value.msg.case ?? "an empty envelope"}`;
    refuse(conn, options, reason, "");
    return;
  }
  const hello = first.value.msg.value;
  // With client certificates required, an edge may attach only under the id its certificate
  // names, whatever credential it holds.
  const verdict =
    identityRefusal(conn.link, options.tls?.clientCa !== undefined, "edge", hello.edgeId) ??
      checkHello(hello, config);
  if (verdict) {
    await conn.send(create(EdgeEnvelopeSchema, {
      msg: { case: "helloAck", value: { accepted: false, reason: verdict } },
    })).catch(() => {});
    refuse(conn, options, verdict, hello.edgeId);
    return;
  }
  await conn.send(create(EdgeEnvelopeSchema, {
    msg: {
      case: "helloAck",
      value: {
        accepted: true,
        heartbeatIntervalMs: config.wire.heartbeatIntervalMs,
        controlPlaneId: config.controlPlane.id,
      },
    },
  }));
  options.onHello?.("accepted");
  conn.maxFrameBytes = config.wire.maxFrameBytes;
  admitted();
  const pending = new PendingRequests<EdgeStatusResponse>();
  const link = createLink(conn, pending);
  const attachment = registry.attach({
    edgeId: hello.edgeId,
    version: hello.version,
    capabilities: [...hello.capabilities],
    labels: { ...hello.labels },
  }, link);
  const log = logger.with({ edge_id: hello.edgeId, remote: conn.remote });
  log.info("edge attached", { version: hello.version });
  registry.refresh(hello.edgeId, config.registry.statusTimeoutMs).catch((err) =>
    log.warn("first status request failed", { err })
  );

  const heartbeat = startHeartbeat({
    intervalMs: config.wire.heartbeatIntervalMs,
    send: () => {
      conn.send(create(EdgeEnvelopeSchema, {
        msg: { case: "heartbeat", value: { sentAtMs: BigInt(Date.now()) } },
      })).catch(() => {});
    },
    onDead: (silentMs) => {
      options.wireMetrics?.rejected("heartbeat");
      log.warn("edge missed heartbeats, closing its link", { silent_ms: silentMs });
      conn.close(`no heartbeat for ${silentMs} ms`);
    },
  });
  // News from the edge usually changes its status: ask again, at most once per quiet spell.
  let refreshTimer: ReturnType<typeof setTimeout> | undefined;
  const refreshSoon = () => {
    if (refreshTimer !== undefined) return;
    refreshTimer = setTimeout(() => {
      refreshTimer = undefined;
      registry.refresh(hello.edgeId, config.registry.statusTimeoutMs).catch(() => {});
    }, STATUS_REFRESH_DEBOUNCE_MS);
  };
  try {
    for await (const envelope of messages) {
      heartbeat.seen();
      registry.touch(hello.edgeId);
      if (envelope.msg.case === "event") refreshSoon();
      const violation = handle(envelope, hello.edgeId, options, pending);
      if (violation) {
        options.wireMetrics?.rejected("protocol");
        log.warn("edge broke the protocol, closing its link", { reason: violation });
        conn.close(violation);
        break;
      }
    }
  } catch (err) {
    if (err instanceof FrameError) log.warn("bad frame from edge, closing its link", { err });
    else throw err;
  } finally {
    heartbeat.stop();
    clearTimeout(refreshTimer);
    conn.close();
    const reason = await conn.closed;
    pending.rejectAll(
      new IopError("UNAVAILABLE", `Edge '${hello.edgeId}' disconnected: ${reason}`),
    );
    if (registry.detach(attachment, reason)) commands.edgeLost(hello.edgeId, reason);
    log.info("edge detached", { reason });
  }
}

/**
 * Refuses a hello unless its credential is the one `wire.edges` gives the edge id it claims.
 * The check runs before the registry sees the edge, so a refused claim never displaces an edge
 * attached under that id; a valid one (a legitimate reconnect) replaces the older link. The
 * reason names the claimed id, never the credential, and is the same for an unknown id.
 */
function checkHello(hello: EdgeHello, config: CpConfig): string | undefined {
  if (hello.protocolVersion !== CP_PROTOCOL_VERSION) {
    return `unsupported protocol version ${hello.protocolVersion} (control plane speaks ${CP_PROTOCOL_VERSION})`;
  }
  if (hello.edgeId.trim() === "") return "empty edge id";
  const grant = config.wire.edges.find((e) => e.id === hello.edgeId);
  const matches = secretMatches(hello.credential, grant?.credential ?? NO_EDGE_CREDENTIAL);
  if (!grant || !matches) return `credential is not valid for edge id '${hello.edgeId}'`;
  return undefined;
}

function refuse(conn: Conn, options: EdgeServerOptions, reason: string, edgeId: string): void {
  options.onHello?.("refused");
  options.logger.warn("edge refused", { edge_id: edgeId, remote: conn.remote, reason });
  conn.close(`refused: ${reason}`);
}

/** Returns a protocol violation, or undefined when the message was handled. */
function handle(
  envelope: EdgeEnvelope,
  edgeId: string,
  options: EdgeServerOptions,
  pending: PendingRequests<EdgeStatusResponse>,
): string | undefined {
  const msg = envelope.msg;
  switch (msg.case) {
    case "heartbeat":
      return undefined;
    case "statusResponse":
      // An unsolicited report is as good as a requested one.
      if (!pending.settle(envelope.correlationId, msg.value)) {
        options.registry.recordStatus(edgeId, msg.value);
      }
      return undefined;
    case "event":
      options.registry.recordEvent(edgeId, msg.value);
      return undefined;
    case "commandProgress":
      options.commands.progress(edgeId, msg.value);
      return undefined;
    case "commandResult":
      options.commands.result(edgeId, msg.value);
      return undefined;
    case "hello":
    case "helloAck":
    case "statusRequest":
    case "commandRequest":
      return `unexpected ${msg.case} from an attached edge`;
    case undefined:
      return "empty envelope";
  }
  return unhandled(msg, "edge envelope");
}

function createLink(conn: Conn, pending: PendingRequests<EdgeStatusResponse>): EdgeLinkPort {
  return {
    requestStatus: async (timeoutMs, request) => {
      const { id, response } = pending.open(timeoutMs, "edge status request");
      await conn.send(create(EdgeEnvelopeSchema, {
        correlationId: id,
        msg: { case: "statusRequest", value: request ?? {} },
      }));
      return await response;
    },
    sendCommand: (request) =>
      conn.send(create(EdgeEnvelopeSchema, { msg: { case: "commandRequest", value: request } })),
    close: (reason) => conn.close(reason),
  };
}
