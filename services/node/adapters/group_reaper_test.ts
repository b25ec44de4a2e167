import assert from "node:assert/strict";
import { createLogger, type Logger } from "../../../shared/log.ts";
import {
  type GroupRecord,
  processStartTime,
  reapOrphanedGroups,
  recordGroup,
} from "./group_reaper.ts";
import { settlesWithin } from "./process_group.ts";

/** Every test here spawns processes; the sanitizers prove none of their handles leak. */
function test(name: string, fn: () => Promise<void>): void {
  Deno.test({ name, sanitizeOps: true, sanitizeResources: true, fn });
}

async function tempDir(): Promise<{ path: string } & AsyncDisposable> {
  const path = await Deno.makeTempDir({ prefix: "iop_reap_" });
  return { path, [Symbol.asyncDispose]: () => Deno.remove(path, { recursive: true }) };
}

function captured(): { logger: Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const logger = createLogger("test.reap", {
    level: "debug",
    writer: (line) => lines.push(JSON.parse(line)),
  });
  return { logger, lines };
}

/** True while `pid` is a live process (a zombie has already exited and counts as gone). */
function alive(pid: number): boolean {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    const state = stat.slice(stat.lastIndexOf(")") + 2).charAt(0);
    return state !== "Z" && state !== "X";
  } catch {
    return false;
  }
}

/** A process group like a CLI run's: a shell leading it and a background grandchild. */
interface Group extends AsyncDisposable {
  leader: Deno.ChildProcess;
  grandchild: number;
}

/** Starts `sh -c` in its own group; `prelude` runs first (e.g. a trap), inherited by the child. */
async function startGroup(prelude = ""): Promise<Group> {
  const leader = new Deno.Command("sh", {
    args: ["-c", `${prelude} sleep 300 >/dev/null 2>&1 & echo $!; wait`],
    detached: true,
    stdin: "null",
    stdout: "piped",
    stderr: "null",
  }).spawn();
  const reader = leader.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  while (!text.includes("\n")) {
    const { done, value } = await reader.read();
    if (done) break;
    text += value;
  }
  await reader.cancel();
  const grandchild = Number(text.trim());
  return {
    leader,
    grandchild,
    async [Symbol.asyncDispose]() {
      // By recorded pid only; either may already be gone.
      for (const pid of [grandchild, leader.pid]) {
        try {
          Deno.kill(pid, "SIGKILL");
        } catch {
          // Already gone.
        }
      }
      await leader.status;
    },
  };
}

const OWN_START = processStartTime(Deno.pid)!;
/** This pid with another start time: a previous Node process, long gone. */
const DEAD_OWNER = { ownerPid: Deno.pid, ownerStartTime: OWN_START + 1 };

async function writeRecord(dir: string, record: Partial<GroupRecord> & { pgid: number }) {
  const full: GroupRecord = {
    startTime: processStartTime(record.pgid) ?? 1,
    runId: "run_orphan",
    adapter: "cli",
    profile: "tree",
    ...DEAD_OWNER,
    ...record,
  };
  const path = `${dir}/${record.pgid}.json`;
  await Deno.writeTextFile(path, JSON.stringify(full));
  return path;
}

async function exists(path: string): Promise<boolean> {
  return await Deno.stat(path).then(() => true, () => false);
}

test("reapOrphanedGroups kills the group of a dead node's run, leader and grandchild, with a warn line", async () => {
  await using dir = await tempDir();
  await using group = await startGroup();
  const path = await writeRecord(dir.path, { pgid: group.leader.pid, runId: "run_a" });
  const { logger, lines } = captured();

  assert.equal(await reapOrphanedGroups(dir.path, { logger, killGraceMs: 2_000 }), 1);

  assert.equal(alive(group.leader.pid), false);
  assert.equal(alive(group.grandchild), false);
  assert.equal((await group.leader.status).signal, "SIGTERM");
  assert.equal(await exists(path), false);
  const warn = lines.find((l) => l.msg === "orphaned CLI process group killed");
  assert.deepEqual(
    [warn?.level, warn?.pgid, warn?.run_id, warn?.profile, warn?.adapter, warn?.sigkill],
    ["warn", group.leader.pid, "run_a", "tree", "cli", false],
  );
});

test("reapOrphanedGroups escalates to SIGKILL when the orphaned group ignores SIGTERM", async () => {
  await using dir = await tempDir();
  // An ignored signal stays ignored across exec, so the grandchild ignores SIGTERM too.
  await using group = await startGroup("trap '' TERM;");
  await writeRecord(dir.path, { pgid: group.leader.pid });
  const { logger, lines } = captured();

  assert.equal(await reapOrphanedGroups(dir.path, { logger, killGraceMs: 150 }), 1);

  assert.equal(alive(group.grandchild), false);
  assert.equal((await group.leader.status).signal, "SIGKILL");
  const warn = lines.find((l) => l.msg === "orphaned CLI process group killed");
  assert.equal(warn?.sigkill, true);
});

test("reapOrphanedGroups removes the record of a process that no longer exists, killing nothing", async () => {
  await using dir = await tempDir();
  const gone = new Deno.Command("sleep", { args: ["300"], detached: true }).spawn();
  const startTime = processStartTime(gone.pid)!;
  gone.kill("SIGKILL");
  await gone.status;
  const path = await writeRecord(dir.path, { pgid: gone.pid, startTime });
  const { logger, lines } = captured();

  assert.equal(await reapOrphanedGroups(dir.path, { logger }), 0);

  assert.equal(await exists(path), false);
  assert.ok(lines.some((l) => l.msg === "stale CLI process group record removed"));
  assert.ok(!lines.some((l) => l.msg === "orphaned CLI process group killed"));
});

test("reapOrphanedGroups removes a record whose start time differs and leaves that live process alone", async () => {
  await using dir = await tempDir();
  // Its own group, so a wrong kill(-pgid) would reach it: the same pid, another process.
  const other = new Deno.Command("sleep", { args: ["300"], detached: true }).spawn();
  try {
    const startTime = processStartTime(other.pid)!;
    const path = await writeRecord(dir.path, { pgid: other.pid, startTime: startTime - 1 });
    const { logger, lines } = captured();

    assert.equal(await reapOrphanedGroups(dir.path, { logger, killGraceMs: 50 }), 0);

    assert.equal(await exists(path), false);
    assert.equal(await settlesWithin(other.status, 200), false, "the process was signalled");
    assert.ok(alive(other.pid));
    assert.ok(!lines.some((l) => l.msg === "orphaned CLI process group killed"));
  } finally {
    other.kill("SIGKILL");
    await other.status;
  }
});

test("reapOrphanedGroups leaves the groups of a node that still runs alone", async () => {
  await using dir = await tempDir();
  await using group = await startGroup();
  const path = await writeRecord(dir.path, {
    pgid: group.leader.pid,
    ownerPid: Deno.pid,
    ownerStartTime: OWN_START,
  });

  assert.equal(await reapOrphanedGroups(dir.path, { logger: captured().logger }), 0);

  assert.ok(await exists(path));
  assert.ok(alive(group.leader.pid) && alive(group.grandchild));
});

test("reapOrphanedGroups removes an unreadable record and accepts a missing directory", async () => {
  await using dir = await tempDir();
  await Deno.writeTextFile(`${dir.path}/123.json`, "{not json");
  await Deno.writeTextFile(`${dir.path}/notes.txt`, "not a record");
  const { logger, lines } = captured();

  assert.equal(await reapOrphanedGroups(dir.path, { logger }), 0);
  assert.equal(await reapOrphanedGroups(`${dir.path}/missing`, { logger }), 0);

  assert.equal(await exists(`${dir.path}/123.json`), false);
  assert.ok(await exists(`${dir.path}/notes.txt`), "only records are touched");
  assert.deepEqual(lines.map((l) => l.msg), ["unreadable CLI process group record removed"]);
});

test("recordGroup writes the pgid, start times, run and owner; remove() forgets them", async () => {
  await using dir = await tempDir();
  await using group = await startGroup();
  const stateDir = `${dir.path}/cli-groups`;
  const recorded = await recordGroup(stateDir, {
    pgid: group.leader.pid,
    runId: "run_r",
    adapter: "cli",
    profile: "tree",
  });
  assert.ok(recorded);
  const record = JSON.parse(await Deno.readTextFile(recorded.path));
  assert.deepEqual(record, {
    pgid: group.leader.pid,
    runId: "run_r",
    adapter: "cli",
    profile: "tree",
    startTime: processStartTime(group.leader.pid),
    ownerPid: Deno.pid,
    ownerStartTime: OWN_START,
  });
  await recorded.remove();
  assert.deepEqual([...Deno.readDirSync(stateDir)], []);
  await recorded.remove(); // a second removal is harmless
});
