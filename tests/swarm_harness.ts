/**
 * Plumbing of the Swarm suite (`swarm_test.ts`): makes this engine a one-node swarm (refusing
 * one that is in a swarm already), deploys compose/stack.yaml with its secrets
 * (deploy/swarm_secrets.sh), waits for services to converge with progress printed, and takes
 * everything down again — stack, volumes, extra image tags, the swarm itself — also when the
 * test fails or the process is stopped (an unload handler leaves the swarm).
 * @module
 */
import { docker, ROOT, run } from "./fleet_harness.ts";
import { freePort } from "./util.ts";

/** A deployed stack on a one-node swarm. */
export interface SwarmStack {
  /** Stack name (services are `<name>_<service>`). */
  name: string;
  /** This host's name, as `{{.Node.Hostname}}` renders it. */
  hostname: string;
  edgeAUrl: string;
  edgeBUrl: string;
  cpUrl: string;
  /** The Control Plane's read token, from the secrets directory. */
  cpReadToken: string;
  /** Full service name. */
  service(name: string): string;
  /** Prints each service's tasks and last log lines (for failures). */
  dumpLogs(): Promise<void>;
}

function log(message: string): void {
  console.log(`swarm: ${message}`);
}

/** The engine's swarm state: inactive, pending, active, locked or error. */
async function swarmState(): Promise<string> {
  return (await docker(["info", "--format", "{{.Swarm.LocalNodeState}}"])).trim();
}

/**
 * Runs `body` on a fresh one-node swarm and leaves it afterwards, whatever happens. Refuses an
 * engine that is already part of a swarm: leaving it would break someone's cluster.
 */
export async function withSwarm(body: () => Promise<void>): Promise<void> {
  const state = await swarmState();
  if (state !== "inactive") {
    throw new Error(
      `The Swarm suite needs an engine outside any swarm, but this one is '${state}' ` +
        "(docker info: Swarm). It will not leave a swarm it did not create: run " +
        "`docker swarm leave --force` yourself if that swarm is disposable, then run again.",
    );
  }
  await docker(["swarm", "init", "--advertise-addr", "127.0.0.1"], 60_000);
  log("this engine is now a one-node swarm");
  // A test process that ends half-way (an uncaught error, Ctrl-C, a kill) must not leave the
  // swarm behind: leaving it also removes the stack's services and containers.
  const leave = () => {
    new Deno.Command("docker", {
      args: ["swarm", "leave", "--force"],
      stdout: "null",
      stderr: "null",
    }).outputSync();
  };
  const onSignal = () => {
    console.error("swarm: stopped by a signal; leaving the swarm");
    leave();
    Deno.exit(130);
  };
  const signals = ["SIGINT", "SIGTERM"] as const;
  globalThis.addEventListener("unload", leave);
  for (const s of signals) Deno.addSignalListener(s, onSignal);
  try {
    await body();
  } finally {
    const left = await run("docker", ["swarm", "leave", "--force"], 60_000);
    globalThis.removeEventListener("unload", leave);
    for (const s of signals) Deno.removeSignalListener(s, onSignal);
    if (left.code !== 0) console.error(`swarm: docker swarm leave failed: ${left.stderr.trim()}`);
    else log("left the swarm");
  }
}

/** The ids of `docker service ls` rows, with `current/desired` replicas. */
async function replicas(stack: string): Promise<{ name: string; running: number; want: number }[]> {
  const out = await docker([
    "service",
    "ls",
    "--filter",
    `label=com.docker.stack.namespace=${stack}`,
    "--format",
    "{{.Name}} {{.Replicas}}",
  ]);
  return out.split("\n").filter((l) => l.trim() !== "").map((line) => {
    const [name, counts] = line.split(" ");
    const [running, want] = (counts ?? "0/0").split("/").map((n) => parseInt(n, 10));
    return { name: name!, running: running ?? 0, want: want ?? 0 };
  });
}

/** Waits until every service of the stack runs all its replicas, printing progress. */
export async function untilConverged(stack: string, timeoutMs: number): Promise<void> {
  const since = performance.now();
  let lastPrint = 0;
  while (true) {
    const rows = await replicas(stack);
    const done = rows.length > 0 && rows.every((r) => r.want > 0 && r.running === r.want);
    const elapsed = performance.now() - since;
    if (done) {
      log(`every service converged in ${(elapsed / 1000).toFixed(1)} s`);
      return;
    }
    if (elapsed - lastPrint >= 5_000) {
      lastPrint = elapsed;
      const view = rows.map((r) => `${r.name.slice(stack.length + 1)} ${r.running}/${r.want}`);
      log(`waiting for services (${Math.round(elapsed / 1000)} s): ${view.join(", ")}`);
    }
    if (elapsed > timeoutMs) throw new Error(`stack ${stack} did not converge in ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** Deploys compose/stack.yaml as `name` on free ports with fresh secrets; runs `body`; removes it. */
export async function withStack(
  name: string,
  body: (stack: SwarmStack) => Promise<void>,
): Promise<void> {
  const hostname = (await docker(["info", "--format", "{{.Name}}"])).trim();
  const self = (await docker(["node", "ls", "--filter", "role=manager", "-q"])).trim();
  await docker([
    "node",
    "update",
    ...["iop.role=cp", "iop.edge-a=true", "iop.edge-b=true", "iop.gpu=true", "iop.cli=true"]
      .flatMap((l) => ["--label-add", l]),
    self,
  ]);
  const dir = await Deno.makeTempDir({ prefix: "iop_swarm_secrets_" });
  const ports = { a: freePort(), b: freePort(), cp: freePort() };
  const env = {
    IOP_SWARM_EDGE_A_PORT: String(ports.a),
    IOP_SWARM_EDGE_B_PORT: String(ports.b),
    IOP_SWARM_CP_PORT: String(ports.cp),
    IOP_IMAGE_TAG: Deno.env.get("IOP_IMAGE_TAG") ?? "dev",
  };
  const stack: SwarmStack = {
    name,
    hostname,
    edgeAUrl: `http://127.0.0.1:${ports.a}`,
    edgeBUrl: `http://127.0.0.1:${ports.b}`,
    cpUrl: `http://127.0.0.1:${ports.cp}`,
    cpReadToken: "",
    service: (s) => `${name}_${s}`,
    dumpLogs: async () => {
      const ps = await run("docker", ["stack", "ps", name, "--no-trunc"]);
      console.log(`---- swarm tasks (${name}) ----\n${ps.stdout}${ps.stderr}`);
      for (const r of await replicas(name).catch(() => [])) {
        const logs = await run("docker", ["service", "logs", "--tail", "30", r.name]);
        console.log(`---- ${r.name} ----\n${logs.stdout}${logs.stderr}`);
      }
    },
  };
  try {
    const secrets = await run("bash", ["deploy/swarm_secrets.sh", "--dir", dir], 120_000);
    if (secrets.code !== 0) {
      throw new Error(`deploy/swarm_secrets.sh failed (${secrets.code}): ${secrets.stderr}`);
    }
    log(
      `secrets created (${
        secrets.stdout.split("\n").filter((l) => / created /.test(l)).length
      } files)`,
    );
    stack.cpReadToken = (await Deno.readTextFile(`${dir}/tokens/iop-cp-read-token`)).trim();
    const deployed = await new Deno.Command("docker", {
      args: ["stack", "deploy", "-c", `${ROOT}/compose/stack.yaml`, name],
      cwd: ROOT,
      env,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).output();
    if (deployed.code !== 0) {
      throw new Error(`docker stack deploy failed: ${new TextDecoder().decode(deployed.stderr)}`);
    }
    log(`stack ${name} deployed (edge-a :${ports.a}, edge-b :${ports.b}, cp :${ports.cp})`);
    await body(stack);
  } catch (err) {
    await stack.dumpLogs().catch(() => {});
    throw err;
  } finally {
    await removeStack(name);
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

/** Removes the stack, waits for its containers to go, then removes its volumes. */
async function removeStack(name: string): Promise<void> {
  await run("docker", ["stack", "rm", name], 60_000);
  const label = `label=com.docker.stack.namespace=${name}`;
  const deadline = Date.now() + 90_000;
  while (Date.now() < deadline) {
    const left = await run("docker", ["ps", "-aq", "--filter", label]);
    if (left.stdout.trim() === "") break;
    await new Promise((r) => setTimeout(r, 500));
  }
  const volumes = await run("docker", ["volume", "ls", "-q", "--filter", label]);
  const names = volumes.stdout.split("\n").filter((v) => v.trim() !== "");
  // Networks go with the stack a moment later; volumes may still be in use for a second.
  for (let i = 0; i < 20 && names.length > 0; i++) {
    const rm = await run("docker", ["volume", "rm", ...names]);
    if (rm.code === 0) break;
    await new Promise((r) => setTimeout(r, 500));
  }
  log(`stack ${name} removed`);
}
