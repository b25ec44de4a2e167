/**
 * Runs survive a blip of the node link: a real Node process dials its Edge through a proxy that
 * cuts the link as a network does (no close, both sides find out by their heartbeats). The Node
 * keeps its runs, registers again once the link heals, and the Edge resumes each stream from the
 * last event it received: the client sees every token exactly once, and a CLI run in flight
 * finishes. A link that stays down past the grace period ends the runs with a clear error on
 * both sides, and the history says why.
 * @module
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { mockAnswer } from "../services/node/adapters/mock.ts";
import { NodeProcess } from "./node_process.ts";
import { CutProxy, historyOf } from "./process_stack.ts";
import { mockNode, startEdge, type TestEdge } from "./stack.ts";
import { until } from "./util.ts";

/** 40 tokens 100 ms apart: about 4 s of stream, so a cut lands in the middle of it. */
const MOCK = { tokens: 40, token_delay_ms: 100 };
const PROMPT = "blip";
const NODE = "node-blip";

/** Prints 30 numbered lines 100 ms apart, like a deploy reporting its steps. */
const DEPLOY = 'i=1; while [ $i -le 30 ]; do echo "step $i"; i=$((i+1)); sleep 0.1; done';

/**
 * The Edge, a cut proxy before its node wire, and the node process dialing through it (with the
 * grace periods given); disposing it stops the node, then the proxy, then the Edge.
 */
async function blipStack(grace: { edgeMs?: number; nodeMs?: number } = {}) {
  const edgeGraceMs = grace.edgeMs;
  const edge = await startEdge({
    tls: "off",
    http: true,
    config: {
      edge: { id: "edge-blip" },
      ...(edgeGraceMs === undefined ? {} : { runs: { resume_grace_ms: edgeGraceMs } }),
      nodes: [mockNode(NODE, {
        providers: [{ id: "p1", group: "chat", max: 4 }],
        mock: MOCK,
        extraAdapters: [{
          name: "cli",
          kind: "cli",
          profiles: [{ name: "deploy", command: "sh", args: ["-c", DEPLOY], timeout_ms: 60_000 }],
        }],
      })],
      models: [
        { name: "chat", route: "pool", queue: { max_length: 4, max_wait_ms: 5000 } },
        { name: "deploy-cli", route: "direct", adapter: "cli", target: "deploy" },
      ],
    },
  });
  const proxy = new CutProxy({ hostname: "127.0.0.1", port: edge.wire.port });
  const stopEdge = async () => {
    proxy[Symbol.dispose]();
    await edge.close();
  };
  const node = await startNodeProc(edge, proxy, grace.nodeMs).catch(async (err) => {
    await stopEdge();
    throw err;
  });
  return {
    edge,
    proxy,
    node,
    async [Symbol.asyncDispose]() {
      await node[Symbol.asyncDispose]();
      await stopEdge();
    },
  };
}

/** Starts the node process through `proxy`; resolves once the Edge saw it apply its config. */
async function startNodeProc(
  edge: TestEdge,
  proxy: CutProxy,
  graceMs?: number,
): Promise<NodeProcess & { history: string }> {
  const history = `${edge.dir}/${NODE}/history.db`;
  const configFile = `${edge.dir}/${NODE}.yaml`;
  await Deno.writeTextFile(
    configFile,
    JSON.stringify({
      node: { id: NODE, token: `${NODE}-token` },
      edge: {
        address: proxy.address,
        insecure_plaintext: true,
        backoff_initial_ms: 50,
        backoff_max_ms: 300,
        ...(graceMs === undefined ? {} : { resume_grace_ms: graceMs }),
      },
      http: { host: "127.0.0.1", port: 0 },
      history: { path: history },
      policy: { adapter_kinds: ["mock", "cli"], cli: { commands: ["sh"], cwd: ["."] } },
    }),
  );
  const node = Object.assign(new NodeProcess(configFile), { history });
  await until(
    "the node to register",
    () => edge.service.status().nodes.some((n) => n.id === NODE && n.configVersion > 0),
    20_000,
  ).catch(async (err) => {
    await node[Symbol.asyncDispose]();
    throw new Error(`node did not register:\n${node.stderr.text}`, { cause: err });
  });
  return node;
}

/** Ids of the runs the Edge dispatches from now on. */
function startedRuns(edge: TestEdge): string[] {
  const ids: string[] = [];
  edge.service.subscribe((event) => {
    if (event.type === "run_started") ids.push(event.runId);
  });
  return ids;
}

/** True once `count` runs were dispatched and each has sent output. */
function underWay(edge: TestEdge, ids: string[], count: number): boolean {
  return ids.length === count &&
    ids.every((id) => (edge.service.getRun(id)?.firstOutputAtMs ?? 0) > 0);
}

/** Reads a stream to its end: the text, the finish reason, or the error that ended it. */
async function readStream(stream: AsyncIterable<OpenAI.Chat.Completions.ChatCompletionChunk>) {
  let text = "";
  let finish: string | null = null;
  let error: Error | undefined;
  try {
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
  } catch (err) {
    error = err as Error;
  }
  return { text, finish, error };
}

function client(edge: TestEdge): OpenAI {
  return new OpenAI({ apiKey: "unused", baseURL: `${edge.url}/v1`, maxRetries: 0 });
}

/** Waits until the Edge has seen the node's link die (by its heartbeats) and the node return. */
async function waitForRedial(edge: TestEdge, before: number): Promise<void> {
  await until("the edge to see the node reconnect", () => {
    const node = edge.service.status().nodes.find((n) => n.id === NODE);
    return node !== undefined && node.connected && node.connectedAtMs > before;
  }, 20_000);
}

Deno.test("a 3-second cut of the node link loses no token of a stream and no step of a CLI run", async () => {
  await using stack = await blipStack();
  const { edge, proxy, node } = stack;
  const openai = client(edge);
  const runs = startedRuns(edge);

  const chat = readStream(
    await openai.chat.completions.create({
      model: "chat",
      stream: true,
      messages: [{ role: "user", content: PROMPT }],
    }),
  );
  const deploy = readStream(
    await openai.chat.completions.create({
      model: "deploy-cli",
      stream: true,
      messages: [{ role: "user", content: "ship it" }],
    }),
  );
  // Both are under way before the cut: the stream's first tokens and the deploy's first step.
  await until("both runs to be under way", () => underWay(edge, runs, 2));
  const cutAt = Date.now();
  proxy.cut();
  await new Promise((resolve) => setTimeout(resolve, 3_000));
  proxy.heal();
  await waitForRedial(edge, cutAt);

  const [streamed, deployed] = await Promise.all([chat, deploy]);
  assert.equal(streamed.error, undefined, `${streamed.error}\n${node.stderr.text}`);
  assert.equal(streamed.text, mockAnswer(PROMPT, MOCK.tokens));
  assert.equal(streamed.finish, "stop");
  assert.equal(deployed.error, undefined, `${deployed.error}\n${node.stderr.text}`);
  const steps = deployed.text.trim().split("\n");
  assert.deepEqual(steps, Array.from({ length: 30 }, (_, i) => `step ${i + 1}`));

  // The node did lose the link (this was a blip, not a pause), and history has both completed.
  assert.match(node.stderr.text, /link to edge lost/);
  const rows = await until("both runs in the history as completed", () => {
    const rows = historyOf(node.history);
    return rows.length === 2 && rows.every((r) => r.status === "completed") && rows;
  });
  assert.deepEqual(rows.map((r) => r.adapter).sort(), ["cli", "mock"]);
});

Deno.test("a link cut one way loses no token: the node says it gives up on it, and the Edge waits for it", async () => {
  await using stack = await blipStack();
  const { edge, proxy, node } = stack;
  const runs = startedRuns(edge);
  const chat = readStream(
    await client(edge).chat.completions.create({
      model: "chat",
      stream: true,
      messages: [{ role: "user", content: PROMPT }],
    }),
  );
  await until("the stream to be under way", () => underWay(edge, runs, 1));
  // The Edge's frames stop reaching the node while the node's tokens keep reaching the Edge,
  // right up to the moment the node, deaf for three heartbeats, closes the link.
  const cutAt = Date.now();
  proxy.cutReturn();
  await waitForRedial(edge, cutAt);

  const streamed = await chat;
  assert.equal(streamed.error, undefined, `${streamed.error}\n${node.stderr.text}`);
  assert.equal(streamed.text, mockAnswer(PROMPT, MOCK.tokens));
  assert.equal(streamed.finish, "stop");
  assert.match(node.stderr.text, /edge missed heartbeats, closing link/);
});

Deno.test("a cut longer than the grace period ends the runs with a clear error, in history too", async () => {
  // The node gives up first, so its history says why whichever side noticed the cut first.
  await using stack = await blipStack({ edgeMs: 3_000, nodeMs: 1_500 });
  const { edge, proxy, node } = stack;
  const openai = client(edge);
  const runs = startedRuns(edge);

  const chat = readStream(
    await openai.chat.completions.create({
      model: "chat",
      stream: true,
      messages: [{ role: "user", content: PROMPT }],
    }),
  );
  await until("the stream to be under way", () => underWay(edge, runs, 1));
  proxy.cut();
  const streamed = await chat;
  proxy.heal();
  assert.ok(streamed.error, `the stream ended without an error: ${JSON.stringify(streamed)}`);
  assert.match(
    streamed.error.message,
    /did not come back within 3000 ms \(runs\.resume_grace_ms\)/,
  );
  assert.notEqual(streamed.text, mockAnswer(PROMPT, MOCK.tokens));

  const [row] = await until("the run in the history as cancelled", () => {
    const rows = historyOf(node.history);
    return rows.length === 1 && rows[0]!.status === "cancelled" && rows;
  }, 20_000);
  assert.match(
    row!.error?.message ?? "",
    /link to edge lost for 1500 ms \(edge\.resume_grace_ms\)/,
  );
});
