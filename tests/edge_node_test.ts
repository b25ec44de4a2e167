/**
 * Real Edge and Node processes (`deno run services/{edge,node}/main.ts`) on free loopback ports
 * with temp configs and history files: registration refusal, CLI cancel without orphans, a node
 * killed mid-run, and re-registration after an Edge restart.
 * @module
 */
import assert from "node:assert/strict";
import { openRunStore } from "../services/node/store/sqlite_store.ts";
import { dialTlsConfig, listenTlsConfig } from "./tls_fixture.ts";
import { freePort, TextLog } from "./util.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const HEARTBEAT_MS = 200;
/** The Edge declares a node dead after 3 silent heartbeat intervals. */
const HEARTBEAT_TIMEOUT_MS = 3 * HEARTBEAT_MS;

/** One spawned service process. */
class Proc implements AsyncDisposable {
  readonly child: Deno.ChildProcess;
  readonly stdout = new TextLog();
  readonly stderr = new TextLog();
  readonly #pumps: Promise<void>[];
  readonly #stdin: WritableStreamDefaultWriter<Uint8Array> | undefined;
  exited = false;

  constructor(args: string[], options: { stdin?: boolean } = {}) {
    this.child = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", ...args],
      cwd: ROOT,
      stdin: options.stdin ? "piped" : "null",
      stdout: "piped",
      stderr: "piped",
      env: { IOP_LOG_LEVEL: "info", NO_COLOR: "1" },
    }).spawn();
    this.#stdin = options.stdin ? this.child.stdin.getWriter() : undefined;
    this.#pumps = [
      this.stdout.readFrom(this.child.stdout),
      this.stderr.readFrom(this.child.stderr),
    ];
    void this.child.status.then(() => (this.exited = true));
  }

  /** Writes one console line to the process's stdin. */
  async line(text: string): Promise<void> {
    await this.#stdin!.write(new TextEncoder().encode(text + "\n"));
  }

  /** Kills the process (SIGKILL unless told otherwise) and waits until it is gone. */
  async kill(signal: Deno.Signal = "SIGKILL"): Promise<void> {
    if (!this.exited) {
      try {
        this.child.kill(signal);
      } catch {
        // Exited in between.
      }
    }
    await this.child.status;
    await Promise.all(this.#pumps);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.#stdin?.close().catch(() => {});
    await this.kill();
  }
}

/** Ports, temp directory and config files of one Edge + Node setup. */
interface Setup extends AsyncDisposable {
  dir: string;
  httpPort: number;
  edgeFile: string;
  nodeFile: string;
  pidFile: string;
  historyPath: string;
  edge(console?: boolean): Promise<Proc>;
  node(): Promise<Proc>;
}

async function setup(
  options: { nodeToken?: string; edgeRuns?: Record<string, number> } = {},
): Promise<Setup> {
  const dir = await Deno.makeTempDir({ prefix: "iop_edge_node_" });
  const httpPort = freePort();
  const wirePort = freePort();
  const nodeHttpPort = freePort();
  const pidFile = `${dir}/pids`;
  const historyPath = `${dir}/node/history.db`;
  // JSON is valid YAML, so the configs need no YAML quoting of shell text.
  const edgeConfig = {
    edge: { id: "edge-it" },
    http: { host: "127.0.0.1", port: httpPort },
    ...(options.edgeRuns ? { runs: options.edgeRuns } : {}),
    wire: {
      host: "127.0.0.1",
      port: wirePort,
      heartbeat_interval_ms: HEARTBEAT_MS,
      // As shipped: TLS, here with client certificates bound to node ids.
      tls: await listenTlsConfig("edge", "edge-it", { mutual: true }),
    },
    nodes: [{
      id: "n1",
      alias: "one",
      token: "good-token",
      adapters: [
        { name: "mock", kind: "mock", tokens: 3, token_delay_ms: 0 },
        { name: "slowmock", kind: "mock", tokens: 10_000, token_delay_ms: 20 },
        {
          name: "cli",
          kind: "cli",
          profiles: [{
            name: "tree",
            command: "sh",
            // The shell and a background child both record their pid, then it waits on the child.
            args: [
              "-c",
              `echo $$ >> ${pidFile}; sleep 300 & echo $! >> ${pidFile}; echo ready; wait`,
            ],
            timeout_ms: 60_000,
          }],
        },
      ],
    }],
  };
  const nodeConfig = {
    node: { id: "n1", token: options.nodeToken ?? "good-token" },
    edge: {
      address: `127.0.0.1:${wirePort}`,
      backoff_initial_ms: 50,
      backoff_max_ms: 300,
      tls: await dialTlsConfig("node", "n1"),
    },
    http: { host: "127.0.0.1", port: nodeHttpPort },
    history: { path: historyPath },
    // What the edge config above pushes: mock adapters and a `sh` profile without a cwd.
    policy: { adapter_kinds: ["mock", "cli"], cli: { commands: ["sh"], cwd: ["."] } },
  };
  const edgeFile = `${dir}/edge.yaml`;
  const nodeFile = `${dir}/node.yaml`;
  await Deno.writeTextFile(edgeFile, JSON.stringify(edgeConfig, null, 2));
  await Deno.writeTextFile(nodeFile, JSON.stringify(nodeConfig, null, 2));
  return {
    dir,
    httpPort,
    edgeFile,
    nodeFile,
    pidFile,
    historyPath,
    async edge(console = false) {
      const proc = new Proc(
        ["services/edge/main.ts", console ? "--console" : "--no-console", "--config", edgeFile],
        { stdin: console },
      );
      await proc.stderr.waitFor(/"msg":"edge listening"/);
      return proc;
    },
    node() {
      return Promise.resolve(new Proc(["services/node/main.ts", "--config", nodeFile]));
    },
    [Symbol.asyncDispose]: () => Deno.remove(dir, { recursive: true }),
  };
}

interface StatusNode {
  id: string;
  connected: boolean;
  connectedAtMs: number;
}

async function nodeStatus(httpPort: number): Promise<StatusNode> {
  const res = await fetch(`http://127.0.0.1:${httpPort}/api/iop/status`);
  const body = await res.json() as { nodes: StatusNode[] };
  return body.nodes.find((n) => n.id === "n1")!;
}

/** Polls the Edge's status API until node n1 satisfies `ok`; fails after `ms`. */
async function waitForNode(
  httpPort: number,
  ok: (n: StatusNode) => boolean,
  ms = 10_000,
): Promise<StatusNode> {
  const deadline = Date.now() + ms;
  while (true) {
    const node = await nodeStatus(httpPort).catch(() => undefined);
    if (node && ok(node)) return node;
    if (Date.now() > deadline) throw new Error(`node n1 not as expected within ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** The state letter of a process (R, S, Z…), or undefined when it no longer exists. */
function procState(pid: number): string | undefined {
  try {
    return Deno.readTextFileSync(`/proc/${pid}/stat`).replace(/^.*\) /s, "")[0];
  } catch {
    return undefined;
  }
}

/** Asserts none of `pids` runs; an exited child may linger as a zombie, which is not running. */
function assertGone(pids: number[]): void {
  for (const pid of pids) {
    const state = procState(pid);
    assert.ok(state === undefined || state === "Z", `pid ${pid} still running (state ${state})`);
  }
}

/** Starts the `tree` CLI profile from the console; returns its run id and the pids it wrote. */
async function startTreeRun(
  edge: Proc,
  pidFile: string,
): Promise<{ runId: string; pids: number[] }> {
  await edge.line("/run cli tree");
  const [, runId] = await edge.stdout.waitFor(/run (run_\w+) started on n1 \(cli\/tree\)/);
  await edge.stdout.waitFor(/ready/);
  const pids = (await Deno.readTextFile(pidFile)).trim().split("\n").map(Number);
  return { runId: runId!, pids };
}

Deno.test("a node with a wrong token is refused with a clear log line and never connects", async () => {
  await using env = await setup({ nodeToken: "wrong-token" });
  await using edge = await env.edge();
  await using node = await env.node();
  // Two refusals: the node retried (with its short backoff) and was refused again.
  await edge.stderr.waitFor(
    /"msg":"node registration refused"[^\n]*\n[\s\S]*"msg":"node registration refused"/,
  );
  const refusals = edge.stderr.logLines().filter((l) => l.msg === "node registration refused");
  assert.equal(refusals[0]!.level, "warn");
  assert.equal(refusals[0]!.reason, "unknown node token");
  assert.equal(refusals[0]!.node_id, "n1");
  assert.doesNotMatch(edge.stderr.text, /wrong-token/, "the offered token is never logged");
  assert.ok(!edge.stderr.logLines().some((l) => l.msg === "node registered"));
  await node.stderr.waitFor(/"msg":"edge refused registration"[^\n]*"reason":"unknown node token"/);
  assert.equal((await nodeStatus(env.httpPort)).connected, false);
  const metrics = await (await fetch(`http://127.0.0.1:${env.httpPort}/metrics`)).text();
  assert.match(metrics, /iop_edge_node_registrations_total\{outcome="refused"\} [2-9]/);
});

Deno.test("a CLI run cancelled mid-run from the console leaves no process behind", async () => {
  await using env = await setup();
  await using edge = await env.edge(true);
  await using node = await env.node();
  await waitForNode(env.httpPort, (n) => n.connected);

  const { runId, pids } = await startTreeRun(edge, env.pidFile);
  assert.equal(pids.length, 2, "the shell and its background sleep");
  for (const pid of pids) assert.ok(procState(pid) !== undefined, `pid ${pid} should be running`);

  await edge.line(`/cancel ${runId}`);
  await edge.stdout.waitFor(
    new RegExp(`\\[${runId.slice(0, 12)} cancelled\\] cancelled from console`),
  );
  // The run is reported cancelled only once its process group is gone.
  assertGone(pids);
  await edge.line("/history n1");
  await edge.stdout.waitFor(new RegExp(`${runId}\\s+cli\\s+tree\\s+cancelled`));
  assert.equal(node.exited, false);
});

Deno.test("a node stopped with SIGTERM mid CLI run cancels it, leaves no process and records it", async () => {
  await using env = await setup();
  await using edge = await env.edge(true);
  await using node = await env.node();
  await waitForNode(env.httpPort, (n) => n.connected);
  const { runId, pids } = await startTreeRun(edge, env.pidFile);
  await node.kill("SIGTERM");
  assert.equal((await node.child.status).code, 0, "the node exits cleanly");
  assertGone(pids);
  // The node cancels its runs before closing the link, so the Edge hears a cancel, not a loss.
  await edge.stdout.waitFor(
    new RegExp(`\\[${runId.slice(0, 12)} cancelled\\] node stopping`),
  );
  const store = openRunStore(env.historyPath);
  try {
    const [row] = store.history(1);
    assert.deepEqual([row?.runId, row?.status], [runId, "cancelled"]);
  } finally {
    store.close();
  }
});

Deno.test("kill -9 of the node mid-run fails the run with NODE_LOST at once; history survives restart", async () => {
  await using env = await setup();
  await using edge = await env.edge(true);
  let node = await env.node();
  try {
    await waitForNode(env.httpPort, (n) => n.connected);
    await edge.line("/run mock quick one");
    const [, quickId] = await edge.stdout.waitFor(/run (run_\w+) started on n1 \(mock\/quick\)/);
    await edge.stdout.waitFor(/\[run_\w{8} completed\]/);

    await edge.line("/run slowmock long go");
    const [, longId] = await edge.stdout.waitFor(/run (run_\w+) started on n1 \(slowmock\/long\)/);
    await edge.stdout.waitFor(/go tok1 tok2/);
    await node.kill("SIGKILL");
    // The node's process ended, so its runs went with it: the run fails without waiting
    // runs.resume_grace_ms for the node to come back.
    await edge.stdout.waitFor(
      new RegExp(
        `\\[${longId!.slice(0, 12)} failed\\] NODE_LOST: Node 'n1' was lost while running`,
      ),
      HEARTBEAT_TIMEOUT_MS + 2_000,
    );
    await waitForNode(env.httpPort, (n) => !n.connected, 2_000);

    node = await env.node();
    await waitForNode(env.httpPort, (n) => n.connected);
    await node.stderr.waitFor(
      /"msg":"runs left unfinished by a previous process marked interrupted","count":1/,
    );
    const from = edge.stdout.text.length;
    await edge.line("/history n1");
    await edge.stdout.waitFor(
      new RegExp(`${longId}\\s+slowmock\\s+long\\s+interrupted`),
      5_000,
      from,
    );
    assert.match(
      edge.stdout.text.slice(from),
      new RegExp(`${quickId}\\s+mock\\s+quick\\s+completed`),
    );
  } finally {
    await node[Symbol.asyncDispose]();
  }
});

Deno.test("a frozen node (SIGSTOP) fails its run with NODE_LOST after the heartbeat timeout", async () => {
  // With no resume grace, as before runs survived a link blip: the loss is told at once.
  await using env = await setup({ edgeRuns: { resume_grace_ms: 0 } });
  await using edge = await env.edge(true);
  await using node = await env.node();
  await waitForNode(env.httpPort, (n) => n.connected);
  await edge.line("/run slowmock frozen go");
  const [, runId] = await edge.stdout.waitFor(/run (run_\w+) started on n1 \(slowmock\/frozen\)/);
  await edge.stdout.waitFor(/go tok1/);
  const stoppedAt = Date.now();
  Deno.kill(node.child.pid, "SIGSTOP");
  try {
    await edge.stdout.waitFor(
      new RegExp(`\\[${runId!.slice(0, 12)} failed\\] NODE_LOST: .*no heartbeat for \\d+ ms`),
      HEARTBEAT_TIMEOUT_MS + 2_000,
    );
    const lostAfter = Date.now() - stoppedAt;
    // Silence is measured from the last frame (a token every 20 ms), so the verdict comes one
    // check interval after the 3-interval limit at the latest.
    assert.ok(lostAfter >= HEARTBEAT_TIMEOUT_MS - HEARTBEAT_MS, `NODE_LOST after ${lostAfter} ms`);
    assert.ok(lostAfter <= HEARTBEAT_TIMEOUT_MS + HEARTBEAT_MS + 500, `after ${lostAfter} ms`);
    assert.match(edge.stderr.text, /"msg":"node missed heartbeats, closing its link"/);
  } finally {
    Deno.kill(node.child.pid, "SIGCONT");
  }
  // Thawed, the node finds its link gone, cancels its stale run and registers again.
  await node.stderr.waitFor(/"msg":"registered with edge"[\s\S]*"msg":"registered with edge"/);
  await waitForNode(env.httpPort, (n) => n.connected);
});

Deno.test("after an Edge restart the node registers again by itself", async () => {
  await using env = await setup();
  let edge = await env.edge();
  await using node = await env.node();
  try {
    const first = await waitForNode(env.httpPort, (n) => n.connected);
    await edge.kill("SIGKILL");
    await node.stderr.waitFor(/"msg":"link to edge lost"/);
    edge = await env.edge();
    const again = await waitForNode(env.httpPort, (n) => n.connected, 10_000);
    assert.ok(again.connectedAtMs > first.connectedAtMs);
    assert.equal(node.exited, false);
    // The Edge lists the node before the node has logged the answer it got: wait for the line.
    await node.stderr.waitFor(/"msg":"registered with edge"[\s\S]*"msg":"registered with edge"/);
    assert.equal(node.stderr.text.match(/"msg":"registered with edge"/g)?.length, 2);
  } finally {
    await edge[Symbol.asyncDispose]();
  }
});

Deno.test("a reload reaches the running node process: the next run uses the new config, no reconnect", async () => {
  await using env = await setup();
  await using edge = await env.edge(true);
  await using node = await env.node();
  const before = await waitForNode(env.httpPort, (n) => n.connected);

  await edge.line("/run mock demo hello");
  await edge.stdout.waitFor(/\[run_\w+ completed\][^\n]* out=3\n/);

  // Same file, the mock adapter now answers 7 tokens.
  const config = JSON.parse(await Deno.readTextFile(env.edgeFile));
  config.nodes[0].adapters[0].tokens = 7;
  await Deno.writeTextFile(env.edgeFile, JSON.stringify(config, null, 2));
  await edge.line("/reload");
  await edge.stdout.waitFor(/reloaded: [^\n]*connected nodes reconfigured: 1/);
  const after = await waitForNode(
    env.httpPort,
    (n) => (n as StatusNode & { configVersion?: number }).configVersion === 2,
  );
  assert.equal(after.connectedAtMs, before.connectedAtMs, "the node never reconnected");

  const from = edge.stdout.text.length;
  await edge.line("/run mock demo hello again");
  await edge.stdout.waitFor(/\[run_\w+ completed\][^\n]* out=7\n/, 10_000, from);
  assert.equal(node.exited, false);
});
