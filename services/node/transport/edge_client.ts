/**
 * The Node's link to its Edge: dials, registers, applies the pushed config (at registration and
 * on every config update), relays run events and command answers, and after any loss reconnects
 * with exponential backoff and jitter. With several Edge addresses it fails over to a standby
 * and back to the first as `edge_addresses.ts` describes.
 * The only Node module that speaks NodeEnvelope.
 * @module
 */
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import {
  EdgeNodeEventSchema,
  type NodeCommandRequest,
  type NodeCommandResponse,
  NodeCommandResponseSchema,
  type NodeConfigUpdate,
  type NodeEnvelope,
  NodeEnvelopeSchema,
} from "../../../proto/gen/iop/v1/node_pb.ts";
import { IopError, toIopError, unhandled } from "../../../shared/errors.ts";
import type { Logger } from "../../../shared/log.ts";
import { fromRunRequest, toWireError } from "../../../shared/run_codec.ts";
import {
  FrameConnection,
  OversizeSendError,
  type WireMetrics,
} from "../../../shared/wire/connection.ts";
import { startHeartbeat } from "../../../shared/wire/heartbeat.ts";
import type { HealthListener, HealthState } from "../health_monitor.ts";
import type { NodeCore } from "../node.ts";
import { fromConfigPayload, type NodeSettings } from "./config_payload.ts";
import { type EventOutbox, eventOutbox } from "./event_outbox.ts";
import { DEFAULT_RESUME_GRACE_MS, RunLedger } from "./run_ledger.ts";
import { DEFAULT_MAX_FRAME_BYTES } from "../../../shared/wire/frame.ts";
import { type ByteLink, dialLink } from "../../../shared/wire/link.ts";
import { EdgeAddresses, refusedOutright, watchFailback } from "./edge_addresses.ts";
import { type DialTlsFiles, loadDialTls } from "../../../shared/wire/tls.ts";

/** Wire protocol version this Node speaks. */
export const NODE_PROTOCOL_VERSION = 2;

/** How long the Node waits for the Edge to answer its registration. */
const REGISTER_TIMEOUT_MS = 10_000;

type Conn = FrameConnection<typeof NodeEnvelopeSchema, typeof NodeEnvelopeSchema>;

/** Options of {@linkcode startEdgeClient}. */
export interface EdgeClientOptions {
  /**
   * `host:port` of the Edge's node wire, or several: the active Edge first, then its standbys
   * (`edge_addresses.ts`).
   */
  edgeAddress: string | readonly string[];
  /**
   * While registered with a later address, how often to check whether the first is back (and
   * fail back to it when no run is in flight and every run's end was acknowledged); 0 or
   * absent: never.
   */
  failbackMs?: number;
  /** Undefined: plaintext (the config opted out). */
  tls: DialTlsFiles | undefined;
  nodeId: string;
  token: string;
  /**
   * The node's own secret (`node_key.ts`), sent at every registration: an Edge that enrolls the
   * node by a rule binds the id to it. Absent: none is sent (the enrolled id is bound to nothing
   * but a node certificate).
   */
  nodeKey?: string;
  version: string;
  core: NodeCore;
  logger: Logger;
  maxFrameBytes?: number;
  /**
   * `edge.resume_grace_ms`: how long runs are held for the Edge after a link loss (see
   * `run_ledger.ts`); 0 cancels them at once. Default {@linkcode DEFAULT_RESUME_GRACE_MS}.
   */
  resumeGraceMs?: number;
  /** First reconnect delay; doubles up to `backoffMaxMs`, each with ±20 % jitter. */
  backoffInitialMs?: number;
  backoffMaxMs?: number;
  wireMetrics?: WireMetrics;
  /**
   * Adapter health to report (see `health_monitor.ts`): each change while registered, and the
   * full picture once the probes after a registration or a config update settled. Absent: the
   * Node sends no AdapterHealth, and the Edge counts its adapters healthy.
   */
  health?: AdapterHealthFeed;
}

/** The adapter health the client reports; `HealthMonitor` is one. */
export interface AdapterHealthFeed {
  /** Resolves with the full picture once the probes of the config applied last ended. */
  settled(): Promise<Map<string, HealthState>>;
  /** Adds a change listener; returns the function that removes it. */
  onChange(listener: HealthListener): () => void;
}

/** A running client. */
export interface EdgeClient {
  /** True while registered with the Edge. */
  readonly registered: boolean;
  /**
   * Tells the Edge this node is stopping (EdgeNodeEvent.draining), so it routes no new run
   * here; its runs in flight keep streaming and heartbeats go on. Sent at once when registered
   * and again after a re-registration, then with what is left of the wait. `deadlineMs`: how
   * long the node waits for those runs.
   */
  announceDraining(deadlineMs: number): void;
  /** Stops reconnecting and closes the link. */
  stop(): Promise<void>;
}

/** Connects to the Edge and keeps reconnecting until stopped. */
export function startEdgeClient(options: EdgeClientOptions): EdgeClient {
  const { logger } = options;
  const initial = options.backoffInitialMs ?? 250;
  const max = options.backoffMaxMs ?? 10_000;
  let stopped = false;
  let registered = false;
  let current: Conn | undefined;
  /** The registered link's outbox of run events. */
  let currentOutbox: EventOutbox | undefined;
  let wakeSleep: (() => void) | undefined;
  /**
   * Set once the node drains: when its drain ends (epoch ms). Every new link is told what is
   * left of it, not the whole wait again.
   */
  let drainEndsAtMs: number | undefined;
  const announceDrain = (conn: Conn) => {
    if (drainEndsAtMs === undefined) return;
    sendDraining(conn, options, Math.max(0, drainEndsAtMs - Date.now()));
  };

  // One ledger for every link of this client: runs outlive a lost link (run_ledger.ts).
  const ledger = new RunLedger({
    core: options.core,
    graceMs: options.resumeGraceMs ?? DEFAULT_RESUME_GRACE_MS,
    maxFrameBytes: options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES,
    logger,
  });
  const addresses = new EdgeAddresses(options.edgeAddress);
  const failbackMs = options.failbackMs ?? 0;
  /** The link to the first address that the failback watch opened, for the next session. */
  let failback: ByteLink | undefined;
  // Read per dial, so renewed certificate files are used from the next link on. With TLS the
  // dial returns only once the Edge proved a fleet certificate: no token goes out before that.
  const dial = async (address: string) =>
    dialLink({ address, ...(options.tls ? { tls: await loadDialTls(options.tls) } : {}) });

  const loop = (async () => {
    let delay = initial;
    while (!stopped) {
      let outcome: SessionEnd | "unreachable" = "unreachable";
      const address = addresses.current;
      /** Registered on this link: its loss starts the next round at the same address. */
      let linked = false;
      let failedBack = false;
      /** The host refused the connection: no Edge listens there (edge_addresses.ts). */
      let refused = false;
      try {
        const link = failback ?? await dial(address);
        failback = undefined;
        // stop() may have run during the dial (a TLS handshake), with no link to close yet.
        if (stopped) {
          link.close();
          break;
        }
        const conn: Conn = new FrameConnection(link, {
          inSchema: NodeEnvelopeSchema,
          outSchema: NodeEnvelopeSchema,
          maxFrameBytes: options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES,
          ...(options.wireMetrics ? { metrics: options.wireMetrics } : {}),
        });
        current = conn;
        const stopWatch = addresses.onFirst || failbackMs === 0 ? () => {} : watchFailback({
          address: addresses.first,
          intervalMs: failbackMs,
          dial,
          // Not while the ledger holds a run, even a finished one: its end may not be out yet.
          mayFailBack: () =>
            registered && ledger.size === 0 && options.core.inFlight === 0 &&
            drainEndsAtMs === undefined,
          onBack: (back) => {
            failback = back;
            failedBack = true;
            logger.info("failing back to the active edge", {
              edge: addresses.first,
              from: address,
            });
            conn.close(`failing back to the active edge ${addresses.first}`);
          },
        });
        try {
          outcome = await session(conn, { ...options, edgeAddress: address }, ledger, (outbox) => {
            currentOutbox = outbox;
            registered = true;
            linked = true;
            delay = initial;
            announceDrain(conn);
          });
        } finally {
          stopWatch();
        }
      } catch (err) {
        refused = refusedOutright(err);
        if (!stopped) logger.warn("cannot reach edge", { edge: address, err });
      } finally {
        registered = false;
        current = undefined;
        currentOutbox = undefined;
      }
      if (stopped) {
        failback?.close();
        break;
      }
      // The runs go on, held for the Edge to resume them on the next link (run_ledger.ts).
      ledger.detach();
      if (failedBack) {
        addresses.backToFirst();
        continue;
      }
      // A refusal a human must resolve is retried slowly; a temporary one at the usual pace.
      if (outcome === "refused") delay = max;
      if (linked) {
        addresses.lost();
      } else if (!refused && outcome !== "refused" && ledger.holding > 0) {
        // Runs wait for this Edge, which may be back any moment: a standby knows nothing of them.
        logger.info("retrying the edge that holds runs", { edge: address, runs: ledger.holding });
      } else if (!addresses.failed()) {
        // Another address is left in this round: dial it at once.
        logger.info("trying the next edge address", { edge: addresses.current, after: address });
        continue;
      }
      const wait = Math.round(delay * (0.8 + Math.random() * 0.4));
      logger.info("reconnecting to edge", { edge: addresses.current, in_ms: wait });
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, wait);
        wakeSleep = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      wakeSleep = undefined;
      delay = Math.min(delay * 2, max);
    }
  })();

  return {
    get registered() {
      return registered;
    },
    announceDraining: (deadlineMs) => {
      drainEndsAtMs = Date.now() + deadlineMs;
      if (registered && current) sendDraining(current, options, deadlineMs);
    },
    stop: async () => {
      stopped = true;
      // Cancel first so that the Edge hears each run end as cancelled, then close the link.
      await options.core.cancelAll("node stopping");
      ledger.close();
      // The runs' last events may still wait in the outbox (it sends at the end of a turn).
      currentOutbox?.flush();
      await current?.send(heartbeatEnvelope(0)).catch(() => {});
      current?.close("node stopping");
      wakeSleep?.();
      await loop;
    },
  };
}

/** How long a link the node gives up on has to carry the notice before it is closed. */
const ABANDON_NOTICE_MS = 1000;

/**
 * Closes a link the Edge went silent on, telling the Edge first (EdgeNodeEvent.link_abandoned):
 * the node's frames may still reach it, and without the notice it would take the close for this
 * node's exit and fail the runs the node holds for their resume.
 */
function abandonLink(conn: Conn, options: EdgeClientOptions, silentMs: number): void {
  const notice = conn.send(nodeEvent(options, { case: "linkAbandoned", value: { silentMs } }));
  void withTimeout(notice, ABANDON_NOTICE_MS).catch(() => {}).finally(() =>
    conn.close(`no heartbeat for ${silentMs} ms`)
  );
}

/** Sends EdgeNodeEvent.draining: this node takes no new runs and finishes its own. */
function sendDraining(conn: Conn, options: EdgeClientOptions, deadlineMs: number): void {
  conn.send(nodeEvent(options, {
    case: "draining",
    value: { runsInFlight: options.core.inFlight, deadlineMs },
  })).catch(() => {});
}

/** The envelope of an EdgeNodeEvent from this node, stamped now. */
function nodeEvent(
  options: EdgeClientOptions,
  event: NonNullable<MessageInitShape<typeof EdgeNodeEventSchema>["event"]>,
): NodeEnvelope {
  return create(NodeEnvelopeSchema, {
    msg: {
      case: "nodeEvent",
      value: { nodeId: options.nodeId, timestampMs: BigInt(Date.now()), event },
    },
  });
}

function heartbeatEnvelope(runsInFlight: number) {
  return create(NodeEnvelopeSchema, {
    msg: { case: "heartbeat", value: { sentAtMs: BigInt(Date.now()), runsInFlight } },
  });
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/**
 * How a registered link ended, or why there was none: `refused` needs a human (a wrong token,
 * an unknown id), `refused_for_now` may pass soon (the id's node still connected, a full
 * enrollment rule).
 */
type SessionEnd = "lost" | "refused" | "refused_for_now";

async function session(
  conn: Conn,
  options: EdgeClientOptions,
  ledger: RunLedger,
  onRegistered: (outbox: EventOutbox) => void,
): Promise<SessionEnd> {
  const { core, logger } = options;
  const messages = conn.messages();
  await conn.send(create(NodeEnvelopeSchema, {
    msg: {
      case: "registerRequest",
      value: {
        nodeId: options.nodeId,
        token: options.token,
        nodeKey: options.nodeKey ?? "",
        version: options.version,
        protocolVersion: NODE_PROTOCOL_VERSION,
        host: {
          hostname: Deno.hostname(),
          os: Deno.build.os,
          arch: Deno.build.arch,
          cpus: navigator.hardwareConcurrency,
          memoryBytes: BigInt(Deno.systemMemoryInfo().total),
        },
        heldRuns: ledger.held().map((run) => ({
          runId: run.runId,
          lastSeq: BigInt(run.lastSeq),
        })),
      },
    },
  }));
  const first = await withTimeout(messages.next(), REGISTER_TIMEOUT_MS).catch(() => {
    conn.close(`no registration answer within ${REGISTER_TIMEOUT_MS} ms`);
    return { done: true as const, value: undefined };
  });
  if (first.done || first.value.msg.case !== "registerResponse") {
    logger.warn("edge closed the link before answering registration", {
      reason: conn.isClosed ? await conn.closed : "unexpected first frame",
    });
    conn.close("no registration answer");
    return "lost";
  }
  const answer = first.value.msg.value;
  if (!answer.accepted || !answer.config) {
    const fields = { node_id: options.nodeId, reason: answer.reason };
    conn.close("registration refused");
    if (answer.retryable) {
      logger.warn("edge refused registration for now; retrying", fields);
      return "refused_for_now";
    }
    logger.error("edge refused registration", fields);
    return "refused";
  }
  // Frames to the Edge stay within its limit too: it drops the link for a larger one.
  const ownLimit = options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES;
  const sendLimit = answer.maxFrameBytes > 0 ? Math.min(ownLimit, answer.maxFrameBytes) : ownLimit;
  conn.maxSendBytes = sendLimit;
  const outbox = eventOutbox((msg) => {
    conn.send(create(NodeEnvelopeSchema, { msg })).catch((err) => {
      // The ledger refuses an event too large for the link before it gets here; a frame over
      // the limit all the same (events kept through a reload that lowered it) must not go unseen.
      if (err instanceof OversizeSendError) {
        logger.error("run events over the edge's frame limit were not sent", {
          bytes: err.bytes,
          limit: err.limit,
        });
      }
    });
  }, {
    batches: answer.acceptsEventBatches,
    maxFrameBytes: sendLimit,
  });
  onRegistered(outbox);
  // Held runs the Edge resumes send what it missed on this link; the others are cancelled.
  ledger.attach(
    { send: outbox.emit, windowBytes: answer.runWindowBytes, maxFrameBytes: sendLimit },
    answer.resumedRuns.map((run) => ({
      runId: run.runId,
      receivedSeq: Number(run.receivedSeq),
    })),
  );
  const state: LinkState = { configVersion: answer.configVersion };
  const payload = fromConfigPayload(answer.config);
  const applied = applyPayload(payload, options);
  logger.info("registered with edge", {
    node_id: options.nodeId,
    edge: options.edgeAddress,
    config_version: Number(answer.configVersion),
    adapters: applied.adapters,
    rejected: applied.rejected,
  });
  await reportApplied(conn, options, applied, answer.configVersion);
  const stopHealth = reportHealth(conn, options);

  const heartbeat = startHeartbeat({
    intervalMs: payload.heartbeatIntervalMs,
    send: () => {
      conn.send(heartbeatEnvelope(core.inFlight)).catch(() => {});
    },
    onDead: (silentMs) => {
      logger.warn("edge missed heartbeats, closing link", { silent_ms: silentMs });
      abandonLink(conn, options, silentMs);
    },
  });
  try {
    for await (const envelope of messages) {
      heartbeat.seen();
      handle(envelope, conn, options, ledger, state);
    }
  } catch (err) {
    logger.warn("link to edge failed", { err });
  } finally {
    stopHealth();
    heartbeat.stop();
    conn.close();
  }
  logger.warn("link to edge lost", { reason: await conn.closed });
  return "lost";
}

/** What a registered link remembers between frames. */
interface LinkState {
  /** Version of the config applied last (from the registration answer or an update). */
  configVersion: bigint;
}

/** Builds the core's adapters from a pushed payload; returns what was built and refused. */
function applyPayload(
  payload: NodeSettings,
  options: EdgeClientOptions,
): { adapters: string[]; rejected: Record<string, string> } {
  const built = options.core.applyConfig(payload.adapters);
  // Policy refusals are logged by the core as it applies them; these are the unreadable ones.
  for (const [adapter, reason] of Object.entries(payload.rejected)) {
    options.logger.warn("adapter rejected", { adapter, reason });
  }
  return { ...built, rejected: { ...payload.rejected, ...built.rejected } };
}

/** Tells the Edge which config version the node now runs, what it built and what it refused. */
function reportApplied(
  conn: Conn,
  options: EdgeClientOptions,
  applied: { adapters: string[]; rejected: Record<string, string> },
  version: bigint,
): Promise<void> {
  return conn.send(nodeEvent(options, { case: "configApplied", value: { ...applied, version } }));
}

/**
 * Applies a config update from the Edge and acknowledges it. An update no newer than the config
 * in force is stale and ignored; one without a payload breaks the protocol.
 */
function applyUpdate(
  update: NodeConfigUpdate,
  conn: Conn,
  options: EdgeClientOptions,
  state: LinkState,
): void {
  const { logger } = options;
  if (!update.config) {
    logger.warn("edge sent a config update without a config, closing link");
    conn.close("config_update without a config");
    return;
  }
  if (update.version <= state.configVersion) {
    logger.warn("ignoring stale config update from edge", {
      config_version: Number(update.version),
      applied_version: Number(state.configVersion),
    });
    return;
  }
  state.configVersion = update.version;
  const applied = applyPayload(fromConfigPayload(update.config), options);
  logger.info("applied config update from edge", {
    config_version: Number(update.version),
    adapters: applied.adapters,
    rejected: applied.rejected,
  });
  reportApplied(conn, options, applied, update.version).catch(() => {});
  sendFullHealth(conn, options);
}

/**
 * Reports adapter health on a registered link: the full picture once the first probes settle,
 * then each change; returns the function that stops it.
 */
function reportHealth(conn: Conn, options: EdgeClientOptions): () => void {
  const feed = options.health;
  if (!feed) return () => {};
  sendFullHealth(conn, options);
  return feed.onChange((adapter, state) => sendHealth(conn, options, adapter, state));
}

/** Sends the whole health picture once the probes of the config applied last ended. */
function sendFullHealth(conn: Conn, options: EdgeClientOptions): void {
  void options.health?.settled().then((picture) => {
    for (const [adapter, state] of picture) sendHealth(conn, options, adapter, state);
  });
}

function sendHealth(conn: Conn, options: EdgeClientOptions, adapter: string, state: HealthState) {
  if (conn.isClosed) return;
  conn.send(nodeEvent(options, { case: "adapterHealth", value: { adapter, ...state } }))
    .catch(() => {});
}

function handle(
  envelope: NodeEnvelope,
  conn: Conn,
  options: EdgeClientOptions,
  ledger: RunLedger,
  state: LinkState,
): void {
  const { core, logger } = options;
  const msg = envelope.msg;
  switch (msg.case) {
    case "heartbeat":
      return;
    case "configUpdate":
      applyUpdate(msg.value, conn, options, state);
      return;
    case "runRequest": {
      const runId = msg.value.runId;
      const outlet = ledger.open(runId);
      try {
        core.startRun(runId, fromRunRequest(msg.value), outlet);
      } catch (err) {
        const e = toIopError(err);
        outlet.emit({
          runId,
          seq: 1,
          timestampMs: Date.now(),
          type: "failed",
          code: e.code,
          message: e.message,
          retryable: e.retryable,
          exitCode: 0,
        });
      }
      return;
    }
    case "cancelRequest":
      core.cancelRun(msg.value.runId, msg.value.reason || "cancelled by edge");
      return;
    case "runAcks":
      for (const ack of msg.value.acks) ledger.ack(ack.runId, Number(ack.seq));
      return;
    case "commandRequest":
      void answerCommand(msg.value, core).then((result) => {
        const answer = (value: NodeCommandResponse) =>
          conn.send(create(NodeEnvelopeSchema, {
            correlationId: envelope.correlationId,
            msg: { case: "commandResponse", value },
          }));
        // An answer over the link's frame limit (a run's whole output, say) is refused before
        // it is written; the Edge hears why instead of waiting for it until it times out.
        answer(result).catch((err) => {
          if (!(err instanceof OversizeSendError)) return;
          answer(create(NodeCommandResponseSchema, {
            result: {
              case: "error",
              value: toWireError(
                new IopError(
                  "INVALID_ARGUMENT",
                  `Cannot send the answer as it is ${err.bytes} bytes, over the link's frame ` +
                    `limit of ${err.limit} bytes (the smaller of the edge's wire.max_frame_bytes and ` +
                    "this node's edge.max_frame_bytes)",
                ),
              ),
            },
          })).catch(() => {});
        });
      });
      return;
    case "registerRequest":
    case "registerResponse":
    case "runEvent":
    case "runEvents":
    case "commandResponse":
    case "nodeEvent":
    case undefined:
      logger.warn("ignoring unexpected message from edge", { message: msg.case ?? "empty" });
      return;
  }
  unhandled(msg, "edge envelope");
}

async function answerCommand(
  req: NodeCommandRequest,
  core: NodeCore,
): Promise<NodeCommandResponse> {
  try {
    const cmd = req.command;
    switch (cmd.case) {
      case "history":
        return create(NodeCommandResponseSchema, {
          result: {
            case: "history",
            value: {
              runs: core.history(cmd.value.limit || 20).map((r) => ({
                runId: r.runId,
                adapter: r.adapter,
                target: r.target,
                status: r.status,
                startedAtMs: BigInt(r.startedAtMs),
                firstOutputAtMs: BigInt(r.firstOutputAtMs ?? 0),
                finishedAtMs: BigInt(r.finishedAtMs ?? 0),
                ...(r.usage ? { usage: r.usage } : {}),
                ...(r.error ? { error: r.error } : {}),
                outputSummary: r.outputSummary,
                exitCode: r.exitCode ?? 0,
                traceId: r.traceId ?? "",
              })),
            },
          },
        });
      case "capabilities":
        return create(NodeCommandResponseSchema, {
          result: { case: "capabilities", value: { adapters: await core.capabilities() } },
        });
      case "runOutput": {
        const runId = cmd.value.runId;
        const stored = core.runOutput(runId);
        return create(NodeCommandResponseSchema, {
          result: { case: "runOutput", value: { runId, found: stored !== undefined, ...stored } },
        });
      }
      case undefined:
        throw new IopError("INVALID_ARGUMENT", "Cannot answer an empty command");
    }
  } catch (err) {
    return create(NodeCommandResponseSchema, {
      result: { case: "error", value: toWireError(toIopError(err)) },
    });
  }
}
