/**
 * A TCP accept loop that hands each connection to a handler and never dies from one peer: a
 * handler that throws is logged and its connection closed, and the loop goes on.
 * @module
 */
import type { Logger } from "../log.ts";

/** Options of {@linkcode listenFrames}. */
export interface ListenOptions {
  hostname: string;
  /** 0 picks a free port; read it back from `port`. */
  port: number;
  /** Serves one connection until it ends. */
  handle: (conn: Deno.Conn) => Promise<void>;
  logger: Logger;
}

/** A running listener. */
export interface Listener extends AsyncDisposable {
  readonly hostname: string;
  readonly port: number;
  /** Stops accepting and closes every open connection. */
  close(): Promise<void>;
}

/** Starts accepting TCP connections. */
export function listenFrames(options: ListenOptions): Listener {
  const listener: Deno.Listener = Deno.listen({
    hostname: options.hostname,
    port: options.port,
  });
  const open = new Set<Deno.Conn>();
  const handlers = new Set<Promise<void>>();
  let closing = false;

  const serve = async (conn: Deno.Conn) => {
    try {
      const tcp = conn as Partial<Deno.TcpConn>;
      tcp.setNoDelay?.(true);
      tcp.setKeepAlive?.(true);
      await options.handle(conn);
    } catch (err) {
      options.logger.warn("connection handler failed", { err, remote: remoteOf(conn) });
    } finally {
      open.delete(conn);
      try {
        conn.close();
      } catch {
        // Closed already.
      }
    }
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

function remoteOf(conn: Deno.Conn): string {
  const addr = conn.remoteAddr;
  return addr.transport === "tcp" ? `${addr.hostname}:${addr.port}` : addr.transport;
}
