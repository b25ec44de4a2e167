import assert from "node:assert/strict";
import { IopError, OverloadedError } from "../../../shared/errors.ts";
import { createLogger } from "../../../shared/log.ts";
import type { CliProfile, EventSink } from "../ports.ts";
import { cliAdapterFactory, createCliAdapter, INHERITED_ENV } from "./cli.ts";
import { specFor } from "./contract_case.ts";

/** Every test here spawns processes; the sanitizers prove none of their handles leak. */
function test(name: string, fn: () => Promise<void>): void {
  Deno.test({ name, sanitizeOps: true, sanitizeResources: true, fn });
}

function profile(partial: Partial<CliProfile> & { name: string }): CliProfile {
  return {
    command: "sh",
    args: [],
    resumeArgs: [],
    env: {},
    cwd: "",
    timeoutMs: 0,
    description: "",
    ...partial,
  };
}

/** A profile running one shell script; `positional` become `$1`, `$2`... */
function shell(
  name: string,
  script: string,
  extra: Partial<CliProfile> = {},
  positional: string[] = [],
): CliProfile {
  return profile({ name, ...extra, args: ["-c", script, "sh", ...positional] });
}

interface Recorder extends EventSink {
  deltas: string[];
  logs: [string, string][];
  /** Resolves with the first delta. */
  first: Promise<string>;
}

function recorder(onOutput: (text: string) => void = () => {}): Recorder {
  const deltas: string[] = [];
  const logs: [string, string][] = [];
  const first = Promise.withResolvers<string>();
  return {
    deltas,
    logs,
    first: first.promise,
    output(text) {
      deltas.push(text);
      first.resolve(text);
      onOutput(text);
    },
    toolCall: () => {},
    embedding: () => {},
    log: (stream, text) => logs.push([stream, text]),
    ready: () => undefined,
  };
}

async function tempDir(): Promise<{ path: string } & AsyncDisposable> {
  const path = await Deno.realPath(await Deno.makeTempDir({ prefix: "iop_cli_" }));
  return { path, [Symbol.asyncDispose]: () => Deno.remove(path, { recursive: true }) };
}

/** True while `pid` is a live process (a zombie has already exited and counts as gone). */
function alive(pid: number): boolean {
  let stat: string;
  try {
    stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
  } catch {
    return false;
  }
  const state = stat.slice(stat.lastIndexOf(")") + 2).charAt(0);
  return state !== "Z" && state !== "X";
}

/** Waits until `pid` is gone; a delivered signal takes a moment to end a process. */
async function gone(pid: number, withinMs = 1_000): Promise<boolean> {
  const deadline = performance.now() + withinMs;
  while (alive(pid)) {
    if (performance.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return true;
}

async function readPid(path: string): Promise<number> {
  const pid = Number((await Deno.readTextFile(path)).trim());
  assert.ok(Number.isInteger(pid) && pid > 0, `no pid in ${path}`);
  return pid;
}

const never = () => ({ signal: new AbortController().signal });

/** Spawns a background grandchild that does not hold our pipes and records its pid. */
const GRANDCHILD = 'sleep 100 >/dev/null 2>&1 & echo $! > "$PIDFILE"';

test("cli streams stdout live: the first delta arrives before the process exits", async () => {
  await using dir = await tempDir();
  const gate = `${dir.path}/gate`;
  const adapter = createCliAdapter("cli", {
    profiles: [
      shell("gated", 'echo first; while [ ! -e "$1" ]; do sleep 0.01; done; echo second', {}, [
        gate,
      ]),
    ],
  });
  // The process cannot exit until the gate exists, and the gate is made on the first delta.
  const sink = recorder(() => Deno.writeTextFileSync(gate, ""));
  const result = await adapter.execute(specFor({ target: "gated" }), sink, never());
  assert.equal(sink.deltas[0], "first\n");
  assert.equal(sink.deltas.join(""), "first\nsecond\n");
  assert.equal(result.exitCode, 0);
});

test("cli sends stderr to the sink's log, not to the answer", async () => {
  const adapter = createCliAdapter("cli", {
    profiles: [shell("both", "echo out; echo err >&2")],
  });
  const sink = recorder();
  await adapter.execute(specFor({ target: "both" }), sink, never());
  assert.equal(sink.deltas.join(""), "out\n");
  assert.deepEqual(sink.logs, [["stderr", "err\n"]]);
});

test("cli completes on exit code 0 with the stdout line count as output tokens", async () => {
  const adapter = createCliAdapter("cli", { profiles: [shell("ok", "printf 'a\\nb\\nc'")] });
  const result = await adapter.execute(specFor({ target: "ok" }), recorder(), never());
  assert.deepEqual(result, {
    finishReason: "stop",
    exitCode: 0,
    usage: { inputTokens: 0, outputTokens: 3 },
  });
});

test("cli fails on a non-zero exit with BACKEND_ERROR quoting the last stderr line", async () => {
  const adapter = createCliAdapter("cli", {
    profiles: [shell("fail", "echo partial; echo warming up >&2; echo 'disk full' >&2; exit 7")],
  });
  const sink = recorder();
  const err = await adapter.execute(specFor({ target: "fail" }), sink, never()).catch((e) => e);
  assert.ok(err instanceof IopError);
  assert.equal(err.code, "BACKEND_ERROR");
  assert.equal(err.message, "CLI profile 'fail' exited with code 7: disk full");
  assert.equal(err.exitCode, 7);
  assert.equal(err.retryable, false);
  assert.equal(sink.deltas.join(""), "partial\n");
});

test("cli sets the profile env over the inherited PATH and runs in the profile cwd", async () => {
  await using dir = await tempDir();
  const adapter = createCliAdapter("cli", {
    profiles: [
      shell("env", 'echo "$IOP_CLI_TEST|$PATH"; pwd', {
        env: { IOP_CLI_TEST: "set" },
        cwd: dir.path,
      }),
    ],
  });
  const sink = recorder();
  await adapter.execute(specFor({ target: "env" }), sink, never());
  assert.equal(sink.deltas.join(""), `set|${Deno.env.get("PATH")}\n${dir.path}\n`);
});

/** Runs `fn` with node variables set (a token and a provider key), then removes them. */
async function withNodeSecrets(fn: (secrets: string[]) => Promise<void>): Promise<void> {
  const secrets = { IOP_NODE_TOKEN: "node-token-s3cret", OPENAI_API_KEY: "sk-node-s3cret" };
  for (const [name, value] of Object.entries(secrets)) Deno.env.set(name, value);
  try {
    await fn(Object.values(secrets));
  } finally {
    for (const name of Object.keys(secrets)) Deno.env.delete(name);
  }
}

/** `NAME=value` lines of `env` output as a map. */
function parseEnv(text: string): Map<string, string> {
  return new Map(
    text.split("\n").filter((l) => l.includes("=")).map((l) => {
      const i = l.indexOf("=");
      return [l.slice(0, i), l.slice(i + 1)] as const;
    }),
  );
}

test("cli starts a profile from a cleared environment: no IOP_ variable, no node secret", async () => {
  await withNodeSecrets(async (secrets) => {
    const adapter = createCliAdapter("cli", {
      profiles: [
        profile({ name: "env", command: "env", env: { ASKED_FOR: "yes" } }),
        shell("shell-env", "env"),
        shell("path", "command -v ls >/dev/null && echo path-ok"),
      ],
    });
    const direct = recorder();
    await adapter.execute(specFor({ target: "env" }), direct, never());
    const env = parseEnv(direct.deltas.join(""));
    const allowed = new Set([...INHERITED_ENV, "ASKED_FOR"]);
    assert.deepEqual([...env.keys()].filter((k) => !allowed.has(k)), [], "unasked-for variables");
    assert.equal(env.get("ASKED_FOR"), "yes");
    assert.equal(env.get("PATH"), Deno.env.get("PATH"));

    // A shell adds only its own bookkeeping (PWD, SHLVL, _) to what it was given.
    const shellOut = recorder();
    await adapter.execute(specFor({ target: "shell-env" }), shellOut, never());
    const shellEnv = parseEnv(shellOut.deltas.join(""));
    const shellAllowed = new Set([...INHERITED_ENV, "PWD", "OLDPWD", "SHLVL", "_"]);
    assert.deepEqual([...shellEnv.keys()].filter((k) => !shellAllowed.has(k)), []);

    for (const text of [direct.deltas.join(""), shellOut.deltas.join("")]) {
      assert.doesNotMatch(text, /^IOP_/m);
      for (const secret of secrets) assert.ok(!text.includes(secret), "a node secret leaked");
    }
    const path = recorder();
    await adapter.execute(specFor({ target: "path" }), path, never());
    assert.equal(path.deltas.join(""), "path-ok\n");
  });
});

test("cli runs a bare command found on the node's PATH, not on a PATH the profile sets", async () => {
  await using dir = await tempDir();
  await Deno.writeTextFile(`${dir.path}/sh`, "#!/bin/sh\necho hijacked\n", { mode: 0o755 });
  const adapter = createCliAdapter("cli", {
    profiles: [shell("real", 'echo "real $PATH"', { env: { PATH: dir.path } })],
  });
  const sink = recorder();
  await adapter.execute(specFor({ target: "real" }), sink, never());
  assert.equal(sink.deltas.join(""), `real ${dir.path}\n`);
});

test("cli fills {node_id} with the node's id; a prompt naming it stays as written", async () => {
  const adapter = createCliAdapter("cli", {
    profiles: [shell("who", 'printf "%s|%s" "$1" "$2"', {}, ["{node_id}", "{prompt}"])],
  }, { nodeId: "node-7" });
  const sink = recorder();
  await adapter.execute(specFor({ target: "who", prompt: "I am {node_id}" }), sink, never());
  assert.equal(sink.deltas.join(""), "node-7|I am {node_id}");
});

test("cli fills {prompt} and {session}, using resumeArgs to continue a session", async () => {
  const adapter = createCliAdapter("cli", {
    profiles: [profile({
      name: "agent",
      args: ["-c", 'printf "new:%s" "$1"', "sh", "{prompt}"],
      resumeArgs: ["-c", 'printf "resume:%s:%s" "$1" "$2"', "sh", "{session}", "{prompt}"],
    })],
  });
  const fresh = recorder();
  await adapter.execute(
    specFor({ target: "agent", prompt: "it's $HOME {session}" }),
    fresh,
    never(),
  );
  assert.equal(fresh.deltas.join(""), "new:it's $HOME {session}");

  const resumed = recorder();
  const spec = specFor({
    target: "agent",
    sessionId: "s-42",
    messages: [{ role: "user", content: "old" }, { role: "user", content: "latest question" }],
  });
  await adapter.execute(spec, resumed, never());
  assert.equal(resumed.deltas.join(""), "resume:s-42:latest question");
});

test("cli starts a session marked new with args and {session} set, and refuses an id starting with '-'", async () => {
  const adapter = createCliAdapter("cli", {
    profiles: [profile({
      name: "agent",
      args: ["-c", 'printf "new:%s:%s" "$1" "$2"', "sh", "{session}", "{prompt}"],
      resumeArgs: ["-c", 'printf "resume:%s" "$1"', "sh", "{session}"],
    })],
  });
  const first = recorder();
  await adapter.execute(
    specFor({
      target: "agent",
      prompt: "hi",
      sessionId: "s-1",
      metadata: { "iop.session": "new" },
    }),
    first,
    never(),
  );
  assert.equal(first.deltas.join(""), "new:s-1:hi");
  await assert.rejects(
    adapter.execute(specFor({ target: "agent", sessionId: "--help" }), recorder(), never()),
    (err: unknown) => {
      assert.ok(err instanceof IopError);
      assert.equal(err.code, "INVALID_ARGUMENT");
      assert.equal(
        err.message,
        "Cannot run CLI profile 'agent' as session id '--help' starts with '-'",
      );
      return true;
    },
  );
});

test("cli rejects an unknown profile with NOT_FOUND", async () => {
  const adapter = createCliAdapter("cli", { profiles: [shell("ok", "true")] });
  const err = await adapter.execute(specFor({ target: "nope" }), recorder(), never()).catch((e) =>
    e
  );
  assert.ok(err instanceof IopError);
  assert.equal(err.code, "NOT_FOUND");
  assert.equal(err.message, "Cannot run target 'nope' as CLI adapter 'cli' has no such profile");
});

test("cli reports a command that cannot be spawned as BACKEND_ERROR", async () => {
  const adapter = createCliAdapter("cli", {
    profiles: [profile({ name: "ghost", command: "iop-no-such-command-xyz" })],
  });
  const err = await adapter.execute(specFor({ target: "ghost" }), recorder(), never()).catch((e) =>
    e
  );
  assert.ok(err instanceof IopError);
  assert.equal(err.code, "BACKEND_ERROR");
  assert.match(
    err.message,
    /^Cannot start CLI profile 'ghost' as command 'iop-no-such-command-xyz'/,
  );
});

test("cli cancel kills the whole process group, grandchildren included", async () => {
  await using dir = await tempDir();
  const pidFile = `${dir.path}/pid`;
  const adapter = createCliAdapter("cli", {
    profiles: [shell("tree", `${GRANDCHILD}; echo ready; sleep 100 & wait`, {
      env: { PIDFILE: pidFile },
    })],
  });
  const controller = new AbortController();
  const sink = recorder();
  const execution = adapter.execute(specFor({ target: "tree" }), sink, {
    signal: controller.signal,
  });
  assert.equal(await sink.first, "ready\n");
  const grandchild = await readPid(pidFile);
  assert.ok(alive(grandchild));
  const reason = new DOMException("user cancelled", "AbortError");
  const abortedAt = performance.now();
  controller.abort(reason);
  await assert.rejects(execution, (e) => e === reason);
  assert.ok(performance.now() - abortedAt < 1_500, "SIGTERM ends the group without the grace");
  assert.ok(await gone(grandchild), `grandchild ${grandchild} survived the cancel`);
});

test("cli timeout kills the process group and fails with TIMEOUT", async () => {
  await using dir = await tempDir();
  const pidFile = `${dir.path}/pid`;
  const adapter = createCliAdapter("cli", {
    profiles: [shell("hang", `${GRANDCHILD}; echo started; sleep 100`, {
      env: { PIDFILE: pidFile },
      timeoutMs: 300,
    })],
  });
  const sink = recorder();
  const started = performance.now();
  const err = await adapter.execute(specFor({ target: "hang" }), sink, never()).catch((e) => e);
  const took = performance.now() - started;
  assert.ok(err instanceof IopError);
  assert.equal(err.code, "TIMEOUT");
  assert.equal(err.message, "CLI profile 'hang' timed out after 300 ms");
  assert.ok(took >= 300 && took < 1_500, `took ${took} ms`);
  assert.equal(sink.deltas.join(""), "started\n");
  assert.ok(await gone(await readPid(pidFile)), "grandchild survived the timeout");
});

test("cli applies the smaller of the profile's and the run's time limits", async () => {
  const adapter = createCliAdapter("cli", {
    profiles: [shell("hang", "sleep 100", { timeoutMs: 10_000 })],
  });
  const spec = specFor({ target: "hang", timeoutMs: 200 });
  const err = await adapter.execute(spec, recorder(), never()).catch((e) => e);
  assert.ok(err instanceof IopError);
  assert.equal(err.message, "CLI profile 'hang' timed out after 200 ms");
});

test("cli escalates to SIGKILL when the group ignores SIGTERM", async () => {
  await using dir = await tempDir();
  const lines: string[] = [];
  const pidFile = `${dir.path}/pid`;
  const adapter = createCliAdapter("cli", {
    profiles: [
      shell("stubborn", `trap '' TERM; ${GRANDCHILD}; echo ready; while :; do sleep 1; done`, {
        env: { PIDFILE: pidFile },
      }),
    ],
  }, { killGraceMs: 300, logger: createLogger("test", { writer: (line) => lines.push(line) }) });
  const controller = new AbortController();
  const sink = recorder();
  const execution = adapter.execute(specFor({ target: "stubborn" }), sink, {
    signal: controller.signal,
  });
  await sink.first;
  const grandchild = await readPid(pidFile);
  const abortedAt = performance.now();
  controller.abort("stop");
  await assert.rejects(execution, (e) => e === "stop");
  const took = performance.now() - abortedAt;
  assert.ok(took >= 300 && took < 1_500, `took ${took} ms; the grace period is 300 ms`);
  assert.ok(await gone(grandchild), "the SIGTERM-proof grandchild survived SIGKILL");
  const warning = lines.map((l) => JSON.parse(l)).find((l) => l.level === "warn");
  assert.equal(warning?.msg, "cli process group ignored SIGTERM");
  assert.equal(warning?.profile, "stubborn");
});

test("cli stops processes a run left in the background after a normal exit", async () => {
  await using dir = await tempDir();
  const pidFile = `${dir.path}/pid`;
  const adapter = createCliAdapter("cli", {
    profiles: [shell("leaky", `${GRANDCHILD}; echo done`, { env: { PIDFILE: pidFile } })],
  });
  const result = await adapter.execute(specFor({ target: "leaky" }), recorder(), never());
  assert.equal(result.exitCode, 0);
  assert.ok(await gone(await readPid(pidFile)), "the background process outlived the run");
});

test("cli close() stops running runs and refuses new ones with UNAVAILABLE", async () => {
  const adapter = createCliAdapter("cli", { profiles: [shell("hang", "echo up; sleep 100")] });
  const sink = recorder();
  const execution = adapter.execute(specFor({ target: "hang" }), sink, never());
  await sink.first;
  await adapter.close?.();
  await assert.rejects(execution, (e) => e instanceof IopError && e.code === "UNAVAILABLE");
  await assert.rejects(
    adapter.execute(specFor({ target: "hang" }), recorder(), never()),
    (e) => e instanceof IopError && e.code === "UNAVAILABLE",
  );
});

test("cli capabilities list profiles whose command exists, by name or absolute path", async () => {
  const adapter = createCliAdapter("cli", {
    profiles: [
      profile({ name: "by-name", command: "sh" }),
      profile({ name: "by-path", command: "/bin/sh", resumeArgs: ["--resume", "{session}"] }),
      profile({ name: "missing", command: "iop-no-such-command-xyz" }),
      profile({ name: "bad-path", command: "/nonexistent/sh" }),
    ],
  });
  const caps = await adapter.capabilities(never());
  assert.deepEqual(caps.targets, ["by-name", "by-path"]);
  assert.equal(caps.sessions, true);
  assert.equal(caps.streaming, true);
  assert.equal(caps.tools, false);
  assert.equal(caps.healthy, true);
  assert.equal(
    caps.detail,
    "2 of 4 profiles runnable; command not found for: missing (iop-no-such-command-xyz), " +
      "bad-path (/nonexistent/sh)",
  );
});

test("cli without runnable profiles or resumeArgs reports unhealthy and no sessions", async () => {
  const adapter = createCliAdapter("cli", {
    profiles: [profile({ name: "missing", command: "iop-no-such-command-xyz" })],
  });
  const caps = await adapter.capabilities(never());
  assert.deepEqual(caps.targets, []);
  assert.equal(caps.sessions, false);
  assert.equal(caps.healthy, false);
});

test("cliAdapterFactory builds a named CLI adapter and refuses other kinds", () => {
  const adapter = cliAdapterFactory({
    name: "tools",
    enabled: true,
    kind: "cli",
    settings: { profiles: [] },
  });
  assert.equal(adapter.name, "tools");
  assert.equal(adapter.kind, "cli");
  const mock = {
    tokens: 1,
    tokenDelayMs: 0,
    startDelayMs: 0,
    failWith: "",
    failRetryable: false,
    embeddingDimensions: 8,
  };
  assert.throws(
    () => cliAdapterFactory({ name: "m", enabled: true, kind: "mock", settings: mock }),
    TypeError,
  );
  return Promise.resolve();
});

const deadline = () => ({ signal: AbortSignal.timeout(5_000) });

/** Starts `n` runs of a profile that prints "up" and then waits to be cancelled. */
async function startHanging(
  adapter: ReturnType<typeof createCliAdapter>,
  target: string,
  n: number,
): Promise<{ controller: AbortController; execution: Promise<unknown> }[]> {
  const runs = [];
  for (let i = 0; i < n; i++) {
    const controller = new AbortController();
    const sink = recorder();
    const execution = adapter.execute(specFor({ target }), sink, { signal: controller.signal });
    execution.catch(() => {});
    await sink.first;
    runs.push({ controller, execution });
  }
  return runs;
}

async function cancelAll(runs: { controller: AbortController; execution: Promise<unknown> }[]) {
  for (const r of runs) r.controller.abort(new IopError("CANCELLED", "test over"));
  await Promise.allSettled(runs.map((r) => r.execution));
}

test("cli refuses a run beyond its profile's maxConcurrency with OVERLOADED until a slot frees", async () => {
  const adapter = createCliAdapter("cli", {
    profiles: [
      shell("hang", "echo up; sleep 100", { maxConcurrency: 2 }),
      shell("other", "echo other", { maxConcurrency: 1 }),
    ],
  });
  const runs = await startHanging(adapter, "hang", 2);
  try {
    await assert.rejects(
      // Bounded: were it admitted, the run would end at this deadline and fail the check.
      adapter.execute(specFor({ target: "hang" }), recorder(), deadline()),
      (err: unknown) => {
        assert.ok(err instanceof OverloadedError);
        assert.equal(err.code, "OVERLOADED");
        assert.equal(err.retryAfterSeconds, 5);
        assert.equal(
          err.message,
          "Cannot run CLI profile 'hang' as it is at its limit on this node: 2 of " +
            "max_concurrency 2 runs executing",
        );
        return true;
      },
    );
    // The limit is per profile: another profile of the adapter still runs.
    const other = recorder();
    await adapter.execute(specFor({ target: "other" }), other, never());
    assert.equal(other.deltas.join(""), "other\n");
    // One run ends: its slot takes the next run at once.
    runs[0]!.controller.abort(new IopError("CANCELLED", "make room"));
    await assert.rejects(runs[0]!.execution);
    runs.push(...await startHanging(adapter, "hang", 1));
  } finally {
    await cancelAll(runs);
  }
});

test("cli runs a profile without maxConcurrency at most twice at once", async () => {
  const adapter = createCliAdapter("cli", { profiles: [shell("hang", "echo up; sleep 100")] });
  const runs = await startHanging(adapter, "hang", 2);
  try {
    await assert.rejects(
      // Bounded: were it admitted, the run would end at this deadline and fail the check.
      adapter.execute(specFor({ target: "hang" }), recorder(), deadline()),
      (err: unknown) =>
        err instanceof OverloadedError && /2 of max_concurrency 2/.test(err.message),
    );
  } finally {
    await cancelAll(runs);
  }
});

/** Parses its arguments with getopts: `-v` prints a version, the rest are positional. */
const GETOPTS = 'touch "$MARK"; while getopts p:v o; do case $o in ' +
  'p) echo "p=$OPTARG";; v) echo "VERSION";; esac; done; ' +
  'shift $((OPTIND-1)); for a in "$@"; do echo "positional=$a"; done';

test("cli refuses a prompt that would be an option, without spawning; after '--' it is positional", async () => {
  await using dir = await tempDir();
  const env = { MARK: `${dir.path}/spawned` };
  const adapter = createCliAdapter("cli", {
    profiles: [
      profile({ name: "unsafe", env, args: ["-c", GETOPTS, "argv", "{prompt}"] }),
      profile({ name: "safe", env, args: ["-c", GETOPTS, "argv", "--", "{prompt}"] }),
      profile({ name: "inline", env, args: ["-c", GETOPTS, "argv", "-p", "x{prompt}"] }),
    ],
  });
  for (const prompt of ["-v", "--version", "-rf"]) {
    await assert.rejects(
      adapter.execute(specFor({ target: "unsafe", prompt }), recorder(), never()),
      (err: unknown) => {
        assert.ok(err instanceof IopError);
        assert.equal(err.code, "INVALID_ARGUMENT");
        assert.equal(
          err.message,
          "Cannot run CLI profile 'unsafe' as the prompt starts with '-', which 'sh' would " +
            "read as an option (args[3] is '{prompt}' with no '--' before it)",
        );
        return true;
      },
    );
  }
  await assert.rejects(Deno.stat(env.MARK), Deno.errors.NotFound, "nothing was spawned");
  const safe = recorder();
  await adapter.execute(specFor({ target: "safe", prompt: "-v" }), safe, never());
  assert.equal(safe.deltas.join(""), "positional=-v\n");
  const inline = recorder();
  await adapter.execute(specFor({ target: "inline", prompt: "-v" }), inline, never());
  assert.equal(inline.deltas.join(""), "p=x-v\n");
  // What the refusal prevents: the same parser reads a bare "-v" as its option.
  const bare = recorder();
  await createCliAdapter("cli", {
    profiles: [profile({ name: "raw", env, args: ["-c", GETOPTS, "argv", "-v"] })],
  }).execute(specFor({ target: "raw" }), bare, never());
  assert.equal(bare.deltas.join(""), "VERSION\n");
});

test("cli refuses an embedding run and a run with images before it starts a process", async () => {
  const adapter = createCliAdapter("cli", { profiles: [shell("ok", "echo ran")] });
  const sink = recorder();
  await assert.rejects(
    adapter.execute(specFor({ target: "ok", embed: { inputs: ["x"] } }), sink, {
      signal: new AbortController().signal,
    }),
    { code: "INVALID_ARGUMENT", message: "Cannot run as embed: cli cannot embed" },
  );
  await assert.rejects(
    adapter.execute(
      specFor({
        target: "ok",
        messages: [{
          role: "user",
          content: "look",
          parts: [{ type: "text", text: "look" }, {
            type: "image",
            url: "data:image/png;base64,AA==",
          }],
        }],
      }),
      sink,
      { signal: new AbortController().signal },
    ),
    {
      code: "INVALID_ARGUMENT",
      message: "Cannot run as image (message 0, part 1): cli cannot take images",
    },
  );
  assert.deepEqual(sink.deltas, []);
  await adapter.close?.();
});
