/**
 * The byte stream under a {@linkcode FrameConnection}: a plain TCP connection or a TLS session,
 * dialed with {@linkcode dialLink} or accepted by `listener.ts`.
 *
 * TLS runs on `node:tls` rather than `Deno.connectTls` because only `node:tls` lets the dialer
 * trust the fleet CA alone (`caCerts` of Deno adds to the public roots) and lets a listener
 * require and read client certificates.
 * @module
 */
import tls from "node:tls";
import { isIP } from "node:net";
import { IopError } from "../errors.ts";
import { type DialTls, peerIdentities } from "./tls.ts";

/** A connected byte stream. */
export interface ByteLink {
  /** The peer's address, as `host:port`. */
  readonly remote: string;
  /** True when the bytes travel encrypted. */
  readonly encrypted: boolean;
  /**
   * Identities the peer proved with a client certificate signed by the trusted CA, as
   * `role/id` (e.g. `node/gpu-1`); empty when it showed none.
   */
  readonly peerIds: readonly string[];
  /** Reads into `buffer`; resolves with the byte count, or null at the end of the stream. */
  read(buffer: Uint8Array): Promise<number | null>;
  /**
   * The next bytes received, as the socket delivered them, or null at the end of the stream;
   * only where the socket hands out chunks of its own (TLS), so that a reader needs no buffer.
   */
  readChunk?(): Promise<Uint8Array | null>;
  /** Resolves once all of `data` was handed to the socket (later if the peer reads slowly). */
  write(data: Uint8Array): Promise<void>;
  close(): void;
}

/** A plain TCP connection as a link. */
export function plainLink(conn: Deno.Conn): ByteLink {
  const addr = conn.remoteAddr;
  return {
    remote: addr.transport === "tcp" ? `${addr.hostname}:${addr.port}` : addr.transport,
    encrypted: false,
    peerIds: [],
    read: (buffer) => conn.read(buffer),
    write: async (data) => {
      let offset = 0;
      while (offset < data.byteLength) offset += await conn.write(data.subarray(offset));
    },
    close: () => {
      try {
        conn.close();
      } catch {
        // Closed already.
      }
    },
  };
}

/**
 * A connected `node:tls` socket as a link. Received chunks wait in a queue until read; past
 * {@linkcode PAUSE_AT_BYTES} queued, the socket is paused so a slow reader slows its peer
 * instead of filling memory.
 */
export function tlsLink(socket: tls.TLSSocket): ByteLink {
  const chunks: Uint8Array[] = [];
  let queued = 0;
  let ended = false;
  let failure: Error | undefined;
  let waiter: (() => void) | undefined;
  const wake = () => {
    const w = waiter;
    waiter = undefined;
    w?.();
  };
  socket.on("data", (chunk: Uint8Array) => {
    chunks.push(chunk);
    queued += chunk.byteLength;
    if (queued >= PAUSE_AT_BYTES) socket.pause();
    wake();
  });
  socket.on("end", () => {
    ended = true;
    wake();
  });
  socket.on("close", () => {
    ended = true;
    wake();
  });
  socket.on("error", (err: Error) => {
    failure ??= err;
    wake();
  });
  const peerIds = socket.authorized ? peerIdentities(socket.getPeerCertificate()) : [];

  /** Resolves once a chunk is queued; false at the end of the stream. */
  const received = async (): Promise<boolean> => {
    while (chunks.length === 0) {
      if (failure) throw failure;
      if (ended) return false;
      await new Promise<void>((resolve) => waiter = resolve);
    }
    return true;
  };
  const taken = (n: number) => {
    queued -= n;
    if (queued < PAUSE_AT_BYTES && socket.isPaused()) socket.resume();
  };
  const readChunk = async (): Promise<Uint8Array | null> => {
    if (chunks.length === 0 && !await received()) return null;
    const chunk = chunks.shift()!;
    taken(chunk.byteLength);
    return chunk;
  };
  const read = async (buffer: Uint8Array): Promise<number | null> => {
    if (chunks.length === 0 && !await received()) return null;
    let n = 0;
    while (n < buffer.byteLength && chunks.length > 0) {
      const chunk = chunks[0]!;
      const take = Math.min(chunk.byteLength, buffer.byteLength - n);
      buffer.set(take === chunk.byteLength ? chunk : chunk.subarray(0, take), n);
      n += take;
      if (take === chunk.byteLength) chunks.shift();
      else chunks[0] = chunk.subarray(take);
    }
    taken(n);
    return n;
  };

  const write = (data: Uint8Array): Promise<void> =>
    new Promise((resolve, reject) => {
      if (failure || socket.destroyed) {
        reject(failure ?? new Error("socket closed"));
        return;
      }
      if (socket.write(data)) resolve();
      else {
        const settle = () => {
          socket.off("drain", settle);
          socket.off("close", settle);
          if (socket.destroyed) reject(failure ?? new Error("socket closed"));
          else resolve();
        };
        socket.on("drain", settle);
        socket.on("close", settle);
      }
    });

  return {
    remote: `${socket.remoteAddress}:${socket.remotePort}`,
    encrypted: true,
    peerIds,
    read,
    readChunk,
    write,
    // destroy() drops what the socket still buffers (a stopping node's last run events, sent
    // just before it closes): with bytes pending, end() sends them and the FIN first, for at
    // most CLOSE_FLUSH_MS, so a peer that stopped reading cannot hold the socket open.
    close: () => {
      if (socket.writableLength === 0) return void socket.destroy();
      const timer = setTimeout(() => socket.destroy(), CLOSE_FLUSH_MS);
      Deno.unrefTimer(timer);
      socket.end(() => {
        clearTimeout(timer);
        socket.destroy();
      });
    },
  };
}

/** How long a closing TLS link may take to send what it still buffers before it is cut. */
const CLOSE_FLUSH_MS = 2_000;

/** Options of {@linkcode dialLink}. */
export interface DialOptions {
  /** `host:port`. */
  address: string;
  /** Absent: plain TCP. */
  tls?: DialTls;
  /** Gives up on a connect or handshake that takes longer; default 10 s. */
  timeoutMs?: number;
}

/**
 * Connects to `address`; with TLS, resolves only once the server proved a certificate from the
 * trusted CA for the expected name, so nothing is sent to an impostor.
 */
export async function dialLink(options: DialOptions): Promise<ByteLink> {
  const [hostname, port] = splitAddress(options.address);
  if (!options.tls) {
    const conn = await Deno.connect({ hostname, port });
    conn.setNoDelay(true);
    return plainLink(conn);
  }
  const settings = options.tls;
  const serverName = settings.serverName || hostname;
  const timeoutMs = options.timeoutMs ?? 10_000;
  const socket = await new Promise<tls.TLSSocket>((resolve, reject) => {
    const s = tls.connect({
      host: hostname,
      port,
      ca: settings.ca,
      ...(settings.cert ? { cert: settings.cert, key: settings.key } : {}),
      // SNI carries names only; an IP is checked against the certificate's IP entries.
      ...(isIP(serverName) ? {} : { servername: serverName }),
      checkServerIdentity: (_host, cert) => tls.checkServerIdentity(serverName, cert),
    });
    const timer = setTimeout(() => {
      s.destroy();
      reject(new Error(`TLS handshake with ${options.address} took over ${timeoutMs} ms`));
    }, timeoutMs);
    s.once("secureConnect", () => {
      clearTimeout(timer);
      resolve(s);
    });
    s.once("error", (err: Error) => {
      clearTimeout(timer);
      s.destroy();
      reject(
        new IopError(
          "UNAVAILABLE",
          `Cannot verify ${options.address} as '${serverName}' against the fleet CA: ${err.message}`,
          { cause: err },
        ),
      );
    });
  });
  socket.setNoDelay(true);
  return tlsLink(socket);
}

/** Splits `host:port` (IPv6 hosts may be bracketed). */
export function splitAddress(address: string): [string, number] {
  const i = address.lastIndexOf(":");
  const port = Number(address.slice(i + 1));
  if (i <= 0 || !Number.isInteger(port) || port <= 0 || port > 65535) {
    throw new IopError("INVALID_ARGUMENT", `Cannot parse address '${address}' as host:port`);
  }
  return [address.slice(0, i).replace(/^\[|\]$/g, ""), port];
}

/** Received bytes a link holds before it stops reading from the socket. */
const PAUSE_AT_BYTES = 256 * 1024;
