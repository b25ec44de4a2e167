/**
 * The Edge's link to a Control Plane: dials out, says hello with its id and credential, answers
 * status requests from the service layer (with run counters per pool, see `run_counters.ts`) and
 * read-only node queries (history, a run's output), relays bus events and agent state changes, and runs
 * commands through the service layer within their deadline. A command outlives a lost link (up
 * to its deadline); a result that cannot be delivered is kept and sent after the next hello.
 * After any loss it redials with exponential backoff and jitter; the Edge serves everything
 * meanwhile. The address is read anew before each dial, and a
 * config reload that changes it re-points the link. The only Edge module that speaks
 * EdgeEnvelope.
 * @module
 */
import { create } from "@bufbuild/protobuf";
import {
  type EdgeCommandRequest,
  type EdgeCommandResult,
  type EdgeEnvelope,
  EdgeEnvelopeSchema,
} from "../../../proto/gen/iop/v1/control_pb.ts";
import { unhandled } from "../../../shared/errors.ts";
import type { Logger } from "../../../shared/log.ts";
import { FrameConnection, type WireMetrics } from "../../../shared/wire/connection.ts";
import { startHeartbeat } from "../../../shared/wire/heartbeat.ts";
import type { DomainAgents } from "../agents/domain_agents.ts";
import type { EdgeService } from "../service.ts";
import { agentRelayedEvent, toRelayedEvent, toStatusResponse } from "./codec.ts";
import { executeWithDeadline } from "./commands.ts";
import { answerNodeQuery } from "./node_query.ts";
import { countRuns, RunCounters } from "./run_counters.ts";
import { DEFAULT_MAX_FRAME_BYTES } from "../../../shared/wire/frame.ts";
import { dialLink } from "../../../shared/wire/link.ts";
import { loadDialTls, requireLinkSecurity } from "../../../shared/wire/tls.ts";

/** Control Plane wire protocol version this Edge speaks. */
export const CP_PROTOCOL_VERSION = 1;

/** What this Edge offers the fleet, sent in its hello. */
export const EDGE_CAPABILITIES = ["status", "events", "run", "cancel", "drain", "reload", "agents"];

/** Undelivered command results kept for the next link; beyond it the oldest are dropped. */
const UNDELIVERED_KEPT = 100;

type Conn = FrameConnection<typeof EdgeEnvelopeSchema, typeof EdgeEnvelopeSchema>;

/** Where a command's progress and result go: whichever link is attached when they are ready. */
interface CommandChannel {
  /** The attached connection; undefined between links. */
  conn: Conn | undefined;
  /** Results no link has taken yet, sent after the next hello, oldest first. */
  undelivered: EdgeCommandResult[];
}

/** Options of {@linkcode startCpLink}. */
export interface CpLinkOptions {
  service: EdgeService;
  agents: DomainAgents;
  version: string;
  logger: Logger;
  /** Largest accepted frame from the Control Plane; defaults to 4 MiB. */
  maxFrameBytes?: number;
  /** First redial delay; doubles up to the config's `control_plane.reconnect_max_ms`, ±20 %. */
  backoffInitialMs?: number;
  /** How long to wait for the hello ack; defaults to 10 s. */
  helloTimeoutMs?: number;
  wireMetrics?: WireMetrics;
}

/** A running link. */
export interface CpLink {
  /** True while attached (hello accepted). */
  readonly attached: boolean;
  /** Stops redialing, closes the link and cancels runs its commands started. */
  stop(): Promise<void>;
}

/** Starts dialing the Control Plane named by `control_plane.address` and keeps the link up. */
export function startCpLink(options: CpLinkOptions): CpLink {
  const { service, logger } = options;
  const initial = options.backoffInitialMs ?? 250;
  const stopController = new AbortController();
  let attached = false;
  let current: { conn: Conn; address: string } | undefined;
  let wake: (() => void) | undefined;
  const channel: CommandChannel = { conn: undefined, undelivered: [] };
  // Counted for the whole life of the link, across reconnects: the counters are cumulative.
  const runCounters = new RunCounters();
  const stopCounting = countRuns(service, runCounters);

  // A reload that changes the address re-points the link: drop the current one and redial.
  const unsubscribe = service.subscribe((event) => {
    if (event.type !== "config_reloaded" || !event.ok) return;
    const address = service.config.controlPlane.address;
    if (current && current.address !== address) {
      if (address === "") logger.info("control plane address removed, detaching");
      else logger.info("control plane address changed, re-pointing", { control_plane: address });
      current.conn.close(address === "" ? "detached by config" : "re-pointed by config");
    }
    wake?.();
  });

  const loop = (async () => {
    let delay = initial;
    while (!stopController.signal.aborted) {
      const address = service.config.controlPlane.address;
      if (address !== "") {
        try {
          // Certificate files are read per dial, so renewed ones are used from the next link on.
          const tls = requireLinkSecurity(service.config.controlPlane.security);
          const link = await dialLink({
            address,
            ...(tls ? { tls: await loadDialTls(tls) } : {}),
          });
          // stop() may have run while the dial (a TLS handshake) was under way: it had no link
          // to close then, so this one must not start a session nobody would end.
          if (stopController.signal.aborted) {
            link.close();
            break;
          }
          const conn: Conn = new FrameConnection(link, {
            inSchema: EdgeEnvelopeSchema,
            outSchema: EdgeEnvelopeSchema,
            maxFrameBytes: options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES,
            ...(options.wireMetrics ? { metrics: options.wireMetrics } : {}),
          });
          current = { conn, address };
          const outcome = await session(conn, {
            options,
            stopSignal: stopController.signal,
            channel,
            runCounters,
          }, () => {
            attached = true;
            delay = initial;
          });
          if (outcome === "refused") delay = service.config.controlPlane.reconnectMaxMs;
        } catch (err) {
          if (!stopController.signal.aborted) {
            logger.warn("cannot reach control plane", { control_plane: address, err });
          }
        } finally {
          attached = false;
          current = undefined;
        }
      }
      if (stopController.signal.aborted) break;
      const max = service.config.controlPlane.reconnectMaxMs;
      // Read again: a reload during the link may have detached or re-pointed it.
      const next = service.config.controlPlane.address;
      if (next !== address) delay = initial;
      // With no address configured, wait for a reload to provide one.
      const wait = next === ""
        ? 24 * 3_600_000
        : next !== address
        ? 0
        : Math.round(Math.min(delay, max) * (0.8 + Math.random() * 0.4));
      if (next !== "") {
        logger.info("reconnecting to control plane", { control_plane: next, in_ms: wait });
      }
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, wait);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      wake = undefined;
      delay = Math.min(delay * 2, max);
    }
  })();

  return {
    get attached() {
      return attached;
    },
    stop: async () => {
      stopController.abort();
      unsubscribe();
      stopCounting();
      current?.conn.close("edge stopping");
      wake?.();
      await loop;
    },
  };
}

/** What one link session works with, beyond its connection. */
interface SessionContext {
  options: CpLinkOptions;
  stopSignal: AbortSignal;
  channel: CommandChannel;
  runCounters: RunCounters;
}

async function session(
  conn: Conn,
  context: SessionContext,
  onAttached: () => void,
): Promise<"lost" | "refused"> {
  const { options, stopSignal, channel, runCounters } = context;
  const { service, agents, logger } = options;
  const config = service.config;
  const messages = conn.messages();
  await conn.send(create(EdgeEnvelopeSchema, {
    msg: {
      case: "hello",
      value: {
        edgeId: config.edge.id,
        credential: config.controlPlane.credential,
        version: options.version,
        protocolVersion: CP_PROTOCOL_VERSION,
        capabilities: EDGE_CAPABILITIES,
        labels: config.edge.labels,
      },
    },
  }));
  const first = await withTimeout(messages.next(), options.helloTimeoutMs ?? 10_000, conn);
  if (first.done || first.value.msg.case !== "helloAck") {
    logger.warn("control plane closed the link before acknowledging hello", {
      reason: conn.isClosed ? await conn.closed : "unexpected first frame",
    });
    conn.close("no hello ack");
    return "lost";
  }
  const ack = first.value.msg.value;
  if (!ack.accepted) {
    logger.error("control plane refused this edge", { reason: ack.reason });
    conn.close("hello refused");
    return "refused";
  }
  onAttached();
  logger.info("attached to control plane", { control_plane_id: ack.controlPlaneId });
  channel.conn = conn;
  for (const result of channel.undelivered.splice(0)) {
    logger.info("delivering a command result held while detached", {
      command_id: result.commandId,
    });
    void deliver(channel, result, logger);
  }
  const send = (envelope: EdgeEnvelope) => {
    conn.send(envelope).catch(() => {});
  };
  const relay = (event: EdgeEnvelope["msg"] & { case: "event" }) =>
    send(create(EdgeEnvelopeSchema, { msg: event }));
  const offBus = service.subscribe((event) => {
    const relayed = toRelayedEvent(event);
    if (relayed) relay({ case: "event", value: relayed });
  });
  const offAgents = agents.subscribe((change) =>
    relay({ case: "event", value: agentRelayedEvent(change, Date.now()) })
  );
  const heartbeat = startHeartbeat({
    intervalMs: ack.heartbeatIntervalMs || 2_000,
    send: () =>
      send(create(EdgeEnvelopeSchema, {
        msg: { case: "heartbeat", value: { sentAtMs: BigInt(Date.now()) } },
      })),
    onDead: (silentMs) => {
      logger.warn("control plane missed heartbeats, closing link", { silent_ms: silentMs });
      conn.close(`no heartbeat for ${silentMs} ms`);
    },
  });
  try {
    for await (const envelope of messages) {
      heartbeat.seen();
      const msg = envelope.msg;
      switch (msg.case) {
        case "heartbeat":
          break;
        case "statusRequest": {
          const correlationId = envelope.correlationId;
          const query = msg.value.nodeQuery;
          if (query) {
            // A read-only question about a node: answered when the node has answered.
            void answerNodeQuery(service, query).then((nodeAnswer) =>
              send(create(EdgeEnvelopeSchema, {
                correlationId,
                msg: { case: "statusResponse", value: { nodeAnswer } },
              }))
            );
            break;
          }
          send(create(EdgeEnvelopeSchema, {
            correlationId,
            msg: {
              case: "statusResponse",
              value: toStatusResponse(
                service.status(),
                agents.list(),
                Date.now(),
                runCounters.snapshot(),
              ),
            },
          }));
          break;
        }
        case "commandRequest":
          void runCommand(msg.value, channel, options, stopSignal);
          break;
        case "hello":
        case "helloAck":
        case "statusResponse":
        case "event":
        case "commandProgress":
        case "commandResult":
        case undefined:
          logger.warn("ignoring unexpected message from control plane", {
            message: msg.case ?? "empty",
          });
          break;
        default:
          unhandled(msg, "control plane envelope");
      }
    }
  } catch (err) {
    logger.warn("link to control plane failed", { err });
  } finally {
    if (channel.conn === conn) channel.conn = undefined;
    heartbeat.stop();
    offBus();
    offAgents();
    conn.close();
  }
  logger.warn("link to control plane lost", { reason: await conn.closed });
  return "lost";
}

/**
 * Runs a command to its end or its deadline, whichever is first. A lost link does not stop it (a
 * half-done deploy is worse than an unreported one); its progress then goes nowhere and its
 * result waits for the next link. Stopping the Edge cancels it.
 */
async function runCommand(
  req: EdgeCommandRequest,
  channel: CommandChannel,
  options: CpLinkOptions,
  stopSignal: AbortSignal,
): Promise<void> {
  const log = options.logger.with({ command_id: req.commandId, issued_by: req.issuedBy });
  log.info("control plane command started", {
    kind: req.kind.case ?? "empty",
    timeout_ms: req.timeoutMs,
  });
  const result = await executeWithDeadline(req, {
    service: options.service,
    agents: options.agents,
    signal: stopSignal,
    onProgress: (p) => {
      channel.conn?.send(create(EdgeEnvelopeSchema, {
        msg: {
          case: "commandProgress",
          value: {
            commandId: req.commandId,
            atMs: BigInt(Date.now()),
            message: p.message,
            runId: p.runId,
            nodeId: p.nodeId,
          },
        },
      })).catch(() => {});
    },
  });
  log.info("control plane command finished", {
    status: result.status,
    error_code: result.error?.code ?? "",
  });
  await deliver(channel, result, log);
}

/** Sends a result on the attached link, or keeps it for the next one. */
async function deliver(
  channel: CommandChannel,
  result: EdgeCommandResult,
  log: Logger,
): Promise<void> {
  const conn = channel.conn;
  if (conn) {
    try {
      await conn.send(
        create(EdgeEnvelopeSchema, { msg: { case: "commandResult", value: result } }),
      );
      return;
    } catch {
      // The link went down under us: keep the result for the next one.
    }
  }
  log.warn("command result held until the control plane link is back", {
    command_id: result.commandId,
  });
  channel.undelivered.push(result);
  const dropped = channel.undelivered.splice(0, channel.undelivered.length - UNDELIVERED_KEPT);
  for (const old of dropped) {
    log.warn("undelivered command result dropped", { command_id: old.commandId });
  }
}

async function withTimeout<T>(promise: Promise<T>, ms: number, conn: Conn): Promise<T> {
  const timer = setTimeout(() => conn.close(`no hello ack within ${ms} ms`), ms);
  try {
    return await promise;
  } finally {
    clearTimeout(timer);
  }
}
