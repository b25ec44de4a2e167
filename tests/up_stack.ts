/**
 * `deno task up --no-console` as a subprocess on free ports with its own state directory: the
 * whole stack of the README's first command, for tests that need real `main.ts` processes.
 * @module
 */
import { freePort, until } from "./util.ts";

const root = new URL("..", import.meta.url).pathname;

/** A running `deno task up`. */
export interface UpStack {
  /** Its `IOP_UP_DIR` (state, logs, tokens); removed by {@linkcode UpStack.stop}. */
  dir: string;
  /** The port variables it was started with. */
  ports: Record<
    | "IOP_EDGE_HTTP_PORT"
    | "IOP_EDGE_WIRE_PORT"
    | "IOP_CP_HTTP_PORT"
    | "IOP_CP_WIRE_PORT"
    | "IOP_NODE_HTTP_PORT",
    string
  >;
  edgeUrl: string;
  cpUrl: string;
  nodeUrl: string;
  /** What it printed on stderr so far (the banner). */
  banner(): string;
  /** Sends SIGTERM, waits for the exit and removes `dir`; returns the exit code. */
  stop(): Promise<number>;
}

/** Starts `deno task up --no-console` and waits for its "IOP is up" banner. */
export async function startUp(prefix = "iop_up_"): Promise<UpStack> {
  const dir = await Deno.makeTempDir({ prefix });
  const ports = {
    IOP_EDGE_HTTP_PORT: String(freePort()),
    IOP_EDGE_WIRE_PORT: String(freePort()),
    IOP_CP_HTTP_PORT: String(freePort()),
    IOP_CP_WIRE_PORT: String(freePort()),
    IOP_NODE_HTTP_PORT: String(freePort()),
  };
  const up = new Deno.Command(Deno.execPath(), {
    args: ["task", "up", "--no-console"],
    cwd: root,
    env: { ...ports, IOP_UP_DIR: dir },
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  let banner = "";
  const reading = (async () => {
    for await (const text of up.stderr.pipeThrough(new TextDecoderStream())) banner += text;
  })();
  const stop = async () => {
    up.kill("SIGTERM");
    const status = await up.status;
    await reading;
    await Deno.remove(dir, { recursive: true });
    return status.code;
  };
  try {
    await until("the banner", () => banner.includes("IOP is up"), 30_000);
  } catch (err) {
    await stop();
    throw new Error(`deno task up did not come up:\n${banner}`, { cause: err });
  }
  return {
    dir,
    ports,
    edgeUrl: `http://127.0.0.1:${ports.IOP_EDGE_HTTP_PORT}`,
    cpUrl: `http://127.0.0.1:${ports.IOP_CP_HTTP_PORT}`,
    nodeUrl: `http://127.0.0.1:${ports.IOP_NODE_HTTP_PORT}`,
    banner: () => banner,
    stop,
  };
}
