/**
 * Helpers shared by the Edge benchmarks: spawning an Edge or a Node process from a
 * config written to a temp dir, percentiles, and process CPU/memory from /proc.
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
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", main, ...(svc === "edge" ? ["--no-console"] : []), "--config", file],
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

/** Resident memory (MiB) and total CPU seconds of a process, from /proc. */
export async function procUsage(pid: number): Promise<{ rssMiB: number; cpuSeconds: number }> {
  const status = await Deno.readTextFile(`/proc/${pid}/status`);
  const rssKb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
  const stat = (await Deno.readTextFile(`/proc/${pid}/stat`)).split(") ")[1]!.split(" ");
  const ticks = Number(stat[11]) + Number(stat[12]);
  return { rssMiB: rssKb / 1024, cpuSeconds: ticks / 100 };
}
