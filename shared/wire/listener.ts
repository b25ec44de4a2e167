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
  /**
   * Serves one connection until it ends; calls `admitted` once the peer has proved who it is,
   * which frees its place among the {@linkcode ListenOptions.maxPending} anonymous ones.
   */
  handle: (link: ByteLink, admitted: () => void) => Promise<void>;
  logger: Logger;
  /** Absent: plain TCP. */
  tls?: ListenTls;
  /** Counts peers dropped for failing the TLS handshake. */
  onHandshakeFailed?: () => void;
  /**
   * Connections not yet admitted (handshaking or not yet registered) allowed at once; more are
   * closed on arrival, so anonymous sockets cannot exhaust the service. Default 256.
   */
  maxPending?: number;
  /** Counts connections closed because {@linkcode ListenOptions.maxPending} were waiting. */
  onCrowded?: () => void;
  /** How long a peer has to complete the TLS handshake; default 10 s. */
  handshakeTimeoutMs?: number;
}

/**
 * Warns at most once every `everyMs` with `message`, and says how many were left out since: one
 * line per failed handshake or turned-away connection would let a storm of reconnects (or a
 * hostile crowd) flood the log.
 */
function throttledWarning(logger: Logger, message: string, everyMs = 10_000) {
  let warnedAtMs = -Infinity;
  let suppressed = 0;
  return (fields: Record<string, unknown>) => {
    const now = Date.now();
    if (now - warnedAtMs < everyMs) {
      suppressed++;
      return;
    }
    warnedAtMs = now;
    logger.warn(
      message,
      suppressed > 0 ? { ...fields, suppressed_since_last: suppressed } : fields,
    );
    suppressed = 0;
  };
}

/** Counts anonymous connections against the cap and warns (at most every 10 s) when full. */
class PendingGate {
  readonly #max: number;
  readonly #options: ListenOptions;
  readonly #crowded: (fields: Record<string, unknown>) => void;
  #count = 0;

  constructor(options: ListenOptions) {
    this.#options = options;
    this.#max = options.maxPending ?? DEFAULT_MAX_PENDING;
    this.#crowded = throttledWarning(
      options.logger,
      "too many connections waiting to log in, closing new ones",
    );
  }

  /** A place for a new connection, or undefined (after counting and warning) when full. */
  enter(remote: string): (() => void) | undefined {
    if (this.#count >= this.#max) {
      this.#options.onCrowded?.();
      this.#crowded({ pending: this.#count, max_pending: this.#max, remote });
      return undefined;
    }
    this.#count++;
    let left = false;
    return () => {
      if (left) return;
      left = true;
      this.#count--;
    };
  }
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

/** Serves one link and closes it, whatever the handler does; `leave` frees its pending place. */
async function serveLink(options: ListenOptions, link: ByteLink, leave: () => void): Promise<void> {
  try {
    await options.handle(link, leave);
  } catch (err) {
    options.logger.warn("connection handler failed", { err, remote: link.remote });
  } finally {
    leave();
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

  const gate = new PendingGate(options);
  const serve = async (conn: Deno.Conn) => {
    const link = plainLink(conn);
    const leave = gate.enter(link.remote);
    if (!leave) {
      link.close();
      open.delete(conn);
      return;
    }
    const tcp = conn as Partial<Deno.TcpConn>;
    tcp.setNoDelay?.(true);
    tcp.setKeepAlive?.(true);
    await serveLink(options, link, leave);
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
    handshakeTimeout: options.handshakeTimeoutMs ?? HANDSHAKE_TIMEOUT_MS,
  });
  const sockets = new Set<Socket>();
  const handlers = new Set<Promise<void>>();
  const gate = new PendingGate(options);
  /** Each connection's pending place by peer address, held from the TCP accept on. */
  const places = new Map<string, () => void>();
  /** Sockets closed on arrival for the cap: their aborted handshake is ours, not the peer's. */
  const turnedAway = new WeakSet<Socket>();
  const handshakeFailed = throttledWarning(options.logger, "peer failed the TLS handshake");
  server.on("connection", (socket: Socket) => {
    const remote = `${socket.remoteAddress}:${socket.remotePort}`;
    const leave = gate.enter(remote);
    if (!leave) {
      turnedAway.add(socket);
      socket.destroy();
      return;
    }
    places.set(remote, leave);
    sockets.add(socket);
    socket.once("close", () => {
      sockets.delete(socket);
      places.delete(remote);
      leave();
    });
  });
  server.on("secureConnection", (socket: tls.TLSSocket) => {
    socket.setNoDelay(true);
    socket.setKeepAlive(true);
    const leave = places.get(`${socket.remoteAddress}:${socket.remotePort}`) ?? (() => {});
    const handler = serveLink(options, tlsLink(socket), leave);
    handlers.add(handler);
    void handler.finally(() => handlers.delete(handler));
  });
  server.on("tlsClientError", (err: Error, socket: tls.TLSSocket) => {
    const remote = `${socket.remoteAddress}:${socket.remotePort}`;
    socket.destroy();
    // The TLS socket's `_parent` is the TCP socket it wraps (as in Node); without it, a
    // connection turned away is counted as a failed handshake too.
    const tcp = (socket as unknown as { _parent?: Socket })._parent;
    if (tcp && turnedAway.has(tcp)) return;
    options.onHandshakeFailed?.();
    handshakeFailed({ remote, reason: err.message });
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

/** Default of {@linkcode ListenOptions.handshakeTimeoutMs}. */
const HANDSHAKE_TIMEOUT_MS = 10_000;
/** Default of {@linkcode ListenOptions.maxPending}. */
const DEFAULT_MAX_PENDING = 256;
