/**
 * `deno task up`, the README's first command, as a new user runs it: the whole stack comes up,
 * answers an OpenAI client and shows in the Control Plane, and stops cleanly.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { freePort, until } from "./util.ts";

const root = new URL("..", import.meta.url).pathname;

Deno.test("deno task up starts Control Plane, Edge and Node that serve an OpenAI client, and stops them", async () => {
  const dir = await Deno.makeTempDir({ prefix: "iop_up_" });
  const ports = {
    IOP_EDGE_HTTP_PORT: String(freePort()),
    IOP_EDGE_WIRE_PORT: String(freePort()),
    IOP_CP_HTTP_PORT: String(freePort()),
    IOP_CP_WIRE_PORT: String(freePort()),
    IOP_NODE_HTTP_PORT: String(freePort()),
  };
  const up = new Deno.Command(Deno.execPath(), {
    args: ["task", "up", "--no-console"],
    cwd: root,
    env: { ...ports, IOP_UP_DIR: dir },
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  let banner = "";
  const reading = (async () => {
    for await (const text of up.stderr.pipeThrough(new TextDecoderStream())) banner += text;
  })();
  try {
    await until("the banner", () => banner.includes("IOP is up"), 30_000);
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

    const edges = await until("the edge in the Control Plane", async () => {
      const res = await fetch(`http://127.0.0.1:${ports.IOP_CP_HTTP_PORT}/edges`);
      const body = await res.json() as {
        edges: { edgeId: string; connected: boolean; status?: { nodes: { id: string }[] } }[];
      };
      const edge = body.edges.find((e) => e.edgeId === "edge-local" && e.connected);
      return edge?.status?.nodes.some((n) => n.id === "node-1") ? body.edges : undefined;
    });
    assert.equal(edges.length, 1);
    // State went to the chosen directory, not into the checkout.
    await Deno.stat(`${dir}/node-1/history.db`);
    await Deno.stat(`${dir}/logs/edge.log`);
  } finally {
    up.kill("SIGTERM");
    const status = await up.status;
    await reading;
    await Deno.remove(dir, { recursive: true });
    assert.equal(status.code, 0, banner);
  }
  // Every child is gone: their ports accept connections no more.
  for (const port of Object.values(ports)) {
    await assert.rejects(Deno.connect({ hostname: "127.0.0.1", port: Number(port) }));
  }
});
