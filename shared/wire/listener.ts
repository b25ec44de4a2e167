/**
 * A TCP (or TLS) accept loop that hands each connection to a handler and never dies from one
 * peer: a handler that throws is logged and its connection closed, a peer that fails the TLS
 * handshake (plaintext, wrong CA, no client certificate) is logged and dropped, and the loop
 * goes on.
 * @module
 */
import tls from "node:tls";
import type { Socket } from "node:net";
import type { Logger } from "../log.ts";
import { type ByteLink, plainLink, tlsLink } from "./link.ts";
import type { ListenTls } from "./tls.ts";

/** Options of {@linkcode listenFrames}. */
export interface ListenOptions {
  hostname: string;
  /** 0 picks a free port; read it back from `port`. */
  port: number;
  /** Serves one connection until it ends. */
  handle: (link: ByteLink) => Promise<void>;
  logger: Logger;
  /** Absent: plain TCP. */
  tls?: ListenTls;
  /** Counts peers dropped for failing the TLS handshake. */
  onHandshakeFailed?: () => void;
}

/** A running listener. */
export interface Listener extends AsyncDisposable {
  readonly hostname: string;
  readonly port: number;
  /** Stops accepting and closes every open connection. */
  close(): Promise<void>;
}

/** Starts accepting connections; resolves once the port is bound. */
export function listenFrames(options: ListenOptions): Promise<Listener> {
  return options.tls ? listenTls(options, options.tls) : Promise.resolve(listenPlain(options));
}

/** Serves one link and closes it, whatever the handler does. */
async function serveLink(options: ListenOptions, link: ByteLink): Promise<void> {
  try {
    await options.handle(link);
  } catch (err) {
    options.logger.warn("connection handler failed", { err, remote: link.remote });
  } finally {
    link.close();
  }
}

function listenPlain(options: ListenOptions): Listener {
  const listener: Deno.Listener = Deno.listen({
    hostname: options.hostname,
    port: options.port,
  });
  const open = new Set<Deno.Conn>();
  const handlers = new Set<Promise<void>>();
  let closing = false;

  const serve = async (conn: Deno.Conn) => {
    const tcp = conn as Partial<Deno.TcpConn>;
    tcp.setNoDelay?.(true);
    tcp.setKeepAlive?.(true);
    await serveLink(options, plainLink(conn));
    open.delete(conn);
  };

  const acceptLoop = (async () => {
    while (!closing) {
      let conn: Deno.Conn;
      try {
        conn = await listener.accept();
      } catch (err) {
        if (closing || err instanceof Deno.errors.BadResource) return;
        options.logger.warn("accept failed", { err });
        continue;
      }
      open.add(conn);
      const handler = serve(conn);
      handlers.add(handler);
      void handler.finally(() => handlers.delete(handler));
    }
  })();

  const addr = listener.addr as Deno.NetAddr;
  const close = async () => {
    if (closing) return;
    closing = true;
    listener.close();
    for (const conn of open) {
      try {
        conn.close();
      } catch {
        // Closed already.
      }
    }
    await acceptLoop;
    await Promise.allSettled([...handlers]);
  };
  return { hostname: addr.hostname, port: addr.port, close, [Symbol.asyncDispose]: close };
}

async function listenTls(options: ListenOptions, settings: ListenTls): Promise<Listener> {
  const server = tls.createServer({
    cert: settings.cert,
    key: settings.key,
    ...(settings.clientCa ? { ca: settings.clientCa, requestCert: true } : {}),
    rejectUnauthorized: true,
    // A peer that connects and says nothing must not hold a socket for long.
    handshakeTimeout: HANDSHAKE_TIMEOUT_MS,
  });
  const sockets = new Set<Socket>();
  const handlers = new Set<Promise<void>>();
  server.on("connection", (socket: Socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  server.on("secureConnection", (socket: tls.TLSSocket) => {
    socket.setNoDelay(true);
    socket.setKeepAlive(true);
    const handler = serveLink(options, tlsLink(socket));
    handlers.add(handler);
    void handler.finally(() => handlers.delete(handler));
  });
  server.on("tlsClientError", (err: Error, socket: tls.TLSSocket) => {
    options.onHandshakeFailed?.();
    options.logger.warn("peer failed the TLS handshake", {
      remote: `${socket.remoteAddress}:${socket.remotePort}`,
      reason: err.message,
    });
    socket.destroy();
  });
  server.on("error", (err: Error) => options.logger.warn("listener error", { err }));
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.hostname, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const addr = server.address() as { address: string; port: number };
  let closing: Promise<void> | undefined;
  const close = () =>
    closing ??= (async () => {
      const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const socket of sockets) socket.destroy();
      await stopped;
      await Promise.allSettled([...handlers]);
    })();
  return { hostname: addr.address, port: addr.port, close, [Symbol.asyncDispose]: close };
}

/** How long a peer has to complete the TLS handshake. */
const HANDSHAKE_TIMEOUT_MS = 10_000;
