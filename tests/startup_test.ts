/**
 * A service that cannot start says why in one log line and exits with code 2.
 */
import assert from "node:assert/strict";

const root = new URL("..", import.meta.url).pathname;

async function runService(svc: string, configText: string) {
  const dir = await Deno.makeTempDir();
  try {
    const file = `${dir}/${svc}.yaml`;
    await Deno.writeTextFile(file, configText);
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", `${root}services/${svc}/main.ts`, "--config", file],
      cwd: dir,
      stdin: "null",
      stdout: "null",
      stderr: "piped",
    }).output();
    return { code: out.code, stderr: new TextDecoder().decode(out.stderr) };
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("an edge whose HTTP port is taken exits with code 2 and names the address", async () => {
  using busy = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (busy.addr as Deno.NetAddr).port;
  const { code, stderr } = await runService(
    "edge",
    `http: { port: ${port} }\nwire: { port: 0, insecure_plaintext: true }\ncontrol_plane: { address: "" }\n`,
  );
  assert.equal(code, 2);
  assert.match(stderr, new RegExp(`cannot start: serve HTTP on 127\\.0\\.0\\.1:${port}`));
  assert.match(stderr, /already in use/);
  assert.doesNotMatch(stderr, /Uncaught/);
});

Deno.test("an edge with broken YAML exits with code 2 naming the file and line", async () => {
  const { code, stderr } = await runService("edge", "nodes:\n  - id: a\n   token: [unclosed\n");
  assert.equal(code, 2);
  assert.match(stderr, /invalid config/);
  assert.match(stderr, /edge\.yaml: line \d+, column \d+: invalid YAML/);
});

Deno.test("a node that cannot create its history file exits with code 2 naming the path", async () => {
  const { code, stderr } = await runService(
    "node",
    "node: { id: n1, token: t }\nedge: { insecure_plaintext: true }\nhttp: { port: 0 }\n" +
      "history: { path: /proc/iop-none/history.db }\n",
  );
  assert.equal(code, 2);
  assert.match(stderr, /cannot start: open the run history at \/proc\/iop-none\/history\.db/);
});

Deno.test("an edge whose node wire has neither tls nor the plaintext opt-out exits with code 2 naming the key", async () => {
  const { code, stderr } = await runService(
    "edge",
    `http: { port: 0 }\nwire: { port: 0 }\ncontrol_plane: { address: "" }\n`,
  );
  assert.equal(code, 2);
  assert.match(stderr, /edge\.yaml: wire\.tls: is required/);
  assert.match(stderr, /deno task certs/);
});

Deno.test("a node whose fleet CA file is missing exits with code 2 naming the key and file", async () => {
  const { code, stderr } = await runService(
    "node",
    "node: { id: n1, token: t }\nedge: { tls: { ca: /nonexistent/ca.pem } }\nhttp: { port: 0 }\n",
  );
  assert.equal(code, 2);
  assert.match(stderr, /node\.yaml: edge\.tls\.ca: cannot read '\/nonexistent\/ca\.pem'/);
  assert.doesNotMatch(stderr, /deno task certs/, "a file of the operator's own gets no hint");
});

Deno.test("a node missing the certificates of `deno task certs` is told to run it", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const { code, stderr } = await runService(
      "node",
      `node: { id: n1, token: t }\nedge: { tls: { ca: ${dir}/.iop/certs/ca.pem } }\n` +
        "http: { port: 0 }\n",
    );
    assert.equal(code, 2);
    assert.match(stderr, /edge\.tls\.ca: cannot read '.*\/\.iop\/certs\/ca\.pem'/);
    assert.match(stderr, /`deno task certs` makes the fleet CA/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a node on the plaintext opt-out says so at start", async () => {
  using busy = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (busy.addr as Deno.NetAddr).port;
  // The taken HTTP port ends the node right after its start-up warnings.
  const { code, stderr } = await runService(
    "node",
    `node: { id: n1, token: t }\nedge: { insecure_plaintext: true }\nhttp: { port: ${port} }\n` +
      "history: { path: history.db }\n",
  );
  assert.equal(code, 2);
  assert.match(stderr, /the link to the edge is plaintext \(edge\.insecure_plaintext: true\)/);
});
