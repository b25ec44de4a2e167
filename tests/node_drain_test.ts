/**
 * A stopping Node drains: real `services/node/main.ts` processes against an Edge serving the
 * OpenAI surface. On SIGTERM the node tells its Edge (which routes new requests elsewhere), lets
 * a model stream and a CLI run in flight finish, then exits 0 with both recorded completed; what
 * outlives `shutdown.drain_timeout_ms`, or a second SIGTERM, is cancelled with the reason. An
 * operator cannot undrain a stopping node, and one that redials while draining says again that
 * it drains, with what is left of its wait.
 * @module
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { mockAnswer } from "../services/node/adapters/mock.ts";
import type { EdgeEvent } from "../services/edge/ports.ts";
import { openRunStore } from "../services/node/store/sqlite_store.ts";
import { IopError } from "../shared/errors.ts";
import { createLogger } from "../shared/log.ts";
import { mockNode, type RawConfig, startEdge, startNode, type TestEdge } from "./stack.ts";
import { dialTlsConfig } from "./tls_fixture.ts";
import { NodeProcess } from "./node_process.ts";
import { TextLog, until } from "./util.ts";

/** The mock's answer: 60 tokens 100 ms apart, so it is still streaming when the node stops. */
const MOCK = { tokens: 60, token_delay_ms: 100 };
const PROMPT = "count";

/** A node process and the history file it writes. */
class NodeProc extends NodeProcess {
  constructor(configFile: string, readonly history: string) {
    super(configFile);
  }
}

/** Writes node `id`'s config and starts it; resolves once the Edge saw it apply its config. */
async function startNodeProc(
  edge: TestEdge,
  id: string,
  drainTimeoutMs: number,
): Promise<NodeProc> {
  const history = `${edge.dir}/${id}/history.db`;
  const configFile = `${edge.dir}/${id}.yaml`;
  // JSON is valid YAML.
  await Deno.writeTextFile(
    configFile,
    JSON.stringify({
      node: { id, token: `${id}-token` },
      edge: {
        address: `127.0.0.1:${edge.wire.port}`,
        backoff_initial_ms: 50,
        backoff_max_ms: 300,
        tls: await dialTlsConfig("node"),
      },
      http: { host: "127.0.0.1", port: 0 },
      history: { path: history },
      policy: { adapter_kinds: ["mock", "cli"], cli: { commands: ["sh"], cwd: ["."] } },
      shutdown: { drain_timeout_ms: drainTimeoutMs },
    }),
  );
  const applied = Promise.withResolvers<void>();
  const unsubscribe = edge.service.subscribe((event) => {
    if (event.type === "node_config_applied" && event.nodeId === id) applied.resolve();
  });
  const node = new NodeProc(configFile, history);
  try {
    const late = node.child.status.then((s) => {
      throw new Error(`node ${id} exited with ${s.code} before registering:\n${node.stderr.text}`);
    });
    await Promise.race([applied.promise, late]);
  } catch (err) {
    await node[Symbol.asyncDispose]();
    throw err;
  } finally {
    unsubscribe();
  }
  return node;
}

/** A node record with the slow mock (a provider of model group `chat`) and a CLI profile. */
function nodeRecord(id: string, cli?: { name: string; script: string }): RawConfig {
  return mockNode(id, {
    providers: [{ id: `${id}-chat`, group: "chat", max: 4 }],
    mock: MOCK,
    extraAdapters: cli
      ? [{
        name: "cli",
        kind: "cli",
        profiles: [{
          name: cli.name,
          command: "sh",
          args: ["-c", cli.script],
          timeout_ms: 120_000,
        }],
      }]
      : [],
  });
}

/** Follows a chat stream: `started` once its first text arrived, `done` with all of it. */
function follow(stream: AsyncIterable<OpenAI.Chat.Completions.ChatCompletionChunk>) {
  const first = Promise.withResolvers<void>();
  const done = (async () => {
    let text = "";
    let finish: string | null = null;
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      if (choice?.delta.content) {
        text += choice.delta.content;
        first.resolve();
      }
      finish = choice?.finish_reason ?? finish;
    }
    return { text, finish };
  })();
  const started = Promise.race([
    first.promise,
    done.then((r) => {
      throw new Error(`the stream ended before its first text: ${JSON.stringify(r)}`);
    }),
  ]);
  // Awaited later; a failure before then must not count as unhandled.
  done.catch(() => {});
  return { started, done };
}

/** Every event of the Edge's bus from now on. */
function recordEvents(edge: TestEdge): EdgeEvent[] {
  const events: EdgeEvent[] = [];
  edge.service.subscribe((event) => events.push(event));
  return events;
}

function openaiOf(edge: TestEdge): OpenAI {
  return new OpenAI({ apiKey: "unused", baseURL: `${edge.url}/v1`, maxRetries: 0 });
}

function streamChat(client: OpenAI, model: string) {
  return client.chat.completions.create({
    model,
    stream: true,
    messages: [{ role: "user", content: PROMPT }],
  });
}

/** The node's history rows, read from its SQLite file after it exited, by adapter. */
function historyOf(node: NodeProc) {
  const store = openRunStore(node.history);
  try {
    return store.history(10).map((r) => ({ ...r, output: store.runOutput(r.runId)?.output }));
  } finally {
    store.close();
  }
}

Deno.test("SIGTERM on a node lets its stream and CLI run finish while new requests go to another node, then exits 0", async () => {
  await using edge = await startEdge({
    http: true,
    config: (dir) => ({
      edge: { id: "edge-node-drain" },
      nodes: [
        // Prints 1, then waits for the test's go-ahead: the drain cannot end before it.
        nodeRecord("n1", {
          name: "gated",
          script: `echo 1; while [ ! -f ${dir}/go ]; do sleep 0.05; done; echo 2; echo 3`,
        }),
        nodeRecord("n2"),
      ],
      models: [
        { name: "chat", route: "pool" },
        { name: "gated-cli", route: "direct", adapter: "cli", target: "gated" },
      ],
    }),
  });
  const events = recordEvents(edge);
  const client = openaiOf(edge);
  await using n1 = await startNodeProc(edge, "n1", 60_000);
  // Only n1 is connected: both runs go to it.
  const chat = follow(await streamChat(client, "chat"));
  const cli = follow(await streamChat(client, "gated-cli"));
  await chat.started;
  await cli.started;

  const signalledAt = events.length;
  n1.child.kill("SIGTERM");
  const [line] = await n1.stderr.waitFor(/\{[^\n]*"msg":"node draining"[^\n]*\}/);
  assert.equal(JSON.parse(line).runs_left, 2, line);
  await until(
    "the edge to mark n1 draining",
    () => events.some((e) => e.type === "node_drain_changed" && e.nodeId === "n1" && e.draining),
  );
  const shown = edge.service.status().nodes.find((n) => n.id === "n1");
  assert.deepEqual([shown?.draining, shown?.stopping], [true, true]);
  // Undrained, it would be sent runs it refuses.
  assert.throws(
    () => edge.service.drainNode("n1", false),
    (err: unknown) =>
      err instanceof IopError && err.code === "INVALID_ARGUMENT" &&
      /^Cannot undrain node 'n1' as it is stopping/.test(err.message),
  );

  // A request sent while n1 drains is served by n2 as soon as it is there.
  await using n2 = await startNodeProc(edge, "n2", 60_000);
  const fresh = await client.chat.completions.create({
    model: "chat",
    messages: [{ role: "user", content: PROMPT }],
  });
  assert.equal(fresh.choices[0]?.message.content, mockAnswer(PROMPT, MOCK.tokens));
  const startedSince = events.slice(signalledAt).filter((e) => e.type === "run_started");
  assert.deepEqual(startedSince.map((e) => e.type === "run_started" && e.nodeId), ["n2"]);
  assert.ok(!n1.exited, "n1 exited while its CLI run was still going");

  await Deno.writeTextFile(`${edge.dir}/go`, "");
  assert.deepEqual(await chat.done, { text: mockAnswer(PROMPT, MOCK.tokens), finish: "stop" });
  assert.deepEqual(await cli.done, { text: "1\n2\n3\n", finish: "stop" });
  const status = await n1.child.status;
  assert.equal(status.code, 0, n1.stderr.text);
  assert.match(n1.stderr.text, /"msg":"node drained: every run finished"/);

  // Nothing failed at the Edge when n1's link closed, and n1's history has both runs completed.
  await until(
    "the edge to see n1 leave",
    () => events.some((e) => e.type === "node_disconnected" && e.nodeId === "n1"),
  );
  const finished = events.filter((e) => e.type === "run_finished");
  assert.deepEqual(
    finished.map((e) => e.type === "run_finished" && [e.nodeId, e.adapter, e.status]).sort(),
    [["n1", "cli", "completed"], ["n1", "mock", "completed"], ["n2", "mock", "completed"]],
  );
  const rows = historyOf(n1);
  assert.deepEqual(
    rows.map((r) => [r.adapter, r.status, r.output]).sort(),
    [["cli", "completed", "1\n2\n3\n"], ["mock", "completed", mockAnswer(PROMPT, MOCK.tokens)]],
  );
  assert.equal(n2.exited, false);
});

Deno.test("a run that outlives shutdown.drain_timeout_ms is cancelled with the reason; a lone draining node's new requests get a clean 503", async () => {
  await using edge = await startEdge({
    http: true,
    config: {
      edge: { id: "edge-node-drain-timeout" },
      nodes: [nodeRecord("n1", { name: "deploy", script: "echo deploying; sleep 300" })],
      models: [
        { name: "chat", route: "pool" },
        { name: "deploy-cli", route: "direct", adapter: "cli", target: "deploy" },
      ],
    },
  });
  const events = recordEvents(edge);
  const client = openaiOf(edge);
  await using n1 = await startNodeProc(edge, "n1", 1_000);
  const deploy = follow(await streamChat(client, "deploy-cli"));
  await deploy.started;

  n1.child.kill("SIGTERM");
  await until(
    "the edge to mark n1 draining",
    () => events.some((e) => e.type === "node_drain_changed" && e.nodeId === "n1" && e.draining),
  );
  // No other node serves `chat`: the request is refused at once, retryable (503), not queued.
  const refused = await client.chat.completions.create({
    model: "chat",
    messages: [{ role: "user", content: PROMPT }],
  }).catch((err) => err);
  assert.ok(refused instanceof OpenAI.APIError, String(refused));
  assert.equal(refused.status, 503);

  const ended = await deploy.done.catch((err) => err);
  assert.ok(ended instanceof OpenAI.APIError, `the stream ended without an error: ${ended}`);
  assert.match(ended.message, /cancelled: node stopping: drain timeout/);
  const status = await n1.child.status;
  assert.equal(status.code, 0, n1.stderr.text);
  const [warn] = await n1.stderr.waitFor(/\{[^\n]*"msg":"node cancelling the runs left"[^\n]*\}/);
  assert.deepEqual(
    [JSON.parse(warn).runs_left, JSON.parse(warn).reason],
    [1, "node stopping: drain timeout"],
  );
  const [row] = historyOf(n1);
  assert.deepEqual(
    [row?.adapter, row?.status, row?.error?.code, row?.error?.message, row?.output],
    ["cli", "cancelled", "CANCELLED", "node stopping: drain timeout", "deploying\n"],
  );
});

Deno.test("a second SIGTERM during the drain cancels the runs left at once and the node exits 0", async () => {
  await using edge = await startEdge({
    http: true,
    config: {
      edge: { id: "edge-node-drain-twice" },
      nodes: [nodeRecord("n1", { name: "deploy", script: "echo deploying; sleep 300" })],
      models: [{ name: "deploy-cli", route: "direct", adapter: "cli", target: "deploy" }],
    },
  });
  const client = openaiOf(edge);
  // A drain timeout far beyond the test: only the second signal can end this drain.
  await using n1 = await startNodeProc(edge, "n1", 600_000);
  const deploy = follow(await streamChat(client, "deploy-cli"));
  await deploy.started;

  n1.child.kill("SIGTERM");
  await n1.stderr.waitFor(/"msg":"node draining"/);
  n1.child.kill("SIGTERM");
  const ended = await deploy.done.catch((err) => err);
  assert.ok(ended instanceof OpenAI.APIError, `the stream ended without an error: ${ended}`);
  assert.match(ended.message, /node stopping: stopped again before its runs finished/);
  const status = await n1.child.status;
  assert.equal(status.code, 0, n1.stderr.text);
  assert.match(
    n1.stderr.text,
    /"msg":"node stopping at once: signal received again during the drain"/,
  );
  const [row] = historyOf(n1);
  assert.deepEqual(
    [row?.status, row?.error?.message],
    ["cancelled", "node stopping: stopped again before its runs finished"],
  );
});

Deno.test("a draining node that redials tells its Edge again that it drains, with what is left of its wait", async () => {
  const log = new TextLog();
  await using edge = await startEdge({
    config: { edge: { id: "edge-node-redrain" }, nodes: [nodeRecord("n1")] },
    logger: createLogger("edge", { level: "info", writer: (line) => log.append(`${line}\n`) }),
  });
  const n1 = await startNode(edge, { id: "n1" });
  const announced = /\{[^\n]*"msg":"node draining: it is stopping"[^\n]*\}/;
  n1.client.announceDraining(60_000);
  const [first] = await log.waitFor(announced);
  const before = edge.service.sessions()[0]!;
  // The link drops (a network blip); the node redials and registers again.
  before.link.close("test: the network blips");
  const [second] = await log.waitFor(announced, 10_000, log.text.indexOf(first) + first.length);
  const [was, now] = [JSON.parse(first).deadline_ms, JSON.parse(second).deadline_ms];
  assert.ok(was <= 60_000 && now < was, `announced ${was} ms, then ${now} ms`);
  await until("the new session to be stopping", () => {
    const session = edge.service.sessions()[0];
    return session !== before && session?.stopping === true && session.draining;
  });
});
