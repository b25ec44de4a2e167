/**
 * The `/client` WebSocket: browser and app clients speak ClientEnvelope messages, binary
 * (protobuf) or text (canonical proto3 JSON, for the no-build dashboard), answered in the
 * encoding of the client's hello. Flow and limits are documented in control.proto.
 *
 * Access: an upgrade whose `Origin` is neither the Control Plane's own nor listed in
 * `access.allowed_origins` is refused with 403, so that no other web page can ride an operator's
 * browser into the fleet. A client authenticates with a named access token, either as
 * `Authorization: Bearer <token>` on the upgrade (a wrong one is 401 before the upgrade) or, for
 * browsers that cannot set headers, in its first message: the hello's `credential`, or the text
 * message `{"type":"auth","token":"…"}` (read as a JSON hello with that credential). Until then
 * it gets no fleet data; a hello with a wrong token, or no authentication within
 * `access.client_auth_timeout_ms`, closes the socket with code {@linkcode CLOSE_UNAUTHENTICATED}
 * and a reason saying which. Commands need the operate role (else a PERMISSION_DENIED error) and
 * are audited under the token's name, whatever the message's `actor` says.
 *
 * Slow clients (`socket_flow.ts`): while a socket has more than `clientFlow.maxBufferedBytes`
 * unsent, nothing more is sent to it; pushes are coalesced to the newest state per edge and per
 * command share (and the newest relayed events), and go out once it drains. A client that stays
 * above the bound for `clientFlow.stallTimeoutMs` is closed with code
 * {@linkcode CLOSE_SLOW_CLIENT} and a reason.
 * @module
 */
import {
  create,
  fromBinary,
  fromJsonString,
  type MessageInitShape,
  toBinary,
  toJsonString,
} from "@bufbuild/protobuf";
import {
  type ClientEnvelope,
  ClientEnvelopeSchema,
  type CommandUpdate,
  EdgeSelectorSchema,
  type FleetEvent,
  FleetStatusSchema,
} from "../../../proto/gen/iop/v1/control_pb.ts";
import { IopError, toIopError, unhandled } from "../../../shared/errors.ts";
import type { CpHttpDeps, FleetRefresher } from "./app.ts";
import { bearerToken, matchAccessToken, type Principal, roleAllows } from "../access.ts";
import { originAllowed, PERMISSION_DENIED } from "./access.ts";
import { CLOSE_SLOW_CLIENT, DEFAULT_PUSH_FLOW, PushFlow } from "./socket_flow.ts";

/** Largest accepted client message. */
export const MAX_CLIENT_MESSAGE_BYTES = 256 * 1024;

/** Close code of a socket that did not authenticate (in time, or with a valid token). */
export const CLOSE_UNAUTHENTICATED = 4401;

type Msg = NonNullable<MessageInitShape<typeof ClientEnvelopeSchema>["msg"]>;

/** What a client session serves from. */
export interface ClientSocketDeps extends CpHttpDeps {
  refresh: FleetRefresher;
}

/** Checks origin and any bearer token, then upgrades and serves one client session. */
export function serveClientSocket(request: Request, deps: ClientSocketDeps): Response {
  if (request.headers.get("upgrade")?.toLowerCase() !== "websocket") {
    return new Response("expected a WebSocket upgrade", { status: 426 });
  }
  const access = deps.config.access;
  if (!originAllowed(request, access.allowedOrigins)) {
    deps.logger.warn("client socket refused: origin not allowed", {
      origin: request.headers.get("origin") ?? "",
    });
    return new Response(
      "Cannot open the /client socket from this origin: add it to access.allowed_origins",
      { status: 403 },
    );
  }
  const presented = bearerToken(request.headers.get("authorization"));
  const principal = presented === "" ? undefined : matchAccessToken(presented, access.tokens);
  if (presented !== "" && !principal) {
    return new Response("Cannot open the /client socket as the bearer token is not valid", {
      status: 401,
      headers: { "WWW-Authenticate": 'Bearer realm="iop-control-plane"' },
    });
  }
  const { socket, response } = Deno.upgradeWebSocket(request);
  socket.binaryType = "arraybuffer";
  new ClientSession(socket, deps, principal);
  return response;
}

class ClientSession {
  readonly #socket: WebSocket;
  readonly #deps: ClientSocketDeps;
  #json = false;
  /** Set by the upgrade's bearer token or the hello's credential. */
  #principal: Principal | undefined;
  #hello: { name: string } | undefined;
  #authTimer: ReturnType<typeof setTimeout> | undefined;
  readonly #unsubscribe: (() => void)[] = [];
  readonly #flow: PushFlow;

  constructor(socket: WebSocket, deps: ClientSocketDeps, principal: Principal | undefined) {
    this.#socket = socket;
    this.#deps = deps;
    this.#principal = principal;
    this.#flow = new PushFlow(
      socket,
      deps.clientFlow ?? DEFAULT_PUSH_FLOW,
      (reason) => this.#cutOff(reason),
    );
    const timeoutMs = deps.config.access.clientAuthTimeoutMs;
    // A bearer token on the upgrade already authenticated the socket.
    if (!principal) {
      this.#authTimer = setTimeout(() => {
        this.#authTimer = undefined;
        if (this.#hello) return;
        this.#socket.close(
          CLOSE_UNAUTHENTICATED,
          `authentication timeout: no hello with a valid token within ${timeoutMs} ms`,
        );
      }, timeoutMs);
    }
    socket.onmessage = (event) => void this.#receive(event.data);
    socket.onclose = () => this.#close();
    socket.onerror = () => this.#close();
  }

  async #receive(data: unknown): Promise<void> {
    let envelope: ClientEnvelope;
    try {
      envelope = this.#decode(data);
    } catch (err) {
      this.#send(0n, { case: "error", value: wireError(toIopError(err, "INVALID_ARGUMENT")) });
      this.#socket.close(1003, "unreadable message");
      return;
    }
    const id = envelope.correlationId;
    try {
      await this.#handle(envelope);
    } catch (err) {
      this.#answer(id, { case: "error", value: wireError(toIopError(err)) });
    }
  }

  #decode(data: unknown): ClientEnvelope {
    const size = typeof data === "string"
      ? data.length
      : data instanceof ArrayBuffer
      ? data.byteLength
      : Infinity;
    if (size > MAX_CLIENT_MESSAGE_BYTES) {
      throw new IopError("INVALID_ARGUMENT", `Message of ${size} bytes exceeds the limit`);
    }
    if (typeof data === "string") {
      if (!this.#hello) this.#json = true;
      return authAsHello(data) ??
        fromJsonString(ClientEnvelopeSchema, data, { ignoreUnknownFields: true });
    }
    if (data instanceof ArrayBuffer) return fromBinary(ClientEnvelopeSchema, new Uint8Array(data));
    throw new IopError("INVALID_ARGUMENT", "Unsupported WebSocket message type");
  }

  async #handle(envelope: ClientEnvelope): Promise<void> {
    const { registry, commands, config } = this.#deps;
    const id = envelope.correlationId;
    const msg = envelope.msg;
    if (msg.case !== "hello" && !this.#hello) {
      throw new IopError(
        "UNAUTHENTICATED",
        "Cannot serve a client before its hello: send a hello with an access token first",
      );
    }
    switch (msg.case) {
      case "hello": {
        // With a valid bearer token on the upgrade, the hello needs no credential.
        this.#principal ??= matchAccessToken(msg.value.credential, config.access.tokens);
        const principal = this.#principal;
        if (!principal) {
          this.#send(id, {
            case: "error",
            value: {
              code: "UNAUTHENTICATED",
              message: msg.value.credential === ""
                ? "Cannot serve a client without an access token: put one in the hello's credential"
                : "Cannot serve the client as the hello's token is not valid",
              retryable: false,
            },
          });
          this.#socket.close(
            CLOSE_UNAUTHENTICATED,
            msg.value.credential === ""
              ? "authentication failed: the hello carried no token"
              : "authentication failed: the hello's token is not valid",
          );
          return;
        }
        this.#hello = { name: msg.value.clientName || "client" };
        this.#stopAuthTimer();
        this.#answer(id, {
          case: "helloAck",
          value: {
            controlPlaneId: config.controlPlane.id,
            version: "1",
            canCommand: roleAllows(principal.role, "operate"),
          },
        });
        return;
      }
      case "subscribe":
        if (this.#unsubscribe.length > 0) return;
        this.#unsubscribe.push(
          registry.subscribe((event) =>
            this.#push({ case: "event", value: event }, eventKey(event))
          ),
          commands.subscribe((update) =>
            this.#push({ case: "commandUpdate", value: update }, updateKey(update))
          ),
        );
        return;
      case "statusRequest": {
        // Rate-limited: within the interval this serves the last refresh's snapshots.
        if (msg.value.refresh) await this.#deps.refresh.fleet();
        this.#answer(id, {
          case: "status",
          value: create(FleetStatusSchema, { edges: registry.list() }),
        });
        return;
      }
      case "submitCommand": {
        const principal = this.#principal!;
        if (!roleAllows(principal.role, "operate")) {
          this.#answer(id, {
            case: "error",
            value: {
              code: PERMISSION_DENIED,
              message: `Cannot submit commands with token '${principal.name}' as its role is ` +
                "read: use a token with role operate",
              retryable: false,
            },
          });
          return;
        }
        if (!msg.value.command) throw new IopError("INVALID_ARGUMENT", "Command is missing");
        const command = commands.submit({
          selector: msg.value.edges ?? create(EdgeSelectorSchema, { all: true }),
          command: msg.value.command,
          // The token's name, whatever the message's `actor` claims.
          actor: principal.name,
          via: "client",
        });
        this.#answer(id, {
          case: "commandAccepted",
          value: { commandId: command.commandId, edgeIds: [...command.edges.keys()] },
        });
        return;
      }
      case "helloAck":
      case "status":
      case "event":
      case "commandAccepted":
      case "commandUpdate":
      case "error":
      case undefined:
        throw new IopError("INVALID_ARGUMENT", `Unexpected ${msg.case ?? "empty"} from a client`);
      default:
        unhandled(msg, "client envelope");
    }
  }

  /** Pushes to the client: at once while it keeps up; wrapped (and keyed) only to be held. */
  #push(msg: Msg, key: string | undefined): void {
    if (this.#flow.sendsNow()) this.#send(0n, msg);
    else this.#flow.push(() => this.#send(0n, msg), key);
  }

  /** Answers a request of the client, after anything held back for it. */
  #answer(correlationId: bigint, msg: Msg): void {
    if (this.#flow.sendsNow()) this.#send(correlationId, msg);
    else this.#flow.answer(() => this.#send(correlationId, msg));
  }

  /** Sends at once, whatever the socket holds (the flow calls it when it may). */
  #send(correlationId: bigint, msg: Msg): void {
    if (this.#socket.readyState !== WebSocket.OPEN) return;
    const envelope = create(ClientEnvelopeSchema, { correlationId, msg });
    this.#socket.send(
      this.#json
        ? toJsonString(ClientEnvelopeSchema, envelope, { alwaysEmitImplicit: true })
        : toBinary(ClientEnvelopeSchema, envelope),
    );
  }

  #stopAuthTimer(): void {
    if (this.#authTimer !== undefined) clearTimeout(this.#authTimer);
    this.#authTimer = undefined;
  }

  /** The client reads too slowly: no more pushes, and the socket is closed saying why. */
  #cutOff(reason: string): void {
    this.#deps.logger.warn("client socket closed: the client reads too slowly", {
      client: this.#hello?.name ?? "",
      reason,
    });
    this.#close();
    // The close frame queues behind what the client has not read; it sees why when it does.
    this.#socket.close(CLOSE_SLOW_CLIENT, reason);
  }

  #close(): void {
    this.#stopAuthTimer();
    this.#flow.stop();
    for (const off of this.#unsubscribe.splice(0)) off();
  }
}

/** The coalescing key of a fleet event: the newest link and status per edge; none for others. */
function eventKey(event: FleetEvent): string | undefined {
  const kind = event.event.case;
  return kind === "link" || kind === "status" ? `${kind}:${event.edgeId}` : undefined;
}

/** The coalescing key of a command update: the newest result per share; none for progress. */
function updateKey(update: CommandUpdate): string | undefined {
  return update.update.case === "result"
    ? `result:${update.commandId}:${update.edgeId}`
    : undefined;
}

/**
 * The browser-friendly first message `{"type":"auth","token":"…"}` as a JSON hello envelope with
 * that credential; undefined for any other text.
 */
function authAsHello(text: string): ClientEnvelope | undefined {
  if (!text.includes('"auth"')) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return undefined;
  const { type, token, clientName } = parsed as Record<string, unknown>;
  if (type !== "auth") return undefined;
  return create(ClientEnvelopeSchema, {
    msg: {
      case: "hello",
      value: {
        credential: typeof token === "string" ? token : "",
        clientName: typeof clientName === "string" ? clientName : "",
      },
    },
  });
}

function wireError(e: IopError) {
  return { code: e.code, message: e.message, retryable: e.retryable };
}
