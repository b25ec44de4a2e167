/**
 * Bounded CLI work across a real Edge and real Nodes (TCP, NodeCores, `sh` subprocesses): a CLI
 * profile runs at most its `max_concurrency` runs per node and one more is answered 429 with
 * Retry-After at once, never queued; a session's follow-up is refused rather than moved when its
 * node's profile is full; a Node refuses what its own limits forbid whatever its Edge sends; and
 * a prompt that would be read as an option is refused 400 unless the profile puts `--` first.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import type { ResourceStatus, RunHandle, StatusSnapshot } from "../services/edge/ports.ts";
import { type RunEvent, runInput } from "../shared/run.ts";
import { adapterCatalog } from "../services/node/adapters/catalog.ts";
import { policyFor, type RawConfig, startEdge, startNode, startStack } from "./stack.ts";
import { until } from "./util.ts";

/**
 * Prints `up <session>`, then waits until it can remove the directory `$GATE`: creating that
 * directory lets exactly one waiting run finish (rmdir is atomic), which prints `done`.
 */
const GATED = 'echo "up $1"; until rmdir "$GATE" 2>/dev/null; do sleep 0.02; done; echo done';

/** Parses its arguments with getopts (`-v` prints a version); the rest print as positional. */
const GETOPTS = 'touch "$MARK"; while getopts p:v o; do case $o in ' +
  'p) echo "p=$OPTARG";; v) echo "VERSION";; esac; done; ' +
  'shift $((OPTIND-1)); for a in "$@"; do echo "positional=$a"; done';

function gated(dir: string, name: string, max?: number): Record<string, unknown> {
  return {
    name,
    command: "sh",
    args: ["-c", GATED, "sh", "{session}"],
    resume_args: ["-c", GATED, "sh", "{session}"],
    env: { GATE: `${dir}/gate` },
    ...(max === undefined ? {} : { max_concurrency: max }),
  };
}

function node(id: string, profiles: Record<string, unknown>[]): RawConfig {
  return {
    id,
    token: `${id}-token`,
    adapters: [{ name: "cli", kind: "cli", profiles }],
  };
}

/** Lets one gated run finish. */
async function openGate(dir: string): Promise<void> {
  await Deno.mkdir(`${dir}/gate`);
}

/** Lets one gated run finish and waits until a run took the gate. */
async function releaseOne(dir: string): Promise<void> {
  await openGate(dir);
  await until("a run took the gate", () => Deno.stat(`${dir}/gate`).then(() => false, () => true));
}

/** An OpenAI client of the Edge; a request not answered within 10 s fails the test. */
function openai(url: string): OpenAI {
  return new OpenAI({ apiKey: "none", baseURL: `${url}/v1`, maxRetries: 0, timeout: 10_000 });
}

/** `promise`, or a failure naming `what` when it takes longer than 10 s. */
async function within<T>(what: string, promise: Promise<T>): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`Timed out waiting for ${what}`)), 10_000);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** A chat completion; a failing test's requests still pending when the stack stops stay quiet. */
function ask(client: OpenAI, model: string, content = "go") {
  const answer = client.chat.completions.create({ model, messages: [{ role: "user", content }] });
  answer.catch(() => {});
  return answer;
}

async function profileRow(url: string, id: string): Promise<ResourceStatus | undefined> {
  const status = await (await fetch(`${url}/api/iop/status`)).json() as StatusSnapshot;
  return status.nodes.flatMap((n) => n.resources).find((r) => r.id === id);
}

Deno.test("a CLI profile with max_concurrency 2 runs two, answers a third 429 with Retry-After, then admits again", async () => {
  await using stack = await startStack({
    http: true,
    config: (dir) => ({
      nodes: [node("n1", [gated(dir, "work", 2)])],
      models: [{ name: "work-cli", route: "direct", adapter: "cli", target: "work" }],
    }),
  });
  const client = openai(stack.url);
  const core = stack.nodes.get("n1")!.core;
  const usage = () => stack.service.pools.usage("n1", "cli", "work");
  const first = [ask(client, "work-cli"), ask(client, "work-cli")];
  await until("two runs executing on the node", () => core.inFlight === 2 && usage() === 2);
  const row = await profileRow(stack.url, "cli/work");
  assert.deepEqual([row?.kind, row?.inFlight, row?.maxConcurrency], ["profile", 2, 2]);

  const third = await ask(client, "work-cli").then(() => undefined, (err: unknown) => err);
  assert.ok(third instanceof OpenAI.RateLimitError, String(third));
  assert.equal(third.status, 429);
  assert.equal(third.headers?.get("retry-after"), "5");
  assert.equal(
    third.message,
    "429 Cannot run CLI profile 'work' of adapter 'cli' as it is at its limit on its node: " +
      "node 'n1' runs 2 of max_concurrency 2",
  );
  assert.equal(core.inFlight, 2, "the refused run never reached the node");

  await openGate(stack.dir);
  const done = await Promise.race(first);
  assert.equal(done.choices[0]!.message.content?.trim().split("\n").at(-1), "done");
  await until("one slot free", () => usage() === 1);
  const fourth = ask(client, "work-cli");
  await until("the new run admitted and executing", () => core.inFlight === 2 && usage() === 2);
  await releaseOne(stack.dir);
  await releaseOne(stack.dir);
  const rest = await Promise.all([...first, fourth]);
  assert.ok(rest.every((a) => a.choices[0]!.message.content?.trim().endsWith("done")));
  assert.equal(usage(), 0);
});

/** The first output of a run (`up <session>`), as its words. */
async function firstOutput(handle: RunHandle): Promise<string[]> {
  const seen = Promise.withResolvers<string>();
  handle.subscribe((event: RunEvent) => {
    if (event.type === "output") seen.resolve(event.text);
    if (event.type === "failed") seen.reject(new Error(`${event.code}: ${event.message}`));
  });
  return (await within("the run's first output", seen.promise)).trim().split(" ");
}

Deno.test("a session's follow-up is refused OVERLOADED when its node's profile is full, not moved", async () => {
  const config = (dir: string): RawConfig => ({
    nodes: ["n1", "n2"].map((id) => node(id, [gated(dir, "agent", 1)])),
  });
  await using edge = await startEdge({ config });
  await Promise.all(
    ["n1", "n2"].map((id) => startNode(edge, { id, factories: adapterCatalog({ nodeId: id }) })),
  );
  const service = edge.service;
  const run = async (sessionId = "") =>
    await service.submitRun({ ...runInput({ adapter: "cli", target: "agent" }), sessionId });

  const held = await run();
  const [, session] = await firstOutput(held);
  assert.ok(session, "the run printed its session id");
  await assert.rejects(run(session), (err: unknown) => {
    assert.ok(err instanceof Error && "code" in err);
    assert.equal(err.code, "OVERLOADED");
    assert.equal(
      err.message,
      `Cannot run CLI profile 'agent' of adapter 'cli' as it is at its limit on its node: ` +
        `node '${held.nodeId}' runs 1 of max_concurrency 1; session '${session}' stays on that ` +
        "node, retry later",
    );
    return true;
  });
  // A fresh session may go to the other node, which has room.
  const other = await run();
  assert.notEqual(other.nodeId, held.nodeId);
  await firstOutput(other);

  await releaseOne(edge.dir);
  await releaseOne(edge.dir);
  assert.deepEqual([(await held.done).type, (await other.done).type], ["completed", "completed"]);
  // With the slot free again the follow-up runs, on the session's node.
  const resumed = await run(session);
  assert.equal(resumed.nodeId, held.nodeId);
  await firstOutput(resumed);
  await openGate(edge.dir);
  assert.equal((await resumed.done).type, "completed");
});

Deno.test("a node refuses runs beyond its own limits, whatever its Edge allows", async () => {
  await using stack = await startEdge({
    http: true,
    config: (dir) => ({
      nodes: [node("n1", [gated(dir, "wide", 5), gated(dir, "one", 1)])],
      models: [{ name: "wide-cli", route: "direct", adapter: "cli", target: "wide" }],
    }),
  });
  // The node's owner allows one run at a time, though the Edge's profile says five.
  const record = stack.config.nodes[0]!;
  const n1 = await startNode(stack, { policy: { ...policyFor(record), maxActiveRuns: 1 } });
  const client = openai(stack.url);
  const first = ask(client, "wide-cli");
  await until("one run executing", () => n1.core.inFlight === 1);
  const second = await ask(client, "wide-cli").then(() => undefined, (err: unknown) => err);
  assert.ok(second instanceof OpenAI.RateLimitError, String(second));
  assert.match(
    second.message,
    /^429 Cannot start run 'run_[0-9a-f]+' as this node is at its limit: 1 of policy\.max_active_runs 1 runs executing$/,
  );
  await openGate(stack.dir);
  await first;
  await until("the node idle", () => n1.core.inFlight === 0);

  // An Edge that sends more runs of a profile than it allows (here: past its own check) is
  // refused by the node's CLI adapter itself.
  await n1.stop();
  const n1Wide = await startNode(stack, { policy: { ...policyFor(record), maxActiveRuns: 8 } });
  const session = stack.service.sessions().find((s) => s.id === "n1")!;
  const send = () =>
    stack.service.dispatch(session, { ...runInput({ adapter: "cli", target: "one" }) });
  const running = await send();
  await until("the profile's run executing", () => n1Wide.core.inFlight === 1);
  const extra = await within("the extra run's refusal", (await send()).done);
  assert.equal(extra.type, "failed");
  assert.deepEqual(extra.type === "failed" && [extra.code, extra.message], [
    "OVERLOADED",
    "Cannot run CLI profile 'one' as it is at its limit on this node: 1 of max_concurrency 1 " +
    "runs executing",
  ]);
  await openGate(stack.dir);
  assert.equal((await running.done).type, "completed");
});

Deno.test("a prompt that would be an option is refused 400; after '--' it is a positional argument", async () => {
  await using stack = await startStack({
    http: true,
    config: (dir) => {
      const env = { MARK: `${dir}/spawned` };
      const sh = (name: string, ...args: string[]) => ({
        name,
        command: "sh",
        args: ["-c", GETOPTS, "argv", ...args],
        env,
      });
      return {
        nodes: [node("n1", [sh("unsafe", "-p", "{prompt}"), sh("safe", "--", "{prompt}")])],
        models: [
          { name: "unsafe-cli", route: "direct", adapter: "cli", target: "unsafe" },
          { name: "safe-cli", route: "direct", adapter: "cli", target: "safe" },
        ],
      };
    },
  });
  const client = openai(stack.url);
  for (const prompt of ["--version", "-rf"]) {
    const err = await ask(client, "unsafe-cli", prompt).then(() => undefined, (e: unknown) => e);
    assert.ok(err instanceof OpenAI.BadRequestError, String(err));
    assert.equal(err.status, 400);
    assert.equal(err.code, "invalid_argument");
    assert.equal(
      err.message,
      "400 Cannot run CLI profile 'unsafe' as the prompt starts with '-', which 'sh' would " +
        "read as an option (args[4] is '{prompt}' with no '--' before it)",
    );
  }
  await assert.rejects(Deno.stat(`${stack.dir}/spawned`), Deno.errors.NotFound);
  // An ordinary prompt runs on the same profile, as the value of -p.
  const plain = await ask(client, "unsafe-cli", "hello -v");
  assert.equal(plain.choices[0]!.message.content, "p=hello -v\n");
  for (const prompt of ["--version", "-v", "-rf"]) {
    const safe = await ask(client, "safe-cli", prompt);
    assert.equal(safe.choices[0]!.message.content, `positional=${prompt}\n`);
  }
});
