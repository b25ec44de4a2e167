/**
 * `deno task up`: starts the embedded default stack — Control Plane, one Edge and one Node
 * (mock adapter + sample CLI profiles) — from `deploy/config/*.yaml`, waits until the node has
 * registered, prints where everything listens, and hands the terminal to the Edge's ops console.
 * `/quit` (or Ctrl-C) stops the whole stack.
 *
 * Ports follow the usual overrides (`IOP_EDGE_HTTP_PORT`, `IOP_EDGE_WIRE_PORT`,
 * `IOP_CP_HTTP_PORT`, `IOP_CP_WIRE_PORT`, `IOP_NODE_HTTP_PORT`); logs and state (run history,
 * audit, A2A tasks) go under `IOP_UP_DIR` (default `.iop`). `--no-console` runs without the
 * console, as it also does when stdin is not a terminal.
 *
 * Both wires run mutual TLS: on first run a fleet CA and a certificate per service are made
 * under `<IOP_UP_DIR>/certs` (as `deno task certs` does); later runs keep them, renewing any
 * that come close to expiry.
 *
 * The Control Plane's API and dashboard want a token: on first run an operate token
 * (`local-operator`) and a read token (`local-viewer`) are made into
 * `<IOP_UP_DIR>/cp-local/{operate,read}-token` and handed to the Control Plane as
 * `IOP_CP_ACCESS_TOKENS`, unless that variable is already set; the banner says where they are.
 * @module
 */
import { ensureFleetCertificates } from "./fleet_certs.ts";

const CONFIG = "deploy/config";
const env = (name: string, fallback: string) => Deno.env.get(name) || fallback;

const dir = env("IOP_UP_DIR", ".iop");
const logs = `${dir}/logs`;
const port = {
  edgeHttp: env("IOP_EDGE_HTTP_PORT", "8080"),
  edgeWire: env("IOP_EDGE_WIRE_PORT", "7100"),
  cpHttp: env("IOP_CP_HTTP_PORT", "8090"),
  cpWire: env("IOP_CP_WIRE_PORT", "7200"),
  nodeHttp: env("IOP_NODE_HTTP_PORT", "9100"),
};

const certs = await ensureFleetCertificates(`${dir}/certs`, [
  { role: "cp", id: "cp-local" },
  { role: "edge", id: "edge-local" },
  { role: "node", id: "node-1" },
], { log: (line) => console.error(`certs: ${line}`) });

/** Reads the token in `file`, or makes a random one there (owner-only) when there is none. */
async function ensureToken(file: string): Promise<string> {
  try {
    const token = (await Deno.readTextFile(file)).trim();
    if (token !== "") return token;
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
  }
  const bytes = crypto.getRandomValues(new Uint8Array(24));
  const token = `iop-${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
  await Deno.mkdir(file.slice(0, file.lastIndexOf("/")), { recursive: true });
  await Deno.writeTextFile(file, `${token}\n`, { mode: 0o600 });
  return token;
}

const tokenFiles = {
  operate: `${dir}/cp-local/operate-token`,
  read: `${dir}/cp-local/read-token`,
};
const ownTokens = Deno.env.get("IOP_CP_ACCESS_TOKENS") === undefined;
const accessTokens = ownTokens
  ? `local-operator:operate:${await ensureToken(tokenFiles.operate)},` +
    `local-viewer:read:${await ensureToken(tokenFiles.read)}`
  : Deno.env.get("IOP_CP_ACCESS_TOKENS")!;

/** Settings every child gets, so that the three tiers find each other whatever the ports. */
const childEnv: Record<string, string> = {
  // The certificates of `certs` above, wherever IOP_UP_DIR put them.
  IOP_CP_WIRE_TLS_CERT: certs.certFor("cp", "cp-local"),
  IOP_CP_WIRE_TLS_KEY: certs.keyFor("cp", "cp-local"),
  IOP_CP_WIRE_TLS_CLIENT_CA: certs.ca,
  IOP_EDGE_WIRE_TLS_CERT: certs.certFor("edge", "edge-local"),
  IOP_EDGE_WIRE_TLS_KEY: certs.keyFor("edge", "edge-local"),
  IOP_EDGE_WIRE_TLS_CLIENT_CA: certs.ca,
  IOP_EDGE_CP_TLS_CA: certs.ca,
  IOP_EDGE_CP_TLS_CERT: certs.certFor("edge", "edge-local"),
  IOP_EDGE_CP_TLS_KEY: certs.keyFor("edge", "edge-local"),
  IOP_NODE_EDGE_TLS_CA: certs.ca,
  IOP_NODE_EDGE_TLS_CERT: certs.certFor("node", "node-1"),
  IOP_NODE_EDGE_TLS_KEY: certs.keyFor("node", "node-1"),
  IOP_EDGE_HTTP_PORT: port.edgeHttp,
  IOP_EDGE_WIRE_PORT: port.edgeWire,
  IOP_CP_HTTP_PORT: port.cpHttp,
  IOP_CP_WIRE_PORT: port.cpWire,
  IOP_NODE_HTTP_PORT: port.nodeHttp,
  IOP_NODE_EDGE_ADDRESS: env("IOP_NODE_EDGE_ADDRESS", `127.0.0.1:${port.edgeWire}`),
  IOP_EDGE_CP_ADDRESS: env("IOP_EDGE_CP_ADDRESS", `127.0.0.1:${port.cpWire}`),
  IOP_NODE_HISTORY_PATH: env("IOP_NODE_HISTORY_PATH", `${dir}/node-1/history.db`),
  IOP_CP_AUDIT_PATH: env("IOP_CP_AUDIT_PATH", `${dir}/cp-local/audit.sqlite`),
  IOP_CP_ACCESS_TOKENS: accessTokens,
  IOP_EDGE_A2A_STORE_PATH: env("IOP_EDGE_A2A_STORE_PATH", `${dir}/edge-local/a2a.db`),
};

interface Service {
  name: string;
  args: string[];
  /** URL that answers 200 once the service is up. */
  ready: string;
}

const interactive = Deno.stdin.isTerminal() && !Deno.args.includes("--no-console");

const services: Service[] = [
  {
    name: "cp",
    args: ["services/cp/main.ts", "--config", `${CONFIG}/cp.yaml`],
    ready: `http://127.0.0.1:${port.cpHttp}/healthz`,
  },
  {
    name: "edge",
    args: [
      "services/edge/main.ts",
      "--config",
      `${CONFIG}/edge.yaml`,
      interactive ? "--console" : "--no-console",
    ],
    ready: `http://127.0.0.1:${port.edgeHttp}/healthz`,
  },
  {
    name: "node",
    args: ["services/node/main.ts", "--config", `${CONFIG}/node.yaml`],
    ready: `http://127.0.0.1:${port.nodeHttp}/readyz`,
  },
];

await Deno.mkdir(logs, { recursive: true });
const children = new Map<string, Deno.ChildProcess>();
let stopping = false;

async function stopAll(code: number): Promise<never> {
  if (!stopping) {
    stopping = true;
    for (const [, child] of [...children].reverse()) {
      try {
        child.kill("SIGTERM");
      } catch { /* already gone */ }
    }
    await Promise.allSettled([...children.values()].map((c) => c.status));
  }
  Deno.exit(code);
}

for (const signal of ["SIGINT", "SIGTERM"] as const) {
  Deno.addSignalListener(signal, () => void stopAll(0));
}

for (const svc of services) {
  const log = await Deno.open(`${logs}/${svc.name}.log`, {
    create: true,
    write: true,
    truncate: true,
  });
  const console_ = svc.name === "edge" && interactive;
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", ...svc.args],
    env: childEnv,
    stdin: console_ ? "inherit" : "null",
    stdout: console_ ? "inherit" : "null",
    stderr: "piped",
  }).spawn();
  void copyAsItComes(child.stderr, log);
  children.set(svc.name, child);
  void child.status.then((status) => {
    if (stopping) return;
    const quit = console_ && status.code === 0;
    console.error(
      quit
        ? "Stopping IOP."
        : `${svc.name} exited with code ${status.code}; see ${logs}/${svc.name}.log`,
    );
    void stopAll(quit ? 0 : 1);
  });
  if (!await waitReady(svc.ready, 30_000)) {
    console.error(`${svc.name} did not become ready within 30 s; see ${logs}/${svc.name}.log`);
    await stopAll(1);
  }
}

console.error(`
IOP is up on its embedded default.
  Control Plane  http://127.0.0.1:${port.cpHttp}/   dashboard, /edges, /client; edge wire :${port.cpWire}
  Edge           http://127.0.0.1:${port.edgeHttp}   OpenAI /v1, Ollama /api, A2A, /api/iop/status, /metrics
                 node wire :${port.edgeWire}
  Node node-1    http://127.0.0.1:${port.nodeHttp}   /healthz, /readyz, /metrics (adapters: mock, cli)
${accessHint()}
  Wires          mutual TLS, certificates in ${certs.dir}
  Logs           ${logs}/{cp,edge,node}.log
${
  interactive
    ? "Ops console below: try /nodes, /run mock demo hello, /run cli count 5, /help, /quit.\n"
    : "Stop with Ctrl-C."
}`);

if (interactive) await Deno.stdout.write(new TextEncoder().encode("iop> "));
await new Promise(() => {});

/** Where the Control Plane's tokens are, and how to use them. */
function accessHint(): string {
  if (!ownTokens) return "  CP access      tokens from IOP_CP_ACCESS_TOKENS";
  return [
    `  CP access      operate token (local-operator, paste into the dashboard) in ${tokenFiles.operate}`,
    `                 read token (local-viewer) in ${tokenFiles.read}`,
    `                 curl -H "authorization: Bearer $(cat ${tokenFiles.read})" ` +
    `http://127.0.0.1:${port.cpHttp}/edges`,
  ].join("\n");
}

async function waitReady(url: string, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      const res = await fetch(url);
      await res.body?.cancel();
      if (res.ok) return true;
    } catch { /* not yet */ }
    await new Promise((r) => setTimeout(r, 200));
  }
  return false;
}

/**
 * Writes each piece a service prints to its log file as soon as it arrives, so `tail -f` follows
 * the service live and a hard kill of `up` loses nothing already printed.
 */
async function copyAsItComes(from: ReadableStream<Uint8Array>, to: Deno.FsFile): Promise<void> {
  try {
    for await (const chunk of from) {
      for (let off = 0; off < chunk.length;) off += await to.write(chunk.subarray(off));
    }
  } finally {
    to.close();
  }
}
