/**
 * Standby edges with real processes: two Edges with the same group config (edge-a and
 * edge-a-standby, each with its own fleet certificate, mutual TLS) and one Node listing both in
 * `edge.addresses`. The Node fails over to the standby when the active Edge is killed, answers
 * there, and fails back once the active one is up again and no run is in flight.
 * @module
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { dialTlsConfig, listenTlsConfig } from "./tls_fixture.ts";
import { freePort, TextLog, until } from "./util.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const HEARTBEAT_MS = 200;
const FAILBACK_MS = 300;

/** One spawned service process; killed (SIGKILL) on dispose. */
class Proc implements AsyncDisposable {
  readonly child: Deno.ChildProcess;
  readonly stderr = new TextLog();
  readonly #pumps: Promise<void>[];

  constructor(args: string[]) {
    this.child = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", ...args],
      cwd: ROOT,
      stdin: "null",
      stdout: "null",
      stderr: "piped",
      env: { IOP_LOG_LEVEL: "info", NO_COLOR: "1" },
    }).spawn();
    this.#pumps = [this.stderr.readFrom(this.child.stderr)];
  }

  async kill(): Promise<void> {
    try {
      this.child.kill("SIGKILL");
    } catch {
      // Exited already.
    }
    await this.child.status;
    await Promise.all(this.#pumps);
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.kill();
  }
}

/** The group config both Edges share: node n1 with a quick and a slow mock model. */
function groupConfig() {
  return {
    nodes: [{
      id: "n1",
      token: "good-token",
      adapters: [
        { name: "mock", kind: "mock", tokens: 3, token_delay_ms: 0 },
        { name: "slowmock", kind: "mock", tokens: 10_000, token_delay_ms: 20 },
      ],
    }],
    models: [
      { name: "quick", route: "direct", adapter: "mock", target: "quick" },
      { name: "slow", route: "direct", adapter: "slowmock", target: "slow" },
    ],
  };
}

interface EdgeSetup {
  id: string;
  httpPort: number;
  wirePort: number;
  file: string;
  url: string;
  start(): Promise<Proc>;
}

async function edgeSetup(dir: string, id: string): Promise<EdgeSetup> {
  const httpPort = freePort();
  const wirePort = freePort();
  const file = `${dir}/${id}.yaml`;
  // JSON is valid YAML.
  await Deno.writeTextFile(
    file,
    JSON.stringify({
      edge: { id },
      http: { host: "127.0.0.1", port: httpPort },
      wire: {
        host: "127.0.0.1",
        port: wirePort,
        heartbeat_interval_ms: HEARTBEAT_MS,
        // Each edge shows its own certificate; the node checks it against the fleet CA.
        tls: await listenTlsConfig("edge", id, { mutual: true }),
      },
      responses: { store_path: `${dir}/${id}-responses.db` },
      ...groupConfig(),
    }),
  );
  return {
    id,
    httpPort,
    wirePort,
    file,
    url: `http://127.0.0.1:${httpPort}`,
    async start() {
      const proc = new Proc(["services/edge/main.ts", "--no-console", "--config", file]);
      await proc.stderr.waitFor(/"msg":"edge listening"/);
      return proc;
    },
  };
}

/** True when the Edge's status shows node n1 connected (false when the Edge does not answer). */
async function n1ConnectedTo(edge: EdgeSetup): Promise<boolean> {
  const res = await fetch(`${edge.url}/api/iop/status`).catch(() => undefined);
  if (!res) return false;
  const body = await res.json() as { nodes: { id: string; connected: boolean }[] };
  return body.nodes.some((n) => n.id === "n1" && n.connected);
}

function client(edge: EdgeSetup): OpenAI {
  return new OpenAI({ apiKey: "x", baseURL: `${edge.url}/v1`, maxRetries: 0, timeout: 10_000 });
}

async function ask(edge: EdgeSetup): Promise<string> {
  const answer = await client(edge).chat.completions.create({
    model: "quick",
    messages: [{ role: "user", content: "hello standby" }],
  });
  return answer.choices[0]?.message.content ?? "";
}

Deno.test("a node fails over to the standby edge when the active one dies and fails back when it returns", async () => {
  const dir = await Deno.makeTempDir({ prefix: "iop_standby_" });
  try {
    const active = await edgeSetup(dir, "edge-a");
    const standby = await edgeSetup(dir, "edge-a-standby");
    const nodeFile = `${dir}/node.yaml`;
    await Deno.writeTextFile(
      nodeFile,
      JSON.stringify({
        node: { id: "n1", token: "good-token" },
        edge: {
          // The certificates name the edges by their ids (and localhost/127.0.0.1): each
          // address is checked against its own host, so no server_name is set.
          addresses: [`127.0.0.1:${active.wirePort}`, `localhost:${standby.wirePort}`],
          failback_ms: FAILBACK_MS,
          backoff_initial_ms: 50,
          backoff_max_ms: 300,
          tls: await dialTlsConfig("node", "n1"),
        },
        http: { host: "127.0.0.1", port: freePort() },
        history: { path: `${dir}/node/history.db` },
        policy: { adapter_kinds: ["mock"] },
      }),
    );
    let activeProc = await active.start();
    await using standbyProc = await standby.start();
    await using node = new Proc(["services/node/main.ts", "--config", nodeFile]);
    try {
      await until("n1 registered with the active edge", () => n1ConnectedTo(active), 20_000);
      assert.equal(await n1ConnectedTo(standby), false, "the standby serves no node yet");
      const refused = await ask(standby).catch((err) => err);
      assert.ok(refused instanceof OpenAI.APIError, "the idle standby has no node to run on");

      await activeProc.kill();
      await until("n1 registered with the standby", () => n1ConnectedTo(standby), 10_000);
      assert.match(await ask(standby), /\S/, "the standby answers through n1");

      // The active edge is back: while a run is in flight on the standby the node stays there.
      const slow = await client(standby).chat.completions.create({
        model: "slow",
        messages: [{ role: "user", content: "keep going" }],
        stream: true,
      });
      const chunks = slow[Symbol.asyncIterator]();
      await chunks.next();
      activeProc = await active.start();
      const backAt = performance.now();
      let text = "";
      while (performance.now() - backAt < 4 * FAILBACK_MS) {
        const chunk = await chunks.next();
        assert.equal(chunk.done, false, "the run on the standby went on");
        text += chunk.value.choices[0]?.delta.content ?? "";
      }
      assert.ok(text.length > 0);
      assert.equal(await n1ConnectedTo(active), false, "no failback with a run in flight");
      slow.controller.abort();

      // The run ended: within a failback interval or so the node is back on the active edge.
      await until("n1 back on the active edge", () => n1ConnectedTo(active), 10_000);
      await until("the standby to see n1 gone", async () => !await n1ConnectedTo(standby));
      assert.match(await ask(active), /\S/);
      await node.stderr.waitFor(/"msg":"failing back to the active edge"/);
    } catch (err) {
      console.log(`---- node log ----\n${node.stderr.text}`);
      console.log(`---- standby log ----\n${standbyProc.stderr.text}`);
      throw err;
    } finally {
      await activeProc.kill();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
