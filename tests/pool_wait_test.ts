/**
 * A stop-first rolling restart of a pool's only node fails no request: real Edge (OpenAI
 * surface) and real `services/node/main.ts` processes. The node is told to stop while a stream
 * runs on it; it drains (the stream finishes), a request sent meanwhile waits in the pool's queue
 * for a provider (`queue.wait_for_provider_ms`) instead of a 503, and runs on the replacement
 * process — same node id, its token read from `node.token_file` as a Swarm secret delivers it.
 * @module
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import type { EdgeEvent } from "../services/edge/ports.ts";
import { mockNode, startEdge, type TestEdge } from "./stack.ts";
import { dialTlsConfig } from "./tls_fixture.ts";
import { NodeProcess } from "./node_process.ts";
import { until } from "./util.ts";
import { mockAnswer } from "../services/node/adapters/mock.ts";

/** Starts node `id` with its token in a file; resolves once the Edge saw it apply its config. */
async function startNode(edge: TestEdge, id: string): Promise<NodeProcess> {
  const tokenFile = `${edge.dir}/${id}.token`;
  // A secret file as `docker secret create` from `echo` leaves it: with a trailing newline.
  await Deno.writeTextFile(tokenFile, `${id}-token\n`);
  const configFile = `${edge.dir}/${id}.yaml`;
  await Deno.writeTextFile(
    configFile,
    JSON.stringify({
      node: { id, token_file: tokenFile },
      edge: {
        address: `127.0.0.1:${edge.wire.port}`,
        backoff_initial_ms: 50,
        backoff_max_ms: 300,
        tls: await dialTlsConfig("node"),
      },
      http: { host: "127.0.0.1", port: 0 },
      history: { path: `${edge.dir}/${id}/history.db` },
      policy: { adapter_kinds: ["mock"] },
      shutdown: { drain_timeout_ms: 20_000 },
    }),
  );
  const applied = Promise.withResolvers<void>();
  const unsubscribe = edge.service.subscribe((event) => {
    if (event.type === "node_config_applied" && event.nodeId === id) applied.resolve();
  });
  const node = new NodeProcess(configFile);
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

Deno.test("a pool's only node restarted stop-first: the stream in flight finishes, a request sent meanwhile waits and runs on the new process", async () => {
  await using edge = await startEdge({
    http: true,
    config: {
      edge: { id: "edge-pool-wait" },
      // 20 tokens 100 ms apart: the stream outlives the moment the node is told to stop.
      nodes: [
        mockNode("n1", {
          providers: [{ id: "n1-chat", group: "chat", max: 4 }],
          mock: { tokens: 20, token_delay_ms: 100 },
        }),
      ],
      models: [{ name: "chat", route: "pool", queue: { wait_for_provider_ms: 20_000 } }],
    },
  });
  const events: EdgeEvent[] = [];
  edge.service.subscribe((event) => events.push(event));
  const client = new OpenAI({ apiKey: "unused", baseURL: `${edge.url}/v1`, maxRetries: 0 });
  const ask = (content: string) =>
    client.chat.completions.create({ model: "chat", messages: [{ role: "user", content }] });

  const old = await startNode(edge, "n1");
  const stream = await client.chat.completions.create({
    model: "chat",
    stream: true,
    messages: [{ role: "user", content: "long" }],
  });
  const chunks = stream[Symbol.asyncIterator]();
  const first = await chunks.next();
  assert.ok(!first.done);
  const rest = (async () => {
    let text = first.value.choices[0]?.delta.content ?? "";
    for (let c = await chunks.next(); !c.done; c = await chunks.next()) {
      text += c.value.choices[0]?.delta.content ?? "";
    }
    return text;
  })();

  old.child.kill("SIGTERM");
  await until(
    "n1 draining",
    () => events.some((e) => e.type === "node_drain_changed" && e.draining),
    20_000,
  );
  // Nothing serves `chat` now: the request waits for a provider instead of a 503.
  const during = ask("sent while the only node drains");
  // Awaited below; a failure before then must not count as unhandled.
  during.catch(() => {});

  const text = await rest;
  assert.equal(text, mockAnswer("long", 20), "the stream in flight finished on the draining node");
  assert.equal((await old.child.status).code, 0, old.stderr.text);
  await old[Symbol.asyncDispose]();
  await using _replacement = await startNode(edge, "n1");
  const answer = await during;
  assert.equal(answer.choices[0]?.finish_reason, "stop");
  assert.match(answer.choices[0]?.message.content ?? "", /sent while the only node drains/);
});
