/**
 * A config reload reaches connected nodes without a reconnect: over the fixture's real TCP+TLS
 * node wire, the Edge pushes the changed configuration as a new version, the Node swaps its
 * adapters (runs in flight finish on the old ones) and acknowledges the version, and routing and
 * status follow at once. A reload also attaches and detaches a real Control Plane.
 * @module
 */
import * as assert from "node:assert/strict";
import { startControlPlane } from "../services/cp/control_plane.ts";
import { DomainAgents } from "../services/edge/agents/domain_agents.ts";
import { startCpLink } from "../services/edge/cp_link/cp_link.ts";
import type { RunHandle } from "../services/edge/ports.ts";
import type { EdgeService } from "../services/edge/service.ts";
import { IopError } from "../shared/errors.ts";
import { type RunEvent, runInput } from "../shared/run.ts";
import { testCpConfig, testEdgeCredential } from "./cp_harness.ts";
import { quiet, type RawConfig, startEdge, startNode } from "./stack.ts";
import { dialTlsConfig } from "./tls_fixture.ts";
import { until } from "./util.ts";
import { collect } from "./model_path_helpers.ts";

/** One node with a mock adapter of `tokens` tokens and a CLI adapter with `profiles`. */
function edgeConfig(tokens: number, profiles: string[], tokenDelayMs = 1): RawConfig {
  const scripts: Record<string, string> = {
    echo: 'echo "$1"',
    gone: 'echo "still here"',
    slow: "echo started; sleep 0.6; echo finished",
  };
  return {
    wire: { host: "127.0.0.1", port: 0, heartbeat_interval_ms: 500 },
    http: { host: "127.0.0.1", port: 0 },
    nodes: [{
      id: "n1",
      token: "n1-token",
      adapters: [
        { name: "mock", kind: "mock", tokens, token_delay_ms: tokenDelayMs },
        {
          name: "cli",
          kind: "cli",
          profiles: profiles.map((name) => ({
            name,
            command: "sh",
            args: ["-c", scripts[name]!, name, "{prompt}"],
            timeout_ms: 10_000,
          })),
        },
      ],
    }],
  };
}

/** Writes the config file a reload reads (JSON is YAML). */
async function writeConfig(file: string, raw: RawConfig): Promise<void> {
  await Deno.writeTextFile(file, JSON.stringify(raw, null, 2));
}

/** The run's output deltas and its terminal event (failing, not hanging, past 20 s). */
async function outcome(run: RunHandle): Promise<{ deltas: string[]; terminal: RunEvent }> {
  const { events, terminal } = await collect(run, () => {}, 20_000);
  return { deltas: events.flatMap((e) => e.type === "output" ? [e.text] : []), terminal };
}

async function reload(service: EdgeService): Promise<string> {
  const result = await service.reload();
  assert.ok(result.ok, result.detail);
  return result.detail;
}

async function tempFile(): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "iop_live_reload_" });
  return `${dir}/edge.yaml`;
}

Deno.test("a reload pushes a live node its new config: the next run uses it, without a reconnect", async () => {
  const file = await tempFile();
  await writeConfig(file, edgeConfig(3, ["echo"]));
  await using edge = await startEdge({ config: edgeConfig(3, ["echo"]), configFile: file });
  await using _node = await startNode(edge);
  const before = edge.service.sessions()[0]!;
  assert.equal(before.configVersion, 1);
  const first = await outcome(
    await edge.service.submitRun(runInput({ adapter: "mock", target: "demo", prompt: "a" })),
  );
  assert.equal(first.deltas.length, 3);

  const detail = await reload(edge.service);
  assert.match(detail, /as config v2 \(connected nodes reconfigured: 0, dropped: 0\)$/);
  assert.equal(before.configVersion, 1, "an unchanged record is not pushed");

  await writeConfig(file, edgeConfig(7, ["echo"]));
  assert.match(await reload(edge.service), /as config v3 \(connected nodes reconfigured: 1/);
  await until("the node to acknowledge v3", () => before.configVersion === 3);

  const after = edge.service.sessions()[0]!;
  assert.equal(after, before, "the same session: no reconnect");
  assert.equal(after.connectedAtMs, before.connectedAtMs);
  const second = await outcome(
    await edge.service.submitRun(runInput({ adapter: "mock", target: "demo", prompt: "a" })),
  );
  assert.equal(second.deltas.length, 7);
  assert.equal(second.terminal.type, "completed");
  const status = edge.service.status().nodes[0]!;
  assert.equal(status.configVersion, 3);
  assert.equal(status.wantedConfigVersion, 3);
  await Deno.remove(file.slice(0, file.lastIndexOf("/")), { recursive: true });
});

Deno.test("runs started before a reload finish on the config they started with", async () => {
  const file = await tempFile();
  const old = edgeConfig(6, ["echo", "slow"], 60);
  await writeConfig(file, old);
  await using edge = await startEdge({ config: old, configFile: file });
  await using _node = await startNode(edge);
  const session = edge.service.sessions()[0]!;
  const mockRun = await edge.service.submitRun(
    runInput({ adapter: "mock", target: "demo", prompt: "a" }),
  );
  const cliRun = await edge.service.submitRun(
    runInput({ adapter: "cli", target: "slow", prompt: "x" }),
  );
  const mockDone = outcome(mockRun);
  const cliDone = outcome(cliRun);

  // Both adapters change: the old instances must outlive the swap until their runs end.
  await writeConfig(file, edgeConfig(2, ["echo"], 1));
  await reload(edge.service);
  await until("the node to acknowledge v2", () => session.configVersion === 2);

  const mock = await mockDone;
  assert.equal(mock.terminal.type, "completed");
  assert.equal(mock.deltas.length, 6, "the run kept the old mock settings");
  const cli = await cliDone;
  assert.equal(cli.terminal.type, "completed", JSON.stringify(cli.terminal));
  assert.match(cli.deltas.join(""), /started\s+finished/);
  const next = await outcome(
    await edge.service.submitRun(runInput({ adapter: "mock", target: "demo", prompt: "a" })),
  );
  assert.equal(next.deltas.length, 2);
  await Deno.remove(file.slice(0, file.lastIndexOf("/")), { recursive: true });
});

Deno.test("a CLI profile removed by a reload is refused by the Edge and by the node", async () => {
  const file = await tempFile();
  await writeConfig(file, edgeConfig(3, ["echo", "gone"]));
  await using edge = await startEdge({
    config: edgeConfig(3, ["echo", "gone"]),
    configFile: file,
    http: true,
  });
  await using _node = await startNode(edge);
  const session = edge.service.sessions()[0]!;
  const gone = runInput({ adapter: "cli", target: "gone", prompt: "x" });
  assert.equal((await outcome(await edge.service.submitRun(gone))).terminal.type, "completed");

  await writeConfig(file, edgeConfig(3, ["echo"]));
  await reload(edge.service);
  // The Edge refuses at once, before the node has even acknowledged.
  await assert.rejects(
    // It may throw at once or reject; either way, before anything reaches the node.
    Promise.resolve().then(() => edge.service.submitRun(gone)),
    (err: unknown) =>
      err instanceof IopError && err.code === "NOT_FOUND" &&
      err.message === "No node offers adapter 'cli' with target 'gone'",
  );
  await until("the node to acknowledge v2", () => session.configVersion === 2);
  // Sent past the Edge's routing, the node's own registry no longer has it either.
  const direct = await outcome(await edge.service.dispatch(session, gone));
  assert.equal(direct.terminal.type, "failed");
  assert.match(
    (direct.terminal as RunEvent & { message: string }).message,
    /Cannot run target 'gone' as CLI adapter 'cli' has no such profile/,
  );
  const echo = await outcome(
    await edge.service.submitRun(runInput({ adapter: "cli", target: "echo", prompt: "hi" })),
  );
  assert.equal(echo.deltas.join("").trim(), "hi");

  const res = await fetch(`${edge.url}/api/iop/status`);
  const status = await res.json() as {
    nodes: { id: string; configVersion: number; wantedConfigVersion: number }[];
  };
  assert.deepEqual(
    status.nodes.map((n) => [n.id, n.configVersion, n.wantedConfigVersion]),
    [["n1", 2, 2]],
  );
  await Deno.remove(file.slice(0, file.lastIndexOf("/")), { recursive: true });
});

Deno.test("a reload attaches an Edge started without a Control Plane, and another detaches it", async () => {
  await using cp = await startControlPlane(await testCpConfig(":memory:"), {
    logger: quiet("cp"),
  });
  const controlPlane = (address: string) => ({
    address,
    credential: testEdgeCredential("edge-a"),
    reconnect_max_ms: 300,
    tls: tls,
  });
  const tls = await dialTlsConfig("edge");
  const raw = (address: string) => ({
    ...edgeConfig(3, ["echo"]),
    edge: { id: "edge-a" },
    control_plane: controlPlane(address),
  });
  const file = await tempFile();
  await writeConfig(file, raw(""));
  await using edge = await startEdge({ config: raw(""), configFile: file });
  const link = startCpLink({
    service: edge.service,
    agents: new DomainAgents(edge.service),
    version: "test",
    logger: quiet("edge.cp_link"),
    backoffInitialMs: 50,
  });
  try {
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(link.attached, false, "no address: the link idles");
    assert.equal(cp.registry.link("edge-a"), undefined);

    await writeConfig(file, raw(cp.wireAddress));
    await reload(edge.service);
    await until("the edge to attach", () => link.attached && cp.registry.link("edge-a"));

    await writeConfig(file, raw(""));
    await reload(edge.service);
    await until("the edge to detach", () => !link.attached && !cp.registry.link("edge-a"));
  } finally {
    await link.stop();
    await Deno.remove(file.slice(0, file.lastIndexOf("/")), { recursive: true });
  }
});
