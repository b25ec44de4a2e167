/** The CLI adapter's records of live process groups, which `group_reaper.ts` reads after a crash. */
import assert from "node:assert/strict";
import { IopError } from "../../../shared/errors.ts";
import { createLogger } from "../../../shared/log.ts";
import type { CliProfile, EventSink } from "../ports.ts";
import { createCliAdapter } from "./cli.ts";
import { specFor } from "./contract_case.ts";
import { processStartTime } from "./group_reaper.ts";

/** Every test here spawns processes; the sanitizers prove none of their handles leak. */
function test(name: string, fn: () => Promise<void>): void {
  Deno.test({ name, sanitizeOps: true, sanitizeResources: true, fn });
}

async function tempDir(): Promise<{ path: string } & AsyncDisposable> {
  const path = await Deno.makeTempDir({ prefix: "iop_cli_reap_" });
  return { path, [Symbol.asyncDispose]: () => Deno.remove(path, { recursive: true }) };
}

/** A profile running one shell script that first prints its pid; `$1` is `arg`. */
function shell(name: string, script: string, arg = "", timeoutMs = 0): CliProfile {
  return {
    name,
    command: "sh",
    args: ["-c", `echo $$; ${script}`, "sh", arg],
    resumeArgs: [],
    env: {},
    cwd: "",
    timeoutMs,
    description: "",
  };
}

/** A sink that resolves `pid` with the run's first line, the shell's pid. */
function pidSink(): EventSink & { pid: Promise<number> } {
  const pid = Promise.withResolvers<number>();
  let text = "";
  return {
    pid: pid.promise,
    output(delta) {
      text += delta;
      if (text.includes("\n")) pid.resolve(Number(text.split("\n")[0]));
    },
    toolCall: () => {},
    embedding: () => {},
    log: () => {},
    ready: () => undefined,
  };
}

/** Resolves the record file's content once it exists; the adapter writes it just after spawning. */
async function recordOf(stateDir: string, pid: number): Promise<Record<string, unknown>> {
  const deadline = performance.now() + 2_000;
  while (true) {
    try {
      return JSON.parse(await Deno.readTextFile(`${stateDir}/${pid}.json`));
    } catch (err) {
      if (performance.now() > deadline) throw err;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }
}

const never = () => ({ signal: new AbortController().signal });
const records = (dir: string) => [...Deno.readDirSync(dir)].map((e) => e.name);

test("cli records a live run's process group in stateDir and removes it when the run ends", async () => {
  await using dir = await tempDir();
  const stateDir = `${dir.path}/cli-groups`;
  const gate = `${dir.path}/gate`;
  const adapter = createCliAdapter("cli", {
    profiles: [shell("gated", 'while [ ! -e "$1" ]; do sleep 0.01; done', gate)],
  }, { stateDir });
  const sink = pidSink();
  const spec = specFor({ target: "gated" });
  const execution = adapter.execute(spec, sink, never());
  const pid = await sink.pid;

  const record = await recordOf(stateDir, pid);
  assert.deepEqual(
    [record.pgid, record.startTime, record.runId, record.adapter, record.profile, record.ownerPid],
    [pid, processStartTime(pid), spec.runId, "cli", "gated", Deno.pid],
  );
  await Deno.writeTextFile(gate, "");
  assert.equal((await execution).exitCode, 0);
  assert.deepEqual(records(stateDir), []);
});

test("cli removes a run's record when the run is cancelled or times out", async () => {
  await using dir = await tempDir();
  const adapter = createCliAdapter("cli", {
    profiles: [shell("hang", "sleep 100"), shell("slow", "sleep 100", "", 1_000)],
  }, { stateDir: dir.path, killGraceMs: 200 });

  const cancel = new AbortController();
  const cancelled = pidSink();
  const execution = adapter.execute(specFor({ target: "hang" }), cancelled, cancel);
  await recordOf(dir.path, await cancelled.pid);
  cancel.abort(new DOMException("user cancelled", "AbortError"));
  await assert.rejects(execution, { name: "AbortError" });
  assert.deepEqual(records(dir.path), []);

  const timed = pidSink();
  const timing = adapter.execute(specFor({ target: "slow" }), timed, never());
  await recordOf(dir.path, await timed.pid);
  const err = await timing.catch((e) => e);
  assert.ok(err instanceof IopError && err.code === "TIMEOUT", String(err));
  assert.deepEqual(records(dir.path), []);
});

test("cli still runs when its stateDir cannot be written, with a warn line", async () => {
  await using dir = await tempDir();
  await Deno.writeTextFile(`${dir.path}/file`, "");
  const gate = `${dir.path}/gate`;
  const lines: Record<string, unknown>[] = [];
  const logger = createLogger("test.cli", { writer: (l) => lines.push(JSON.parse(l)) });
  const adapter = createCliAdapter("cli", {
    // Held open by a gate: a process that already exited is not recorded, so nothing would fail.
    profiles: [shell("gated", 'while [ ! -e "$1" ]; do sleep 0.01; done', gate)],
  }, { stateDir: `${dir.path}/file/cli-groups`, logger });

  const execution = adapter.execute(specFor({ target: "gated" }), pidSink(), never());
  const warned = () =>
    lines.find((l) => l.msg === "cannot record CLI process group for reaping after a crash");
  const deadline = performance.now() + 2_000;
  while (warned() === undefined && performance.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  await Deno.writeTextFile(gate, "");

  assert.equal((await execution).exitCode, 0);
  assert.equal(warned()?.level, "warn");
});
