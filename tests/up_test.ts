/**
 * `deno task up`, the README's first command, as a new user runs it: the whole stack comes up,
 * answers an OpenAI client and shows in the Control Plane, and stops cleanly.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { startUp } from "./up_stack.ts";
import { until } from "./util.ts";

Deno.test("deno task up starts Control Plane, Edge and Node that serve an OpenAI client, and stops them", async () => {
  const stack = await startUp();
  const { dir, ports } = stack;
  let exitCode: number | undefined;
  try {
    const banner = stack.banner();
    assert.match(banner, new RegExp(`Edge\\s+http://127\\.0\\.0\\.1:${ports.IOP_EDGE_HTTP_PORT}`));

    const client = new OpenAI({
      apiKey: "unused",
      baseURL: `http://127.0.0.1:${ports.IOP_EDGE_HTTP_PORT}/v1`,
      maxRetries: 0,
    });
    const models = (await client.models.list()).data.map((m) => m.id);
    assert.ok(models.includes("demo"), `models: ${models}`);
    const chat = await client.chat.completions.create({
      model: "demo",
      messages: [{ role: "user", content: "hello up" }],
    });
    assert.match(chat.choices[0]!.message.content ?? "", /^hello up tok2/);

    // The Control Plane wants a token: `up` made one per role and says where they are.
    assert.match(banner, new RegExp(`read token \\(local-viewer\\) in ${dir}/cp-local/read-token`));
    const readToken = (await Deno.readTextFile(`${dir}/cp-local/read-token`)).trim();
    const cpEdges = `http://127.0.0.1:${ports.IOP_CP_HTTP_PORT}/edges`;
    const anonymous = await fetch(cpEdges);
    assert.equal(anonymous.status, 401);
    await anonymous.body?.cancel();
    const edges = await until("the edge in the Control Plane", async () => {
      const res = await fetch(cpEdges, { headers: { authorization: `Bearer ${readToken}` } });
      const body = await res.json() as {
        edges: { edgeId: string; connected: boolean; status?: { nodes: { id: string }[] } }[];
      };
      const edge = body.edges.find((e) => e.edgeId === "edge-local" && e.connected);
      return edge?.status?.nodes.some((n) => n.id === "node-1") ? body.edges : undefined;
    });
    assert.equal(edges.length, 1);
    // State went to the chosen directory, not into the checkout.
    await Deno.stat(`${dir}/node-1/history.db`);
    // Logs are written as the services print them, not when the stack stops.
    const expected = { edge: /edge listening/, node: /registered/, cp: /listening/ };
    for (const [svc, line] of Object.entries(expected)) {
      const text = await Deno.readTextFile(`${dir}/logs/${svc}.log`);
      assert.match(text, line, `${svc}.log while running:\n${text}`);
    }
  } finally {
    exitCode = await stack.stop();
  }
  assert.equal(exitCode, 0, stack.banner());
  // Every child is gone: their ports accept connections no more.
  for (const port of Object.values(ports)) {
    await assert.rejects(Deno.connect({ hostname: "127.0.0.1", port: Number(port) }));
  }
});
