/**
 * Plumbing of the container fleet suite (`fleet_test.ts`): checks the Docker engine and compose
 * v2, builds the tier images when they are missing or older than their sources, starts
 * compose/fleet.yaml with testcontainers on free loopback ports, and drives containers and
 * networks with the docker CLI. Every wait is a poll against a deadline.
 * @module
 */
import type { StartedDockerComposeEnvironment } from "testcontainers";
import { freePort } from "./util.ts";

/** The repository root (this file lives in tests/). */
export const ROOT = new URL("..", import.meta.url).pathname.replace(/\/$/, "");

/** Image tag the fleet runs, as compose/fleet.yaml reads `IOP_IMAGE_TAG`. */
export const IMAGE_TAG = Deno.env.get("IOP_IMAGE_TAG") ?? "dev";

/** The images compose/fleet.yaml runs: the three tiers and Prometheus. */
const TIERS = ["cp", "edge", "node", "prometheus"] as const;

/** The result of one command. */
export interface CommandResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a command to completion and captures its output; a missing binary gives code 127. */
export async function run(cmd: string, args: string[], timeoutMs = 60_000): Promise<CommandResult> {
  try {
    const out = await new Deno.Command(cmd, {
      args,
      cwd: ROOT,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      signal: AbortSignal.timeout(timeoutMs),
    }).output();
    const dec = new TextDecoder();
    return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      return { code: 127, stdout: "", stderr: `${cmd}: not found` };
    }
    throw err;
  }
}

/** Runs the docker CLI and returns its stdout; throws with stderr when it fails. */
export async function docker(args: string[], timeoutMs = 60_000): Promise<string> {
  const r = await run("docker", args, timeoutMs);
  if (r.code !== 0) {
    throw new Error(`docker ${args.join(" ")} failed (${r.code}): ${r.stderr.trim()}`);
  }
  return r.stdout.trim();
}

/** Why the fleet cannot run here, or undefined when the engine and compose v2 answer. */
export async function dockerProblem(): Promise<string | undefined> {
  const install = "install and start it with `sudo bash deploy/install_docker.sh` " +
    "(Docker engine + compose v2; see deploy/README.md)";
  const info = await run("docker", ["info", "--format", "{{.ServerVersion}}"], 20_000);
  if (info.code === 127) return `the docker CLI is not installed: ${install}`;
  if (info.code !== 0) return `no Docker engine answers (${info.stderr.trim()}): ${install}`;
  const compose = await run("docker", ["compose", "version", "--short"], 20_000);
  if (compose.code !== 0) return `docker compose v2 is missing: ${install}`;
  return undefined;
}

async function newestSource(paths: string[]): Promise<number> {
  let newest = 0;
  const visit = async (path: string): Promise<void> => {
    let stat;
    try {
      stat = await Deno.stat(path);
    } catch {
      return;
    }
    if (stat.isDirectory) {
      for await (const entry of Deno.readDir(path)) await visit(`${path}/${entry.name}`);
    } else if (!path.endsWith("_test.ts")) {
      newest = Math.max(newest, stat.mtime?.getTime() ?? 0);
    }
  };
  for (const p of paths) await visit(`${ROOT}/${p}`);
  return newest;
}

/**
 * Builds the images the fleet needs with deploy/build_images.sh when they are missing or older
 * than the code they carry, so the suite never tests stale code.
 */
export async function ensureImages(): Promise<void> {
  const rebuild: string[] = [];
  for (const tier of TIERS) {
    const image = `iop/${tier}:${IMAGE_TAG}`;
    const inspect = await run("docker", ["image", "inspect", "--format", "{{.Created}}", image]);
    if (inspect.code !== 0) {
      console.log(`fleet: image ${image} is missing`);
      rebuild.push(tier);
      continue;
    }
    const created = Date.parse(inspect.stdout.trim());
    const sources = tier === "prometheus"
      ? ["deploy/prometheus/Dockerfile"]
      : ["deno.json", "deno.lock", "shared", "proto/gen", `services/${tier}`];
    // The cp image also carries the certificate tool.
    if (tier === "cp") sources.push("deploy/certs.ts", "deploy/fleet_certs.ts");
    if (await newestSource(sources) > created) {
      console.log(`fleet: image ${image} is older than its sources`);
      rebuild.push(tier);
    }
  }
  if (rebuild.length === 0) return;
  console.log(
    `fleet: building ${rebuild.join(", ")} with deploy/build_images.sh (about 15 s each)`,
  );
  const started = performance.now();
  // Its progress lines go straight to the suite's output: a build takes a while.
  const build = await new Deno.Command("bash", {
    args: ["deploy/build_images.sh", "--tag", IMAGE_TAG, ...rebuild],
    cwd: ROOT,
    stdin: "null",
    stdout: "inherit",
    stderr: "inherit",
    signal: AbortSignal.timeout(600_000),
  }).output();
  if (build.code !== 0) throw new Error(`deploy/build_images.sh failed (${build.code}), see above`);
  console.log(`fleet: images built in ${Math.round((performance.now() - started) / 1000)} s`);
}

/**
 * The read token of the fleet's Control Plane (`compose/config/cp.yaml`, `access.tokens`,
 * named fleet-viewer); sample only.
 */
export const FLEET_CP_READ_TOKEN = "fleet-read-token";

/** Headers that let a request read the fleet Control Plane's data. */
export const FLEET_CP_READ: Readonly<Record<string, string>> = {
  authorization: `Bearer ${FLEET_CP_READ_TOKEN}`,
};

/** GETs JSON with a short timeout; throws on a non-2xx answer. */
export async function getJson<T>(url: string, headers: HeadersInit = {}): Promise<T> {
  const res = await fetch(url, { signal: AbortSignal.timeout(3_000), headers });
  if (!res.ok) {
    await res.body?.cancel();
    throw new Error(`GET ${url} answered ${res.status}`);
  }
  return await res.json() as T;
}

/** The started fleet: published URLs and handles on its containers and networks. */
export interface Fleet {
  project: string;
  edgeAUrl: string;
  edgeBUrl: string;
  /** edge-a's standby (the same group config; serves node-a1 and node-a2 while edge-a is gone). */
  edgeAStandbyUrl: string;
  cpUrl: string;
  /** Prometheus' UI and HTTP API. */
  prometheusUrl: string;
  /** Container id of a compose service (one replica each). */
  containerId(service: string): string;
  /** Full name of a compose network (`<project>_<name>`). */
  network(name: string): string;
  /** Prints the last log lines of every service (for failures). */
  dumpLogs(): Promise<void>;
  /** Removes containers, networks and volumes; safe to call after a failed start. */
  down(): Promise<void>;
}

/** Starts compose/fleet.yaml under a fresh project name on free loopback ports. */
export async function startFleet(): Promise<Fleet> {
  Deno.env.set("TESTCONTAINERS_RYUK_DISABLED", "true");
  // Imported only now: testcontainers reads its environment when first used.
  const { DockerComposeEnvironment, Wait } = await import("testcontainers");
  const project = `iop-fleet-test-${crypto.randomUUID().slice(0, 8)}`;
  const ports = {
    a: freePort(),
    aStandby: freePort(),
    b: freePort(),
    cp: freePort(),
    prometheus: freePort(),
  };
  const composeArgs = ["compose", "-p", project, "-f", `${ROOT}/compose/fleet.yaml`];
  let env: StartedDockerComposeEnvironment | undefined;
  const down = async () => {
    if (env) {
      await env.down({ removeVolumes: true, timeout: 2_000 }).catch((err) =>
        console.error(`fleet: testcontainers down failed: ${err}`)
      );
    }
    // Also when `up` failed half-way and left no handle: compose down by project name.
    await run("docker", [...composeArgs, "down", "--volumes", "--timeout", "2"], 120_000);
  };
  const dumpLogs = async () => {
    const logs = await run("docker", [...composeArgs, "logs", "--no-color", "--tail", "40"]);
    console.log(`---- fleet logs (${project}) ----\n${logs.stdout}${logs.stderr}`);
  };
  // Containers take tens of seconds to turn healthy; say that the suite is still waiting.
  const upSince = performance.now();
  const waiting = setInterval(() => {
    const s = Math.round((performance.now() - upSince) / 1000);
    console.log(`fleet: waiting for ${project}'s containers to be healthy (${s} s)`);
  }, 10_000);
  try {
    env = await new DockerComposeEnvironment(`${ROOT}/compose`, "fleet.yaml")
      .withProjectName(project)
      .withEnvironment({
        IOP_IMAGE_TAG: IMAGE_TAG,
        IOP_FLEET_EDGE_A_PORT: String(ports.a),
        IOP_FLEET_EDGE_A_STANDBY_PORT: String(ports.aStandby),
        IOP_FLEET_EDGE_B_PORT: String(ports.b),
        IOP_FLEET_CP_PORT: String(ports.cp),
        IOP_FLEET_PROMETHEUS_PORT: String(ports.prometheus),
      })
      .withDefaultWaitStrategy(Wait.forHealthCheck())
      // The certificate maker runs once and exits before anything else starts.
      .withWaitStrategy("certs-1", Wait.forOneShotStartup())
      .withStartupTimeout(120_000)
      .up();
  } catch (err) {
    await dumpLogs();
    await down();
    throw err;
  } finally {
    clearInterval(waiting);
  }
  const started = env;
  return {
    project,
    edgeAUrl: `http://127.0.0.1:${ports.a}`,
    edgeBUrl: `http://127.0.0.1:${ports.b}`,
    edgeAStandbyUrl: `http://127.0.0.1:${ports.aStandby}`,
    cpUrl: `http://127.0.0.1:${ports.cp}`,
    prometheusUrl: `http://127.0.0.1:${ports.prometheus}`,
    containerId: (service) => started.getContainer(`${service}-1`).getId(),
    network: (name) => `${project}_${name}`,
    dumpLogs,
    down,
  };
}
