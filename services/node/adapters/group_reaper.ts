/**
 * Records the process groups of running CLI runs on disk, so that a Node restarted after a hard
 * death (kill -9, OOM, crash) can stop the groups its previous process left running.
 *
 * Each live group has one small JSON file `<pgid>.json` in a state directory, written right after
 * the spawn and removed once the group is gone. It names the group, the leader's start time
 * (field 22 of `/proc/<pid>/stat`, clock ticks since boot), the run, and the Node process that
 * owns it (pid and start time too). At startup {@linkcode reapOrphanedGroups} reads each file:
 *
 * - its owner still runs (another Node sharing the directory, or this very process): left alone;
 * - its leader is gone, a zombie, or a process with another start time (a reused pid): the file
 *   is removed and nothing is signalled, because that pid is no longer ours;
 * - otherwise the group is ours and orphaned: SIGTERM, then SIGKILL after the grace period.
 *
 * A group whose leader has exited while other members live on is not reaped: without the leader
 * no start time proves that the group id was not reused. Linux only: without `/proc` nothing is
 * recorded and nothing is reaped.
 * @module
 */
import { createLogger, type Logger } from "../../../shared/log.ts";
import { DEFAULT_KILL_GRACE_MS, signalGroup } from "./process_group.ts";

/** What one file of the state directory says about a run's process group. */
export interface GroupRecord {
  /** The process group id, which is also the leader's pid. */
  pgid: number;
  /** The leader's start time, in clock ticks since boot. */
  startTime: number;
  runId: string;
  adapter: string;
  profile: string;
  /** The Node process that started the run. */
  ownerPid: number;
  ownerStartTime: number;
}

/** A recorded group; `remove()` forgets it once the group is gone. */
export interface RecordedGroup {
  readonly path: string;
  /** Deletes the file; never throws, a file left behind is discarded by the next reaping. */
  remove(): Promise<void>;
}

/** Options of {@linkcode reapOrphanedGroups}. */
export interface ReapOptions {
  /** Time between SIGTERM and SIGKILL; defaults to the CLI adapter's 2 s. */
  killGraceMs?: number;
  /** Defaults to a logger for component "node.adapter.cli". */
  logger?: Logger;
}

/** How long to wait for a group to vanish after SIGKILL. */
const SIGKILL_WAIT_MS = 1_000;
/** Interval of the /proc polls while waiting for a group to exit (no event tells us). */
const POLL_MS = 20;

interface ProcStat {
  state: string;
  pgrp: number;
  startTime: number;
}

/** Fields 3 (state), 5 (pgrp) and 22 (starttime) of `/proc/<pid>/stat`; undefined when gone. */
function procStat(pid: number | "self"): ProcStat | undefined {
  let text: string;
  try {
    text = Deno.readTextFileSync(`/proc/${pid}/stat`);
  } catch {
    return undefined;
  }
  // The command name (field 2) may hold spaces and parentheses; fields after it do not.
  const rest = text.slice(text.lastIndexOf(")") + 2).split(" ");
  const pgrp = Number(rest[2]);
  const startTime = Number(rest[19]);
  if (!Number.isInteger(pgrp) || !Number.isInteger(startTime)) return undefined;
  return { state: rest[0] ?? "", pgrp, startTime };
}

/** Whether `pid` runs and started at `startTime`; a zombie has exited and counts as gone. */
function runsSince(pid: number, startTime: number): boolean {
  const stat = procStat(pid);
  return stat !== undefined && stat.state !== "Z" && stat.state !== "X" &&
    stat.startTime === startTime;
}

/** The start time of a running process, for a {@linkcode GroupRecord}; undefined when gone. */
export function processStartTime(pid: number): number | undefined {
  const stat = procStat(pid);
  return stat === undefined || stat.state === "Z" ? undefined : stat.startTime;
}

let ownStartTime: number | undefined;

/**
 * Writes the record of a freshly spawned group led by `run.pgid` into `stateDir` (created when
 * missing); resolves undefined when the leader is already gone or `/proc` is unavailable, and
 * rejects when the file cannot be written.
 */
export async function recordGroup(
  stateDir: string,
  run: { pgid: number; runId: string; adapter: string; profile: string },
): Promise<RecordedGroup | undefined> {
  const startTime = processStartTime(run.pgid);
  ownStartTime ??= processStartTime(Deno.pid);
  if (startTime === undefined || ownStartTime === undefined) return undefined;
  const record: GroupRecord = {
    ...run,
    startTime,
    ownerPid: Deno.pid,
    ownerStartTime: ownStartTime,
  };
  const path = `${stateDir}/${run.pgid}.json`;
  await Deno.mkdir(stateDir, { recursive: true });
  await Deno.writeTextFile(path, JSON.stringify(record) + "\n");
  return { path, remove: () => Deno.remove(path).catch(() => {}) };
}

function parseRecord(text: string, pgid: number): GroupRecord | undefined {
  let value: Partial<Record<keyof GroupRecord, unknown>>;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  const ints = [value.pgid, value.startTime, value.ownerPid, value.ownerStartTime];
  const strings = [value.runId, value.adapter, value.profile];
  if (!ints.every((v) => Number.isInteger(v) && (v as number) > 0)) return undefined;
  if (!strings.every((v) => typeof v === "string")) return undefined;
  return value.pgid === pgid ? value as GroupRecord : undefined;
}

/** Whether any live process still belongs to group `pgid`. */
function groupAlive(pgid: number): boolean {
  for (const entry of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    const stat = procStat(Number(entry.name));
    if (stat?.pgrp === pgid && stat.state !== "Z" && stat.state !== "X") return true;
  }
  return false;
}

async function groupGoneWithin(pgid: number, ms: number): Promise<boolean> {
  const deadline = performance.now() + ms;
  while (groupAlive(pgid)) {
    if (performance.now() >= deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
  return true;
}

/**
 * SIGTERM, then SIGKILL after `graceMs`; resolves whether SIGKILL was needed and whether the group
 * is gone. While any member lives the kernel keeps the group id from being reused, so the second
 * signal still reaches our group even if the leader died in between.
 */
async function stopGroup(
  pgid: number,
  graceMs: number,
): Promise<{ killed: boolean; gone: boolean }> {
  signalGroup(pgid, "SIGTERM");
  if (await groupGoneWithin(pgid, graceMs)) return { killed: false, gone: true };
  signalGroup(pgid, "SIGKILL");
  return { killed: true, gone: await groupGoneWithin(pgid, SIGKILL_WAIT_MS) };
}

type Outcome = "killed" | "stale" | "owned" | "alive";

async function reapOne(path: string, pgid: number, graceMs: number, log: Logger): Promise<Outcome> {
  const record = parseRecord(await Deno.readTextFile(path), pgid);
  if (record === undefined) {
    log.warn("unreadable CLI process group record removed", { path });
    await Deno.remove(path);
    return "stale";
  }
  const fields = { pgid, run_id: record.runId, adapter: record.adapter, profile: record.profile };
  if (runsSince(record.ownerPid, record.ownerStartTime)) {
    log.debug("CLI process group record kept: its node still runs", {
      ...fields,
      owner_pid: record.ownerPid,
    });
    return "owned";
  }
  const leader = procStat(pgid);
  if (!runsSince(pgid, record.startTime) || leader?.pgrp !== pgid) {
    log.debug("stale CLI process group record removed", fields);
    await Deno.remove(path);
    return "stale";
  }
  const { killed, gone } = await stopGroup(pgid, graceMs);
  if (!gone) {
    // Kept, so the next start tries again; the start time check still guards the pid.
    log.error("orphaned CLI process group survived SIGKILL", fields);
    return "alive";
  }
  log.warn("orphaned CLI process group killed", { ...fields, sigkill: killed });
  await Deno.remove(path);
  return "killed";
}

/**
 * Stops the process groups recorded in `stateDir` by Node processes that no longer run, and
 * removes the records of groups that are gone; resolves how many groups it killed. Never throws:
 * a record it cannot handle is logged and left for the next start.
 */
export async function reapOrphanedGroups(
  stateDir: string,
  options: ReapOptions = {},
): Promise<number> {
  const log = options.logger ?? createLogger("node.adapter.cli");
  const graceMs = options.killGraceMs ?? DEFAULT_KILL_GRACE_MS;
  const files: { path: string; pgid: number }[] = [];
  try {
    for await (const entry of Deno.readDir(stateDir)) {
      const m = entry.name.match(/^(\d+)\.json$/);
      if (entry.isFile && m) files.push({ path: `${stateDir}/${entry.name}`, pgid: Number(m[1]) });
    }
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) {
      log.warn("cannot read CLI process group records", { state_dir: stateDir, err });
    }
    return 0;
  }
  // Groups are stopped in parallel, so a node restarts after one grace period, not one per group.
  const outcomes = await Promise.all(
    files.map(({ path, pgid }) =>
      reapOne(path, pgid, graceMs, log).catch((err) => {
        log.warn("cannot reap CLI process group", { path, pgid, err });
        return "alive" as const;
      })
    ),
  );
  return outcomes.filter((o) => o === "killed").length;
}
