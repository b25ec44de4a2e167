/**
 * Real Edge and Node processes (`services/{edge,node}/main.ts`) from YAML configs, for the
 * fault suites, and a TCP proxy on the node wire that can cut the link the way a network does:
 * bytes stop flowing both ways and no side hears a close, so each finds out by its heartbeats;
 * and a reader of the history file a Node process writes.
 * @module
 */
import { openRunStore } from "../services/node/store/sqlite_store.ts";
import type { RunRecord } from "../services/node/ports.ts";
import { freePort, TextLog, until } from "./util.ts";

const ROOT = new URL("..", import.meta.url).pathname;

/** A running service process with its log. */
export class ServiceProcess implements AsyncDisposable {
  readonly child: Deno.ChildProcess;
  readonly log = new TextLog();
  readonly #reading: Promise<void>;

  constructor(service: "edge" | "node", configFile: string, env: Record<string, string> = {}) {
    this.child = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", `${ROOT}services/${service}/main.ts`, "--config", configFile],
      cwd: ROOT,
      stdin: "null",
      stdout: "null",
      stderr: "piped",
      env: { ...env, IOP_LOG_LEVEL: "info", NO_COLOR: "1" },
    }).spawn();
    this.#reading = this.log.readFrom(this.child.stderr);
  }

  /** Resident memory of the process now, in bytes (Linux `/proc`). */
  rssBytes(): number {
    const status = Deno.readTextFileSync(`/proc/${this.child.pid}/status`);
    const kib = status.match(/^VmRSS:\s+(\d+) kB$/m)?.[1];
    if (kib === undefined) throw new Error(`no VmRSS for process ${this.child.pid}`);
    return Number(kib) * 1024;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    try {
      this.child.kill("SIGKILL");
    } catch {
      // Already exited.
    }
    await this.child.status;
    await this.#reading;
  }
}

/** Waits until an Edge at `url` is ready to serve its models. */
export async function edgeReady(url: string, logs: TextLog[]): Promise<void> {
  try {
    await until(
      "the edge to be ready",
      async () => {
        const res = await fetch(`${url}/readyz`);
        await res.body?.cancel();
        return res.status === 200;
      },
      60_000,
      100,
    );
  } catch (err) {
    throw new Error(`stack did not come up:\n${logs.map((l) => l.text).join("\n")}`, {
      cause: err,
    });
  }
}

/**
 * A TCP proxy from a local port to `target`. `cut()` freezes every connection through it (what
 * is read is dropped, nothing is closed) and closes new ones at once; `heal()` ends the frozen
 * connections and lets new ones through again. `cutReturn()` freezes only what `target` sends
 * back on the connections open at that moment: the dialer's bytes still arrive, and new
 * connections go through whole.
 */
export class CutProxy implements Disposable {
  readonly port = freePort();
  readonly #listener: Deno.TcpListener;
  readonly #target: Deno.ConnectOptions;
  readonly #pairs = new Set<Deno.TcpConn[]>();
  /** Connections whose way back from `target` is frozen (`cutReturn`). */
  readonly #returnCut = new Set<Deno.TcpConn[]>();
  #healed = Promise.withResolvers<void>();
  #cut = false;

  constructor(target: Deno.ConnectOptions) {
    this.#target = target;
    this.#listener = Deno.listen({ hostname: "127.0.0.1", port: this.port });
    void this.#accept();
  }

  /** The address nodes dial (`host:port`). */
  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  /** Stops every byte through the proxy until {@linkcode heal}. */
  cut(): void {
    this.#cut = true;
  }

  /** Stops what `target` sends back on the open connections; the dialer's bytes go on. */
  cutReturn(): void {
    for (const pair of this.#pairs) this.#returnCut.add(pair);
  }

  /** Ends the connections the cut froze and lets new ones through. */
  heal(): void {
    this.#cut = false;
    this.#returnCut.clear();
    for (const pair of this.#pairs) for (const c of pair) closeQuietly(c);
    this.#pairs.clear();
    this.#healed.resolve();
    this.#healed = Promise.withResolvers<void>();
  }

  async #accept(): Promise<void> {
    for await (const inbound of this.#listener) {
      if (this.#cut) {
        closeQuietly(inbound);
        continue;
      }
      void Deno.connect(this.#target).then((outbound) => {
        const pair = [inbound, outbound];
        this.#pairs.add(pair);
        void this.#pump(inbound, outbound, pair, false);
        void this.#pump(outbound, inbound, pair, true);
      }, () => closeQuietly(inbound));
    }
  }

  async #pump(
    from: Deno.TcpConn,
    to: Deno.TcpConn,
    pair: Deno.TcpConn[],
    back: boolean,
  ): Promise<void> {
    const buffer = new Uint8Array(64 * 1024);
    try {
      while (true) {
        const n = await from.read(buffer);
        if (n === null) break;
        // Frozen: the bytes are lost, as on a dead network, and the peers hear nothing.
        if (this.#cut || (back && this.#returnCut.has(pair))) {
          await this.#healed.promise;
          break;
        }
        let written = 0;
        while (written < n) written += await to.write(buffer.subarray(written, n));
      }
    } catch {
      // The other side or heal() closed it.
    }
    this.#pairs.delete(pair);
    this.#returnCut.delete(pair);
    for (const c of pair) closeQuietly(c);
  }

  [Symbol.dispose](): void {
    this.#listener.close();
    this.heal();
  }
}

function closeQuietly(conn: Deno.Conn): void {
  try {
    conn.close();
  } catch {
    // Already closed.
  }
}

/** The runs in the history file of a Node process at `path`, newest first (it may still write). */
export function historyOf(path: string): RunRecord[] {
  const store = openRunStore(path);
  try {
    return store.history(50);
  } finally {
    store.close();
  }
}
