/**
 * A real Node process (`deno run services/node/main.ts --config FILE`) for the multi-process
 * tests, with its log (stderr) kept for assertions and failure messages.
 * @module
 */
import { TextLog } from "./util.ts";

const ROOT = new URL("..", import.meta.url).pathname;

/** Options of {@linkcode NodeProcess}. */
export interface NodeProcessOptions {
  /** Extra environment (the config's secrets); the log level is always info, without colour. */
  env?: Record<string, string>;
  /** The signal disposal stops it with; default SIGKILL. */
  stopSignal?: Deno.Signal;
}

/** A Node process; disposal stops it (if it still runs) and waits until it is gone. */
export class NodeProcess implements AsyncDisposable {
  readonly child: Deno.ChildProcess;
  readonly stderr = new TextLog();
  /** Set once the process has exited. */
  exited = false;
  readonly #pumps: Promise<void>[];
  readonly #stopSignal: Deno.Signal;

  constructor(configFile: string, options: NodeProcessOptions = {}) {
    this.#stopSignal = options.stopSignal ?? "SIGKILL";
    this.child = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", "services/node/main.ts", "--config", configFile],
      cwd: ROOT,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      env: { ...options.env, IOP_LOG_LEVEL: "info", NO_COLOR: "1" },
    }).spawn();
    void this.child.status.then(() => this.exited = true);
    this.#pumps = [
      new TextLog().readFrom(this.child.stdout),
      this.stderr.readFrom(this.child.stderr),
    ];
  }

  async [Symbol.asyncDispose](): Promise<void> {
    try {
      this.child.kill(this.#stopSignal);
    } catch {
      // Already exited.
    }
    await this.child.status;
    await Promise.all(this.#pumps);
  }
}
