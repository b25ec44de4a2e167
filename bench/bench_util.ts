/**
 * Helpers shared by the Edge benchmarks: spawning an Edge or a Node process from a
 * config written to a temp dir, percentiles (exact, or from a histogram for millions of
 * samples), process CPU/memory from /proc (once, or sampled every second), event-loop lag,
 * and waiting on a child process (a timeout, its stdout as lines).
 * @module
 */
import { stringify } from "yaml";

/** A spawned service process. */
export interface Proc {
  pid: number;
  kill(): Promise<void>;
}

/** Starts `services/<svc>/main.ts` with a YAML config built from `config`. */
export async function spawnService(
  svc: "edge" | "node",
  config: unknown,
  dir: string,
  name: string,
): Promise<Proc> {
  const file = `${dir}/${name}.yaml`;
  await Deno.writeTextFile(file, stringify(config));
  const main = new URL(`../services/${svc}/main.ts`, import.meta.url).pathname;
  return spawnScript(main, [...(svc === "edge" ? ["--no-console"] : []), "--config", file]);
}

/**
 * Starts `deno run -A <script> <args>`, its stdout dropped and its errors shown. The V8 flags in
 * `IOP_BENCH_V8_FLAGS` go to it (`--prof,--logfile=edge.log` profiles the process measured).
 */
export function spawnScript(script: string, args: string[]): Proc {
  const v8Flags = Deno.env.get("IOP_BENCH_V8_FLAGS");
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", ...(v8Flags ? [`--v8-flags=${v8Flags}`] : []), script, ...args],
    env: { IOP_LOG_LEVEL: "error" },
    stdin: "null",
    stdout: "null",
    stderr: "inherit",
  }).spawn();
  return {
    pid: child.pid,
    kill: async () => {
      try {
        child.kill("SIGTERM");
      } catch { /* already gone */ }
      await child.status;
    },
  };
}

/** Polls `url` until `ok(json)` holds. */
export async function waitJson(url: string, ok: (body: unknown) => boolean, ms = 60_000) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    try {
      const res = await fetch(url);
      if (res.ok && ok(await res.json())) return;
    } catch { /* not up yet */ }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`Timed out waiting for ${url}`);
}

/** The p-th percentile (0..100) of `values`. */
export function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i] ?? NaN;
}

/** Memory (MiB) and CPU seconds used so far, of a process or of the whole machine. */
export interface Usage {
  rssMiB: number;
  cpuSeconds: number;
}

/** Resident memory (MiB) and total CPU seconds of a process, from /proc. */
export async function procUsage(pid: number): Promise<Usage> {
  const status = await Deno.readTextFile(`/proc/${pid}/status`);
  const rssKb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
  const stat = (await Deno.readTextFile(`/proc/${pid}/stat`)).split(") ")[1]!.split(" ");
  const ticks = Number(stat[11]) + Number(stat[12]);
  return { rssMiB: rssKb / 1024, cpuSeconds: ticks / 100 };
}

/**
 * Non-negative millisecond values counted in 0.1 ms buckets up to `maxMs` (larger values land
 * in the last bucket), so percentiles over millions of samples cost neither memory nor a sort.
 */
export class MsHistogram {
  readonly #buckets: Uint32Array;
  #count = 0;
  #max = 0;

  constructor(maxMs = 30_000) {
    this.#buckets = new Uint32Array(Math.ceil(maxMs * 10) + 1);
  }

  /** Counts one value; a negative one counts as 0. */
  add(ms: number): void {
    const i = Math.min(this.#buckets.length - 1, Math.max(0, Math.round(ms * 10)));
    this.#buckets[i]!++;
    this.#count++;
    if (ms > this.#max) this.#max = ms;
  }

  /** Values counted so far. */
  get count(): number {
    return this.#count;
  }

  /** The largest value counted (0 when empty). */
  get max(): number {
    return this.#max;
  }

  /** The p-th percentile (0..100) to 0.1 ms; NaN when empty. */
  percentile(p: number): number {
    if (this.#count === 0) return NaN;
    const rank = Math.max(1, Math.ceil((p / 100) * this.#count));
    let seen = 0;
    for (let i = 0; i < this.#buckets.length; i++) {
      seen += this.#buckets[i]!;
      if (seen >= rank) return i / 10;
    }
    return this.#max;
  }
}

/** Event-loop lag of this process: how late a timer due every `everyMs` fires. */
export function probeLoopLag(everyMs = 20): { stop(): MsHistogram } {
  const lag = new MsHistogram(10_000);
  let due = performance.now() + everyMs;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const tick = () => {
    const now = performance.now();
    lag.add(now - due);
    due = now + everyMs;
    timer = setTimeout(tick, everyMs);
  };
  timer = setTimeout(tick, everyMs);
  return {
    stop() {
      clearTimeout(timer);
      return lag;
    },
  };
}

/** Rejects after `ms` naming `what`, unless `promise` settles first. */
export async function within<T>(what: string, ms: number, promise: Promise<T>): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`Timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** The lines of a byte stream, decoded as UTF-8, without their newline. */
export async function* lines(stream: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  let buffered = "";
  for await (const text of stream.pipeThrough(new TextDecoderStream())) {
    buffered += text;
    for (let nl = buffered.indexOf("\n"); nl >= 0; nl = buffered.indexOf("\n")) {
      yield buffered.slice(0, nl);
      buffered = buffered.slice(nl + 1);
    }
  }
}

/**
 * The whole machine, from /proc: memory in use (total − available, MiB) and CPU seconds busy
 * summed over every core (all but idle and iowait).
 */
export async function machineUsage(): Promise<Usage> {
  const meminfo = await Deno.readTextFile("/proc/meminfo");
  const kb = (key: string) => Number(new RegExp(`${key}:\\s+(\\d+)`).exec(meminfo)?.[1] ?? 0);
  const cpu = (await Deno.readTextFile("/proc/stat")).split("\n")[0]!.trim().split(/\s+/);
  // cpu user nice system idle iowait irq softirq steal …, in USER_HZ (1/100 s) ticks.
  const busy = [1, 2, 3, 6, 7, 8].reduce((sum, i) => sum + Number(cpu[i] ?? 0), 0);
  return { rssMiB: (kb("MemTotal") - kb("MemAvailable")) / 1024, cpuSeconds: busy / 100 };
}

/** Mean and worst-second CPU % (100 = one core) and peak RSS of one process over the samples. */
export interface ProcFigures {
  cpuPct: number;
  worstCpuPct: number;
  peakRssMiB: number;
}

/**
 * Calls each of `probes` (e.g. `() => procUsage(pid)`, `machineUsage`) every second until
 * stopped, or until one fails (its process is gone). CPU figures cover the samples from
 * `steadyFrom` (a `performance.now()` time) on, peak RSS all of them.
 */
export function sampleEverySecond(
  probes: (() => Promise<Usage>)[],
  steadyFrom: number,
): { stop(): Promise<ProcFigures[]> } {
  const samples: { t: number; usage: Usage[] }[] = [];
  let stopped = false;
  const take = async () => {
    const usage = await Promise.all(probes.map((probe) => probe()));
    samples.push({ t: performance.now(), usage });
  };
  let wake = () => {};
  // One second between samples, cut short by stop() so the last sample is taken at once.
  const pause = () =>
    new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, 1000);
      wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  const loop = (async () => {
    try {
      await take();
      while (!stopped) {
        await pause();
        await take();
      }
    } catch { /* a process ended: keep what was sampled */ }
  })();
  return {
    async stop() {
      stopped = true;
      wake();
      await loop;
      const from = Math.max(0, samples.findIndex((s) => s.t >= steadyFrom));
      return probes.map((_, j) => {
        const cpu = (a: number, b: number) =>
          (samples[b]!.usage[j]!.cpuSeconds - samples[a]!.usage[j]!.cpuSeconds) /
          ((samples[b]!.t - samples[a]!.t) / 1000) * 100;
        let worst = 0;
        for (let k = from + 1; k < samples.length; k++) worst = Math.max(worst, cpu(k - 1, k));
        return {
          cpuPct: samples.length > from + 1 ? cpu(from, samples.length - 1) : NaN,
          worstCpuPct: worst,
          peakRssMiB: Math.max(...samples.map((s) => s.usage[j]!.rssMiB)),
        };
      });
    },
  };
}
