/**
 * Runs a command as the leader of its own process group, so that stopping it stops everything it
 * started (`sh -c "a & b; wait"`), not only the direct child.
 *
 * `Deno.Command`'s `detached` option calls `setsid()` in the child before `exec`: the child's pid
 * is then also its process group id, and `kill(-pid)` reaches every process of the group. Stopping
 * sends SIGTERM, waits a grace period, then SIGKILL; descendants that left the group (their own
 * `setsid`) are out of reach, so if one still holds our pipes after that, the pipes are closed
 * from our side rather than waited on forever.
 *
 * Output is read only while its consumer has room (`ready`, the run's flow control): otherwise
 * the pipes fill and the command blocks on its next write. Time spent so held back does not
 * count towards the stop's grace periods (the group is waiting for us, not hanging), and once
 * the output is discarded (`discardOutput`, a run stopped early) it is read without waiting.
 * @module
 */

/** Default time between SIGTERM and SIGKILL. */
export const DEFAULT_KILL_GRACE_MS = 2_000;
/** How long to wait for the pipes to close after SIGKILL before closing them ourselves. */
const PIPE_DRAIN_MS = 500;

/** Options of {@linkcode spawnGroup}. */
export interface SpawnGroupOptions {
  args: string[];
  /** The process's whole environment: nothing of the current process's is inherited. */
  env: Record<string, string>;
  /** Empty means the current directory. */
  cwd: string;
  /** Time between SIGTERM and SIGKILL when stopping. */
  killGraceMs: number;
  /** Decoded stdout, piece by piece as it arrives. */
  onStdout(text: string): void;
  /** Decoded stderr, piece by piece as it arrives. */
  onStderr(text: string): void;
  /**
   * Undefined while the output's consumer has room, else a promise that resolves when it made
   * room (`EventSink.ready`); checked before each read of either pipe. Absent: always room.
   */
  ready?(): Promise<void> | undefined;
}

/** A running process group led by a spawned command. */
export interface GroupChild {
  /** The leader's pid, which is also the process group id. */
  readonly pid: number;
  /** The leader's exit status. */
  readonly status: Promise<Deno.CommandStatus>;
  /** The leader's exit status, once stdout and stderr have also reached their end. */
  readonly finished: Promise<Deno.CommandStatus>;
  /** Signals the whole group: SIGTERM, then SIGKILL after the grace period; resolves when finished. */
  stop(): Promise<Deno.CommandStatus>;
  /** Whether stopping had to escalate to SIGKILL. */
  readonly killed: boolean;
  /** Reads the rest of the output without waiting for room: nobody waits for it any more. */
  discardOutput(): void;
}

/** Holds the pipe reads back while the consumer has no room, and knows when it does. */
class RoomGate {
  readonly #ready: () => Promise<void> | undefined;
  /** Ends each wait under way; one per wait, so nothing outlives it (a run pauses many times). */
  readonly #waits = new Set<() => void>();
  #discarded = false;
  /** Pumps waiting for room now. */
  #waiting = 0;
  #none: PromiseWithResolvers<void> | undefined;

  constructor(ready: () => Promise<void> | undefined) {
    this.#ready = ready;
  }

  /** Undefined when a read may go ahead; else resolves when it may (room, or discarded). */
  hold(): Promise<void> | undefined {
    if (this.#discarded) return undefined;
    const wait = this.#ready();
    return wait === undefined ? undefined : this.#wait(wait);
  }

  discard(): void {
    this.#discarded = true;
    for (const end of this.#waits) end();
    this.#waits.clear();
  }

  /** Undefined when no pump waits for room; else resolves once none does. */
  held(): Promise<void> | undefined {
    if (this.#waiting === 0) return undefined;
    return (this.#none ??= Promise.withResolvers()).promise;
  }

  async #wait(wait: Promise<void>): Promise<void> {
    this.#waiting++;
    const { promise, resolve } = Promise.withResolvers<void>();
    this.#waits.add(resolve);
    wait.then(resolve, resolve);
    try {
      await promise;
    } finally {
      this.#waits.delete(resolve);
      if (--this.#waiting === 0) {
        this.#none?.resolve();
        this.#none = undefined;
      }
    }
  }
}

/** Sends `signal` to every process of group `pgid`; false when the group no longer exists. */
export function signalGroup(pgid: number, signal: Deno.Signal): boolean {
  try {
    Deno.kill(-pgid, signal);
    return true;
  } catch {
    // ESRCH: every member already exited, which is what stopping wants.
    return false;
  }
}

/** Resolves true when `promise` settles within `ms`, false otherwise; leaves no timer behind. */
export async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const expired = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([promise.then(() => true, () => true), expired]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * True when `promise` settles within `ms` during which `gate` held no read back: time spent
 * waiting for the consumer's room does not run out (the output is there, only not wanted yet).
 */
async function settlesWhileRead(
  promise: Promise<unknown>,
  ms: number,
  gate: RoomGate,
): Promise<boolean> {
  while (true) {
    if (await settlesWithin(promise, ms)) return true;
    const held = gate.held();
    if (held === undefined) return false;
    const settled = await Promise.race([
      promise.then(() => true, () => true),
      held.then(() => false),
    ]);
    if (settled) return true;
  }
}

async function pump(
  reader: ReadableStreamDefaultReader<string>,
  emit: (text: string) => void,
  gate: RoomGate,
): Promise<void> {
  try {
    while (true) {
      const hold = gate.hold();
      if (hold) await hold;
      const { done, value } = await reader.read();
      if (done) return;
      if (value !== "") emit(value);
    }
  } catch {
    // The stream was cancelled by stop(); there is nothing more to read.
  }
}

/**
 * Spawns `command` in a new process group with piped stdout/stderr and no stdin; throws what
 * `Deno.Command.spawn` throws (e.g. `Deno.errors.NotFound` for a missing command or cwd).
 */
export function spawnGroup(command: string, options: SpawnGroupOptions): GroupChild {
  const child = new Deno.Command(command, {
    args: options.args,
    env: options.env,
    clearEnv: true,
    ...(options.cwd === "" ? {} : { cwd: options.cwd }),
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    detached: true,
  }).spawn();
  const stdout = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  const stderr = child.stderr.pipeThrough(new TextDecoderStream()).getReader();
  const gate = new RoomGate(options.ready ?? (() => undefined));
  const streamsDone = Promise.all([
    pump(stdout, options.onStdout, gate),
    pump(stderr, options.onStderr, gate),
  ]);
  const finished = Promise.all([child.status, streamsDone]).then(([status]) => status);
  let stopping: Promise<Deno.CommandStatus> | undefined;
  let killed = false;

  const stop = async (): Promise<Deno.CommandStatus> => {
    signalGroup(child.pid, "SIGTERM");
    if (await settlesWhileRead(finished, options.killGraceMs, gate)) return finished;
    killed = true;
    signalGroup(child.pid, "SIGKILL");
    if (!(await settlesWhileRead(finished, PIPE_DRAIN_MS, gate))) {
      await Promise.all([stdout.cancel(), stderr.cancel()]);
    }
    return finished;
  };

  return {
    pid: child.pid,
    status: child.status,
    finished,
    stop: () => (stopping ??= stop()),
    get killed() {
      return killed;
    },
    discardOutput: () => gate.discard(),
  };
}
