import assert from "node:assert/strict";
import { startStack } from "./stack.ts";
import { OpsConsole } from "../services/edge/console/console.ts";
import { DomainAgents } from "../services/edge/agents/domain_agents.ts";
import { TextLog } from "./util.ts";

const EDGE = {
  edge: { id: "edge-test" },
  nodes: [{
    id: "n1",
    alias: "one",
    token: "t1",
    adapters: [
      { name: "mock", kind: "mock", tokens: 8, token_delay_ms: 40 },
      {
        name: "cli",
        kind: "cli",
        profiles: [
          {
            name: "echo",
            command: "sh",
            args: ["-c", 'for w in $1; do echo "$w"; done', "e", "{prompt}"],
          },
          { name: "slow", command: "sh", args: ["-c", "echo begun; exec sleep 30"] },
        ],
      },
    ],
  }],
};

const EDGE_YAML = `edge: { id: edge-test }
nodes:
  - id: n1
    alias: one
    token: t1
    adapters:
      - { name: mock, kind: mock, tokens: 3, token_delay_ms: 0 }
`;

async function consoleFor(edge: Record<string, unknown> = EDGE, configFile?: string) {
  const stack = await startStack({ config: edge, ...(configFile ? { configFile } : {}) });
  const screen = new TextLog();
  const ops = new OpsConsole(stack.service, screen.append);
  return { stack, screen, ops };
}

Deno.test("/help lists every command", async () => {
  await using s = await consoleFor().then((c) => ({ ...c, [Symbol.asyncDispose]: c.stack.close }));
  assert.equal(await s.ops.execute("/help"), true);
  for (
    const cmd of [
      "/nodes",
      "/status",
      "/run",
      "/ask",
      "/cancel",
      "/history",
      "/drain",
      "/undrain",
      "/agents",
      "/agent",
      "/reload",
      "/help",
    ]
  ) {
    assert.match(s.screen.text, new RegExp(`^  ${cmd} `, "m"), `${cmd} missing from /help`);
  }
});

Deno.test("/nodes shows the registered node as connected, with its alias and version", async () => {
  await using s = await consoleFor().then((c) => ({ ...c, [Symbol.asyncDispose]: c.stack.close }));
  await s.ops.execute("/nodes");
  assert.match(s.screen.text, /^NODE\s+ALIAS\s+STATE\s+VERSION/m);
  assert.match(s.screen.text, /^n1\s+one\s+connected\s+test\s+/m);
});

Deno.test("/status lists each adapter of a node without providers once, a CLI adapter as its profiles", async () => {
  await using s = await consoleFor().then((c) => ({ ...c, [Symbol.asyncDispose]: c.stack.close }));
  await s.ops.execute("/status");
  assert.match(s.screen.text, /^edge edge-test vtest, up since .*, 0 runs in flight$/m);
  assert.equal(s.screen.text.match(/^n1\s+up\s+adapter\s+mock\s+mock\(mock\)/gm)?.length, 1);
  for (const profile of ["echo", "slow"]) {
    const row = new RegExp(
      `^n1\\s+up\\s+profile\\s+cli/${profile}\\s+cli\\(cli\\)\\s+${profile}\\s`,
      "gm",
    );
    assert.equal(s.screen.text.match(row)?.length, 1, `one row for profile ${profile}`);
  }
});

Deno.test("/run mock streams tokens while the run is still going, then its summary", async () => {
  await using s = await consoleFor().then((c) => ({ ...c, [Symbol.asyncDispose]: c.stack.close }));
  await s.ops.execute("/run mock demo hello brave world");
  const [, runId] = s.screen.text.match(/^run (run_\w+) started on n1 \(mock\/demo\)$/m)!;
  await s.screen.waitFor(/hello brave/);
  // Live: the first words are on screen while the run is still in flight at the Edge.
  assert.ok(s.stack.service.getRun(runId!), "run already finished when its first words arrived");
  await s.screen.waitFor(/\[run_\w{8} completed\] finish=stop exit=0 tokens in=3 out=8/);
  assert.match(s.screen.text, /hello brave world tok3 tok4 tok5 tok6 tok7\n/);
  // The console forgets the run once its stream loop ends, a few microtasks after the summary.
  await new Promise((resolve) => setTimeout(resolve, 0));
  await s.ops.execute("/runs");
  assert.match(s.screen.text, /no runs in progress\n$/);
});

Deno.test("/run cli runs a profile on the node and streams its stdout", async () => {
  await using s = await consoleFor().then((c) => ({ ...c, [Symbol.asyncDispose]: c.stack.close }));
  await s.ops.execute("/run @one cli echo alpha beta");
  assert.match(s.screen.text, /^run run_\w+ started on n1 \(cli\/echo\)$/m);
  await s.screen.waitFor(/\[run_\w{8} completed\] finish=stop exit=0 tokens in=0 out=2/);
  assert.match(s.screen.text, /alpha\nbeta\n/);
});

Deno.test("/cancel by run-id prefix cancels a running CLI profile", async () => {
  await using s = await consoleFor().then((c) => ({ ...c, [Symbol.asyncDispose]: c.stack.close }));
  await s.ops.execute("/run cli slow");
  const [, runId] = s.screen.text.match(/^run (run_\w+) started/m)!;
  await s.screen.waitFor(/begun/);
  await s.ops.execute(`/cancel ${runId!.slice(0, 14)}`);
  assert.match(s.screen.text, new RegExp(`^cancelling ${runId}$`, "m"));
  await s.screen.waitFor(/\[run_\w{8} cancelled\] cancelled from console/);
  await s.ops.execute(`/cancel ${runId}`);
  assert.match(s.screen.text, new RegExp(`no run '${runId}' in progress\\n$`));
});

Deno.test("/history shows the node's recorded runs with their outcome", async () => {
  await using s = await consoleFor().then((c) => ({ ...c, [Symbol.asyncDispose]: c.stack.close }));
  await s.ops.execute("/history n1");
  assert.match(s.screen.text, /no runs recorded on n1/);
  await s.ops.execute("/run mock demo first");
  await s.screen.waitFor(/completed\]/);
  await s.ops.execute("/run cli slow");
  await s.screen.waitFor(/begun/);
  const [, slowId] = s.screen.text.match(/^run (run_\w+) started on n1 \(cli\/slow\)/m)!;
  await s.ops.execute(`/cancel ${slowId}`);
  await s.screen.waitFor(/cancelled\]/);
  s.screen.take();
  await s.ops.execute("/history one 10");
  const rows = s.screen.text.split("\n").filter((l) => l.startsWith("run_"));
  assert.equal(rows.length, 2, s.screen.text);
  assert.match(rows[0]!, new RegExp(`^${slowId}\\s+cli\\s+slow\\s+cancelled\\s`));
  assert.match(rows[1]!, /^run_\w+\s+mock\s+demo\s+completed\s+.*\s1\/8\s+first tok1/);
  // Each console run started a trace of its own, which the node's history row keeps.
  const traces = rows.map((r) => r.match(/\s([0-9a-f]{32})\s*$/)?.[1]);
  assert.ok(traces[0] && traces[1] && traces[0] !== traces[1], s.screen.text);
});

Deno.test("/reload of a broken file keeps the config in force and the node connected", async () => {
  const dir = await Deno.makeTempDir({ prefix: "iop_console_reload_" });
  const file = `${dir}/edge.yaml`;
  await Deno.writeTextFile(file, EDGE_YAML);
  const { parse } = await import("yaml");
  await using s = await consoleFor(parse(EDGE_YAML), file).then((c) => ({
    ...c,
    [Symbol.asyncDispose]: async () => {
      await c.stack.close();
      await Deno.remove(dir, { recursive: true });
    },
  }));
  const before = s.stack.service.config;
  await Deno.writeTextFile(file, EDGE_YAML + "    alias: [broken\n");
  await s.ops.execute("/reload");
  assert.match(
    s.screen.text,
    new RegExp(
      `^reload failed: kept the previous config: ${file}: line \\d+, column \\d+: invalid YAML`,
    ),
  );
  assert.equal(s.stack.service.config, before);
  s.screen.take();

  await Deno.writeTextFile(
    file,
    EDGE_YAML + "  - { id: n1, token: t2 }\n",
  );
  await s.ops.execute("/reload");
  assert.match(s.screen.text, /^reload failed: kept the previous config: .*duplicate node id 'n1'/);
  assert.equal(s.stack.service.config, before);

  await s.ops.execute("/nodes");
  assert.match(s.screen.text, /^n1\s+one\s+connected/m);
  await s.ops.execute("/run mock demo still works");
  await s.screen.waitFor(/still works tok2\n\[run_\w{8} completed\]/);
});

Deno.test("/reload of a valid file swaps the config in", async () => {
  const dir = await Deno.makeTempDir({ prefix: "iop_console_reload_" });
  const file = `${dir}/edge.yaml`;
  await Deno.writeTextFile(file, EDGE_YAML);
  const { parse } = await import("yaml");
  await using s = await consoleFor(parse(EDGE_YAML), file).then((c) => ({
    ...c,
    [Symbol.asyncDispose]: async () => {
      await c.stack.close();
      await Deno.remove(dir, { recursive: true });
    },
  }));
  await Deno.writeTextFile(file, EDGE_YAML.replace("id: edge-test", "id: edge-renamed"));
  await s.ops.execute("/reload");
  assert.match(s.screen.text, /^reloaded: loaded 1 nodes, 0 models from /);
  assert.equal(s.stack.service.config.edge.id, "edge-renamed");
});

Deno.test("an unknown command and bad arguments answer with help, not a crash", async () => {
  await using s = await consoleFor().then((c) => ({ ...c, [Symbol.asyncDispose]: c.stack.close }));
  assert.equal(await s.ops.execute("/frobnicate now"), true);
  assert.equal(s.screen.take(), "unknown command '/frobnicate'; type /help\n");
  await s.ops.execute("/run mock");
  assert.equal(s.screen.take(), "usage: /run [@node] <adapter> <target> <prompt...>\n");
  await s.ops.execute("/cancel");
  assert.equal(s.screen.take(), "usage: /cancel <run-id>\n");
  await s.ops.execute("/history");
  assert.equal(s.screen.take(), "usage: /history <node> [limit] | /history <node> <run-id>\n");
  await s.ops.execute("/history n1 0");
  assert.equal(s.screen.take(), "limit must be a positive whole number: current value is '0'\n");
  // A second argument that is no number is a run id.
  await s.ops.execute("/history n1 zero");
  assert.equal(s.screen.take(), "no run 'zero' in the history of node n1\n");
  await s.ops.execute("/run ollama llama3 hi");
  assert.equal(
    s.screen.take(),
    "error NOT_FOUND: No node offers adapter 'ollama' with target 'llama3'\n",
  );
  await s.ops.execute("/history nobody");
  assert.equal(s.screen.take(), "error NOT_FOUND: Cannot find node 'nobody'\n");
  assert.equal(await s.ops.execute("   "), true);
  assert.equal(s.screen.take(), "");
});

Deno.test("serve() reads commands line by line until /quit, then cancels its runs and waits for them", async () => {
  await using s = await consoleFor().then((c) => ({ ...c, [Symbol.asyncDispose]: c.stack.close }));
  const input = new Blob(["/nodes\r\n/run cli slow\n/quit\n/help\n"]).stream();
  await s.ops.serve(input, "> ");
  assert.match(s.screen.text, /^IOP edge console \(edge-test\)\. Type \/help\.\n> /);
  assert.match(s.screen.text, /^n1\s+one\s+connected/m);
  // The 30 s CLI run was cancelled by /quit, and serve() returned only after it ended.
  assert.match(s.screen.text, /\[run_\w{8} cancelled\] console closed/);
  assert.equal(s.stack.service.status().runsInFlight, 0);
  // /help after /quit never ran.
  assert.doesNotMatch(s.screen.text, /Commands:/);
});

/** The console fixture with domain agents (the same wiring as services/edge/main.ts). */
async function agentConsole() {
  const stack = await startStack({
    config: {
      ...EDGE,
      agents: [{
        id: "deployer",
        kind: "domain",
        description: "deploys",
        commands: [
          { name: "deploy", adapter: "cli", target: "echo" },
          { name: "hang", adapter: "cli", target: "slow" },
        ],
      }],
    },
  });
  const screen = new TextLog();
  const agents = new DomainAgents(stack.service);
  const ops = new OpsConsole(stack.service, screen.append, agents);
  return { stack, screen, ops, agents, [Symbol.asyncDispose]: stack.close };
}

Deno.test("/drain stops new runs on a node with no Control Plane, /undrain lets them in again", async () => {
  await using s = await agentConsole();
  await s.ops.execute("/drain n1");
  assert.match(s.screen.text, /node n1 draining: no new runs; runs in flight finish/);
  await s.ops.execute("/nodes");
  assert.match(s.screen.text, /^n1\s+one\s+draining\s/m);
  await s.ops.execute("/run cli echo refused while draining");
  assert.match(s.screen.text, /^error UNAVAILABLE: No connected node can run adapter 'cli'/m);
  await s.ops.execute("/undrain n1");
  assert.match(s.screen.text, /node n1 accepting runs/);
  await s.ops.execute("/run cli echo back again");
  await s.screen.waitFor(/^again$/m);
  await s.ops.execute("/drain nowhere");
  assert.match(s.screen.text, /no connected node 'nowhere'/);
});

Deno.test("/agents lists domain agents and /agent runs a command with its progress and outcome", async () => {
  await using s = await agentConsole();
  await s.ops.execute("/agents");
  assert.match(s.screen.text, /^AGENT\s+STATE\s+COMMANDS/m);
  assert.match(s.screen.text, /^deployer\s+ready\s+deploy,hang\s+-/m);

  await s.ops.execute("/agent deployer deploy v1 to prod");
  assert.match(s.screen.text, /agent deployer: deploy started/);
  await s.screen.waitFor(/\[deployer deploy\] prod/);
  await s.screen.waitFor(/agent deployer: deploy succeeded \(run run_\w+ on n1\)/);
  s.screen.take();
  await s.ops.execute("/agents");
  assert.match(s.screen.text, /^deployer\s+ready\s+deploy,hang\s+deploy succeeded/m);

  // One state for every caller: while `hang` runs, the agent refuses a second command.
  await s.ops.execute("/agent deployer hang");
  await s.screen.waitFor(/\[deployer hang\] begun/);
  await s.ops.execute("/agent deployer deploy v2");
  await s.screen.waitFor(/agent deployer: deploy refused: OVERLOADED: .*busy/);
  await assert.rejects(s.agents.execute("deployer", "deploy", "v3"), /busy/);

  await s.ops.execute("/agent deployer nope");
  assert.match(s.screen.text, /agent deployer has no command 'nope': it has deploy, hang/);
  await s.ops.execute("/agent ghost deploy");
  assert.match(s.screen.text, /no domain agent 'ghost'/);
  // Leaving the console cancels the command it started.
  const input = new ReadableStream<Uint8Array>({ start: (c) => c.close() });
  await s.ops.serve(input);
  await s.screen.waitFor(/agent deployer: hang cancelled/);
});

Deno.test("/ask runs a pool model and shows a waiting run's queue position as it moves", async () => {
  const pooled = {
    edge: { id: "edge-test" },
    nodes: [{
      id: "n1",
      token: "t1",
      adapters: [{ name: "mock", kind: "mock", tokens: 6, token_delay_ms: 150 }],
      providers: [{
        id: "p1",
        adapter: "mock",
        target: "m",
        model_group: "demo",
        max_concurrency: 1,
      }],
    }],
    models: [{ name: "demo", route: "pool" }],
  };
  await using s = await consoleFor(pooled).then((c) => ({
    ...c,
    [Symbol.asyncDispose]: c.stack.close,
  }));
  await s.ops.execute("/ask demo first");
  await s.screen.waitFor(/^run run_\w+ started on n1 \(demo\)$/m);
  await s.ops.execute("/ask demo second");
  await s.ops.execute("/ask demo third");
  // The console answered at once (it keeps taking commands while runs wait).
  assert.match(s.screen.text, /^queued for demo, position 1$/m);
  assert.match(s.screen.text, /^queued for demo, position 2$/m);
  // When the first run ends, the third moves up to position 1 before it starts.
  const moved = s.screen.text.length;
  await s.screen.waitFor(/^queued for demo, position 1$/m, 10_000, moved);
  await s.screen.waitFor(/(\[run_\w{8} completed\][^\n]*\n[\s\S]*){3}/);
  await s.ops.execute("/ask nope x");
  assert.match(s.screen.text, /error NOT_FOUND: The model 'nope' does not exist\n$/);
});
