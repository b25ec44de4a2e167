/**
 * `deno task up`: starts the embedded default stack — Control Plane, one Edge and one Node
 * (mock adapter + sample CLI profiles) — on the default ports, waits until the node has
 * registered, prints where everything listens, and hands the terminal to the Edge's ops console.
 * Service logs go to `.iop/logs/`. `/quit` (or Ctrl-C) stops the whole stack.
 * @module
 */

const CONFIG = "deploy/config";
const LOGS = ".iop/logs";

interface Service {
  name: string;
  args: string[];
  /** URL that answers 200 once the service is up. */
  ready: string;
}

const interactive = Deno.stdin.isTerminal() && !Deno.args.includes("--no-console");
const hasCp = await exists("services/cp/main.ts") && await exists(`${CONFIG}/cp.yaml`);

const services: Service[] = [
  ...(hasCp
    ? [{
      name: "cp",
      args: ["services/cp/main.ts", "--config", `${CONFIG}/cp.yaml`],
      ready: "http://127.0.0.1:8090/healthz",
    }]
    : []),
  {
    name: "edge",
    args: [
      "services/edge/main.ts",
      "--config",
      `${CONFIG}/edge.yaml`,
      interactive ? "--console" : "--no-console",
    ],
    ready: "http://127.0.0.1:8080/healthz",
  },
  {
    name: "node",
    args: ["services/node/main.ts", "--config", `${CONFIG}/node.yaml`],
    ready: "http://127.0.0.1:9100/readyz",
  },
];

await Deno.mkdir(LOGS, { recursive: true });
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
  const log = await Deno.open(`${LOGS}/${svc.name}.log`, {
    create: true,
    write: true,
    truncate: true,
  });
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", ...svc.args],
    stdin: svc.name === "edge" && interactive ? "inherit" : "null",
    stdout: svc.name === "edge" && interactive ? "inherit" : "null",
    stderr: "piped",
  }).spawn();
  void child.stderr.pipeTo(log.writable);
  children.set(svc.name, child);
  void child.status.then((status) => {
    if (stopping) return;
    const quit = svc.name === "edge" && interactive && status.code === 0;
    console.error(
      quit
        ? "Stopping IOP."
        : `${svc.name} exited with code ${status.code}; see ${LOGS}/${svc.name}.log`,
    );
    void stopAll(quit ? 0 : 1);
  });
  if (!await waitReady(svc.ready, 30_000)) {
    console.error(`${svc.name} did not become ready within 30 s; see ${LOGS}/${svc.name}.log`);
    await stopAll(1);
  }
}

console.error(`
IOP is up on its embedded default.
${
  hasCp
    ? "  Control Plane  http://127.0.0.1:8090/  dashboard, /edges, /client; edge wire 127.0.0.1:7200\n"
    : ""
}\
  Edge           http://127.0.0.1:8080   OpenAI /v1, Ollama /api, A2A, /api/iop/status, /metrics
                 node wire 127.0.0.1:7100
  Node node-1    http://127.0.0.1:9100   /healthz, /readyz, /metrics (adapters: mock, cli)
  Logs           ${LOGS}/{${services.map((s) => s.name).join(",")}}.log
${
  interactive
    ? "Ops console below: try /nodes, /run mock demo hello, /run cli count 5, /help, /quit.\n"
    : "Stop with Ctrl-C."
}`);

if (interactive) await Deno.stdout.write(new TextEncoder().encode("iop> "));
await new Promise(() => {});

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

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch {
    return false;
  }
}
