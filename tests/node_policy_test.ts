/**
 * A Node runs only what its owner allows, whatever its Edge pushes: a real Node process
 * (`deno run services/node/main.ts`, its policy in node.yaml, its token and a provider key in
 * its environment) registers with an in-test Edge that pushes adapters inside and outside that
 * policy. The refused ones fail their runs with the reason, the Edge shows the reason in its
 * status, logs and relayed events, the allowed ones keep serving, and no CLI profile sees the
 * node's environment.
 * @module
 */
import assert from "node:assert/strict";
import { toRelayedEvent } from "../services/edge/cp_link/codec.ts";
import type { EdgeEvent, StatusSnapshot } from "../services/edge/ports.ts";
import { parseEdgeConfig } from "../services/edge/config.ts";
import { INHERITED_ENV } from "../services/node/adapters/cli.ts";
import { createLogger } from "../shared/log.ts";
import { startFakeOllama } from "../shared/testing/fake_ollama.ts";
import { startEdge, type TestEdge } from "./stack.ts";
import { dialTlsConfig } from "./tls_fixture.ts";
import { NodeProcess } from "./node_process.ts";
import { TextLog } from "./util.ts";

/** What the node has in its environment and must never give away. */
const SECRETS = {
  IOP_NODE_TOKEN: "n1-token-from-the-environment",
  PROVIDER_KEY: "sk-provider-key-of-the-node",
};

const REASONS = {
  evil: "profiles[0].command: 'bash' is not allowed on this node " +
    "(policy.cli.commands allows: sh, env)",
  elsewhere: "profiles[0].cwd: '/tmp' is not inside a directory allowed on this node " +
    "(policy.cli.cwd allows: .)",
  offsite: "base_url: host '169.254.169.254:80' is not allowed on this node " +
    "(policy.backend_hosts allows: 127.0.0.1:PORT)",
  keythief: "api_key_env: 'IOP_NODE_TOKEN' is not allowed on this node " +
    "(policy.api_key_env allows: ALLOWED_KEY)",
  sniffer: "api_key_env: 'PROVIDER_KEY' is not allowed on this node " +
    "(policy.api_key_env allows: ALLOWED_KEY)",
};

function edgeConfig(ollamaUrl: string): Record<string, unknown> {
  const sh = (name: string, script: string, extra: Record<string, unknown> = {}) => ({
    name,
    command: "sh",
    args: ["-c", script],
    ...extra,
  });
  return {
    edge: { id: "edge-test" },
    nodes: [{
      id: "n1",
      token: SECRETS.IOP_NODE_TOKEN,
      adapters: [
        { name: "mock", kind: "mock", tokens: 3, token_delay_ms: 0 },
        {
          name: "shell",
          kind: "cli",
          profiles: [
            { name: "printenv", command: "env", env: { ASKED_FOR: "yes" } },
            sh("shellenv", "env"),
            sh("path", "command -v ls >/dev/null && echo path-ok"),
          ],
        },
        {
          name: "evil",
          kind: "cli",
          profiles: [{ name: "x", command: "bash", args: ["-c", "env"] }],
        },
        { name: "elsewhere", kind: "cli", profiles: [sh("x", "env", { cwd: "/tmp" })] },
        { name: "offsite", kind: "ollama", base_url: "http://169.254.169.254/latest" },
        {
          name: "keythief",
          kind: "openai_compat",
          base_url: ollamaUrl,
          api_key_env: "IOP_NODE_TOKEN",
        },
        { name: "sniffer", kind: "ollama", base_url: ollamaUrl, api_key_env: "PROVIDER_KEY" },
        { name: "llama", kind: "ollama", base_url: ollamaUrl },
      ],
    }],
    models: [
      { name: "printenv", route: "direct", adapter: "shell", target: "printenv" },
      { name: "shellenv", route: "direct", adapter: "shell", target: "shellenv" },
      { name: "path", route: "direct", adapter: "shell", target: "path" },
      { name: "evil", route: "direct", adapter: "evil", target: "x" },
      { name: "demo", route: "direct", adapter: "mock", target: "demo" },
      { name: "llama", route: "direct", adapter: "llama", target: "llama3.2:latest" },
    ],
  };
}

/** Starts the node and resolves with its config_applied report, once the Edge has it. */
async function startNode(configFile: string, events: EdgeEvent[]) {
  const node = new NodeProcess(configFile, { env: SECRETS, stopSignal: "SIGTERM" });
  const deadline = Date.now() + 20_000;
  while (!events.some((e) => e.type === "node_config_applied")) {
    const exited = await Promise.race([
      node.child.status.then(() => true),
      new Promise<false>((resolve) => setTimeout(() => resolve(false), 20)),
    ]);
    if (exited || Date.now() > deadline) {
      await node[Symbol.asyncDispose]();
      throw new Error(`node did not apply its config:\n${node.stderr.text}`);
    }
  }
  return node;
}

interface ChatAnswer {
  choices?: { message: { content: string } }[];
  error?: { message: string };
}

/** A non-streamed chat completion: its status, body, and the answer's text ("" when none). */
async function chat(edge: TestEdge, model: string) {
  const res = await fetch(`${edge.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }] }),
  });
  const body = await res.json() as ChatAnswer;
  return { status: res.status, body, text: body.choices?.[0]?.message.content ?? "" };
}

function envOf(text: string): Map<string, string> {
  return new Map(
    text.split("\n").filter((l) => l.includes("=")).map((l) => {
      const i = l.indexOf("=");
      return [l.slice(0, i), l.slice(i + 1)] as const;
    }),
  );
}

Deno.test("a node refuses pushed adapters outside its policy, keeps serving the rest, and no profile sees its token", async () => {
  await using ollama = startFakeOllama();
  const port = new URL(ollama.url).port;
  const edgeLog = new TextLog();
  await using edge = await startEdge({
    config: edgeConfig(ollama.url),
    http: true,
    logger: createLogger("test.edge", { level: "warn", writer: (l) => edgeLog.append(l + "\n") }),
  });
  const events: EdgeEvent[] = [];
  const unsubscribe = edge.service.subscribe((e) => void events.push(e));
  const configFile = `${edge.dir}/node.yaml`;
  await Deno.writeTextFile(
    configFile,
    JSON.stringify({
      node: { id: "n1", token: "overridden by IOP_NODE_TOKEN" },
      edge: { address: `127.0.0.1:${edge.wire.port}`, tls: await dialTlsConfig("node") },
      http: { host: "127.0.0.1", port: 0 },
      history: { path: `${edge.dir}/node/history.db` },
      policy: {
        adapter_kinds: ["mock", "cli", "ollama", "openai_compat"],
        cli: { commands: ["sh", "env"], cwd: ["."] },
        api_key_env: ["ALLOWED_KEY"],
        backend_hosts: [`127.0.0.1:${port}`],
      },
    }),
  );
  await using node = await startNode(configFile, events);
  unsubscribe();
  const reasons = Object.fromEntries(
    Object.entries(REASONS).map(([k, v]) => [k, v.replace("PORT", port)]),
  );

  // The node built what its policy allows and refused the rest, each with its reason.
  const applied = events.find((e) => e.type === "node_config_applied");
  assert.ok(applied?.type === "node_config_applied");
  assert.deepEqual(applied.adapters, ["mock", "shell", "llama"]);
  assert.deepEqual(applied.rejected, reasons);

  // A CLI profile sees only PATH, HOME, LANG, LC_ALL, TZ, TERM and the env it asked for.
  const printenv = await chat(edge, "printenv");
  assert.equal(printenv.status, 200, JSON.stringify(printenv.body));
  const env = envOf(printenv.text);
  const allowed = new Set([...INHERITED_ENV, "ASKED_FOR"]);
  assert.deepEqual([...env.keys()].filter((k) => !allowed.has(k)), []);
  assert.equal(env.get("ASKED_FOR"), "yes");
  const shellenv = await chat(edge, "shellenv");
  const shellText = shellenv.text;
  assert.doesNotMatch(shellText, /^IOP_/m);
  assert.equal((await chat(edge, "path")).text, "path-ok\n");

  // A run on a refused adapter fails with the reason; the allowed ones keep serving.
  const evil = await chat(edge, "evil");
  assert.equal(evil.status, 404);
  assert.equal(
    evil.body.error?.message,
    `Cannot run as this node refused adapter 'evil': ${reasons.evil}`,
  );
  assert.equal((await chat(edge, "demo")).status, 200);
  const llama = await chat(edge, "llama");
  assert.equal(llama.status, 200, JSON.stringify(llama.body));

  // The Edge's status shows each refused adapter with its reason, the others unrefused.
  const status = await (await fetch(`${edge.url}/api/iop/status`)).json() as StatusSnapshot;
  // By adapter: a CLI adapter shows as one row per profile, each carrying the adapter's reason.
  const rows = Object.fromEntries(status.nodes[0]!.resources.map((r) => [r.adapter, r.refused]));
  assert.deepEqual(rows, { mock: "", shell: "", llama: "", ...reasons });

  // Both tiers log each refusal; the Control Plane hears the reasons, not only the names.
  const logged = (text: string, msg: string) =>
    text.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l))
      .filter((l) => l.msg === msg).map((l) => [l.level, l.adapter, l.reason]);
  const expected = Object.entries(reasons).map(([name, why]) => ["warn", name, why]);
  assert.deepEqual(logged(node.stderr.text, "adapter refused by node policy"), expected);
  assert.deepEqual(logged(edgeLog.text, "node refused adapter"), expected);
  const relayed = toRelayedEvent(applied);
  assert.ok(relayed?.event.case === "node");
  assert.ok(relayed.event.value.detail.includes(`refused evil: ${reasons.evil}`));

  // No secret of the node's in anything it or the Edge shows.
  await node[Symbol.asyncDispose]();
  const shown = [
    node.stderr.text,
    edgeLog.text,
    JSON.stringify(status),
    relayed.event.value.detail,
    printenv.text,
    shellText,
    JSON.stringify(evil.body),
  ].join("\n");
  for (const secret of Object.values(SECRETS)) assert.ok(!shown.includes(secret), secret);
});

Deno.test("a literal api_key in an Edge config is refused at load, naming the key and api_key_env", () => {
  const raw = (extra: Record<string, unknown>) => ({
    nodes: [{
      id: "n1",
      token: "t1",
      adapters: [{ name: "gpt", kind: "openai_compat", base_url: "https://api.example", ...extra }],
    }],
  });
  assert.throws(() => parseEdgeConfig(raw({ api_key: "sk-live-abcdef" }), "edge.yaml"), {
    name: "ConfigError",
    message: "edge.yaml: nodes[0].adapters[0].api_key: a literal key would be sent to the node " +
      "with its configuration: set api_key_env to the name of a variable on the node that " +
      "holds the key instead (or send_api_key: true to send this key anyway)",
  });
  const config = parseEdgeConfig(raw({ api_key: "sk-live", send_api_key: true }), "edge.yaml");
  assert.equal(config.nodes[0]!.adapters[0]!.kind, "openai_compat");
});
