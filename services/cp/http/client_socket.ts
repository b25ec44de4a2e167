/**
 * The `/client` WebSocket: browser and app clients speak ClientEnvelope messages, binary
 * (protobuf) or text (canonical proto3 JSON, for the no-build dashboard), answered in the
 * encoding of the client's hello. Flow and limits are documented in control.proto.
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
  EdgeSelectorSchema,
  FleetStatusSchema,
} from "../../../proto/gen/iop/v1/control_pb.ts";
import { IopError, toIopError, unhandled } from "../../../shared/errors.ts";
import type { CpHttpDeps } from "./app.ts";
import { matchesAnySecret } from "../../../shared/secrets.ts";

/** Largest accepted client message. */
export const MAX_CLIENT_MESSAGE_BYTES = 256 * 1024;

type Msg = NonNullable<MessageInitShape<typeof ClientEnvelopeSchema>["msg"]>;

/** Upgrades the request and serves one client session on the socket. */
export function serveClientSocket(request: Request, deps: CpHttpDeps): Response {
  if (request.headers.get("upgrade")?.toLowerCase() !== "websocket") {
    return new Response("expected a WebSocket upgrade", { status: 426 });
  }
  const { socket, response } = Deno.upgradeWebSocket(request);
  socket.binaryType = "arraybuffer";
  new ClientSession(socket, deps);
  return response;
}

class ClientSession {
  readonly #socket: WebSocket;
  readonly #deps: CpHttpDeps;
  #json = false;
  #hello: { name: string; canCommand: boolean } | undefined;
  readonly #unsubscribe: (() => void)[] = [];

  constructor(socket: WebSocket, deps: CpHttpDeps) {
    this.#socket = socket;
    this.#deps = deps;
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
      this.#send(id, { case: "error", value: wireError(toIopError(err)) });
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
      return fromJsonString(ClientEnvelopeSchema, data, { ignoreUnknownFields: true });
    }
    if (data instanceof ArrayBuffer) return fromBinary(ClientEnvelopeSchema, new Uint8Array(data));
    throw new IopError("INVALID_ARGUMENT", "Unsupported WebSocket message type");
  }

  async #handle(envelope: ClientEnvelope): Promise<void> {
    const { registry, commands, config } = this.#deps;
    const id = envelope.correlationId;
    const msg = envelope.msg;
    if (msg.case !== "hello" && !this.#hello) {
      throw new IopError("INVALID_ARGUMENT", "Cannot serve a client before its hello");
    }
    switch (msg.case) {
      case "hello": {
        const canCommand = msg.value.credential !== "" &&
          matchesAnySecret(msg.value.credential, config.admin.tokens);
        this.#hello = { name: msg.value.clientName || "client", canCommand };
        this.#send(id, {
          case: "helloAck",
          value: { controlPlaneId: config.controlPlane.id, version: "1", canCommand },
        });
        return;
      }
      case "subscribe":
        if (this.#unsubscribe.length > 0) return;
        this.#unsubscribe.push(
          registry.subscribe((event) => this.#send(0n, { case: "event", value: event })),
          commands.subscribe((update) => this.#send(0n, { case: "commandUpdate", value: update })),
        );
        return;
      case "statusRequest": {
        if (msg.value.refresh) {
          await Promise.allSettled(
            registry.list().filter((v) => v.connected).map((v) =>
              registry.refresh(v.edgeId, config.registry.statusTimeoutMs)
            ),
          );
        }
        this.#send(id, {
          case: "status",
          value: create(FleetStatusSchema, { edges: registry.list() }),
        });
        return;
      }
      case "submitCommand": {
        const hello = this.#hello!;
        if (!hello.canCommand) {
          throw new IopError("UNAUTHENTICATED", "Cannot submit commands: hello had no admin token");
        }
        if (!msg.value.command) throw new IopError("INVALID_ARGUMENT", "Command is missing");
        const command = commands.submit({
          selector: msg.value.edges ?? create(EdgeSelectorSchema, { all: true }),
          command: msg.value.command,
          actor: msg.value.actor || hello.name,
          via: "client",
        });
        this.#send(id, {
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

  #send(correlationId: bigint, msg: Msg): void {
    if (this.#socket.readyState !== WebSocket.OPEN) return;
    const envelope = create(ClientEnvelopeSchema, { correlationId, msg });
    this.#socket.send(
      this.#json
        ? toJsonString(ClientEnvelopeSchema, envelope, { alwaysEmitImplicit: true })
        : toBinary(ClientEnvelopeSchema, envelope),
    );
  }

  #close(): void {
    for (const off of this.#unsubscribe.splice(0)) off();
  }
}

function wireError(e: IopError) {
  return { code: e.code, message: e.message, retryable: e.retryable };
}
