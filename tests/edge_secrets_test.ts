/**
 * Secrets an Edge checks, with a real Edge and real Nodes over TCP in this process: a node
 * registers with the plain token whose `sha256:` hash the Edge stores, a wrong token is refused
 * without the token showing anywhere, a reload keeps a node whose token was only re-stored as
 * its hash and drops one whose token changed, and a hashed HTTP API key is accepted.
 */
import assert from "node:assert/strict";
import type { EdgeEvent } from "../services/edge/ports.ts";
import { createLogger, type Logger } from "../shared/log.ts";
import { hashSecret } from "../shared/secrets.ts";
import { mockNode, startEdge, startNode } from "./stack.ts";
import { until } from "./util.ts";

/** A logger that keeps its lines for assertions. */
function recordingLogger(): { logger: Logger; lines: string[] } {
  const lines: string[] = [];
  return { logger: createLogger("edge", { level: "info", writer: (l) => lines.push(l) }), lines };
}

Deno.test("a node registers with the plain token whose sha256: hash the Edge stores", async () => {
  await using edge = await startEdge({
    config: { nodes: [{ ...mockNode("n1"), token: hashSecret("plain-n1-token") }] },
  });
  await using node = await startNode(edge, { token: "plain-n1-token" });
  assert.equal(edge.service.sessions()[0]?.id, "n1");
  assert.deepEqual(node.adapters, ["mock"]);
});

Deno.test("a node with a wrong token is refused and neither token shows in the reason or logs", async () => {
  const log = recordingLogger();
  const stored = hashSecret("right-token");
  await using edge = await startEdge({
    config: { nodes: [{ ...mockNode("n1"), token: stored }] },
    logger: log.logger,
  });
  const refusals: string[] = [];
  edge.service.subscribe((e: EdgeEvent) => {
    if (e.type === "node_refused") refusals.push(e.reason);
  });
  await assert.rejects(
    startNode(edge, { token: "wrong-token", readyMs: 1_000 }),
    /did not apply its config/,
  );
  assert.ok(refusals.length >= 1);
  assert.deepEqual(new Set(refusals), new Set(["unknown node token"]));
  assert.deepEqual(edge.service.sessions(), []);
  const text = log.lines.join("\n");
  assert.match(text, /"msg":"node registration refused"[^\n]*"node_id":"n1"/);
  for (const secret of ["wrong-token", "right-token", stored]) {
    assert.ok(!text.includes(secret), `'${secret.slice(0, 12)}…' is never logged`);
  }
});

Deno.test("presenting the stored hash instead of the token is refused", async () => {
  const stored = hashSecret("right-token");
  await using edge = await startEdge({
    config: { nodes: [{ ...mockNode("n1"), token: stored }] },
    logger: recordingLogger().logger,
  });
  await assert.rejects(startNode(edge, { token: stored, readyMs: 500 }), /did not apply/);
  assert.deepEqual(edge.service.sessions(), []);
});

Deno.test("a reload keeps a node whose token is only re-stored as its hash, and drops one whose token changed", async () => {
  await using edge = await startEdge({
    config: { nodes: [mockNode("n1")] },
    logger: recordingLogger().logger,
  });
  await using _node = await startNode(edge);
  const session = edge.service.sessions()[0]!;
  const plain = edge.config.nodes[0]!;
  const disconnects: string[] = [];
  edge.service.subscribe((e: EdgeEvent) => {
    if (e.type === "node_disconnected") disconnects.push(e.reason);
  });

  edge.service.applyConfig({
    ...edge.config,
    nodes: [{ ...plain, token: hashSecret(plain.token) }],
  });
  assert.equal(edge.service.sessions()[0], session, "same session after re-storing as hash");

  edge.service.applyConfig({ ...edge.config, nodes: [{ ...plain, token: hashSecret("rotated") }] });
  await until("the node to be dropped", () => disconnects.length > 0 ? true : undefined);
  assert.match(disconnects[0]!, /node removed from config or its token changed/);
});

Deno.test("an HTTP API key stored as sha256: is accepted as the plain key, not as the hash", async () => {
  const stored = hashSecret("plain-api-key");
  await using edge = await startEdge({
    config: { http: { api_keys: [stored] }, nodes: [mockNode("n1")] },
    http: true,
  });
  const get = async (key: string) => {
    const res = await fetch(`${edge.url}/v1/models`, {
      headers: { authorization: `Bearer ${key}` },
    });
    await res.body?.cancel();
    return res.status;
  };
  assert.equal(await get("plain-api-key"), 200);
  assert.equal(await get(stored), 401);
  assert.equal(await get("plain-api-key-2"), 401);
});
