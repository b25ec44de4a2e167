/**
 * The fleet on Docker Swarm (compose/stack.yaml) on a one-node swarm of this engine: secrets from
 * deploy/swarm_secrets.sh, nodes enrolled by host label, OpenAI and A2A through both edges, a
 * rolling update of the GPU node service and of edge-a under steady load (short requests in a
 * loop plus a stream spanning the node update) with every request counted, and a scaled CLI node
 * service whose new replica enrolls and serves. Needs a Docker engine (like fleet_test.ts: fails
 * saying what to install without one, IOP_SKIP_FLEET=1 skips it) that is not in a swarm.
 * @module
 */
import assert from "node:assert/strict";
import { docker, dockerProblem, ensureImages, getJson } from "./fleet_harness.ts";
import { type SwarmStack, untilConverged, withStack, withSwarm } from "./swarm_harness.ts";
import { until } from "./util.ts";

const skip = Deno.env.get("IOP_SKIP_FLEET") === "1";
if (skip) console.log("swarm suite ignored: IOP_SKIP_FLEET=1 was set explicitly");

const TAG = Deno.env.get("IOP_IMAGE_TAG") ?? "dev";
/** The same images under another tag: `service update --image` then replaces every task. */
const NEXT_TAG = `${TAG}-swarm-next`;

interface EdgeNodeStatus {
  id: string;
  connected: boolean;
  draining?: boolean;
}

function log(message: string): void {
  console.log(`swarm: ${message}`);
}

async function connectedNodes(edgeUrl: string): Promise<string[]> {
  const status = await getJson<{ nodes: EdgeNodeStatus[] }>(`${edgeUrl}/api/iop/status`);
  return status.nodes.filter((n) => n.connected && !n.draining).map((n) => n.id);
}

function untilNode(edgeUrl: string, nodeId: string, timeoutMs = 90_000) {
  return until(
    `${nodeId} connected to ${edgeUrl}`,
    async () => (await connectedNodes(edgeUrl)).includes(nodeId) || undefined,
    timeoutMs,
    250,
  );
}

function describe(u: LoadReport["unanswered"]): string {
  return `unanswered and retried: ${u.refused} refused, ${u.closed} closed without an answer`;
}

/** One chat completion with fetch (no client retries); throws on anything but a full answer. */
async function chat(edgeUrl: string, content: string, metadata?: Record<string, string>) {
  const res = await fetch(`${edgeUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      model: "chat",
      messages: [{ role: "user", content }],
      ...(metadata ? { metadata } : {}),
    }),
    signal: AbortSignal.timeout(60_000),
  });
  const text = await res.text();
  if (res.status !== 200) throw new HttpFailure(`${res.status} ${text.slice(0, 300)}`);
  const body = JSON.parse(text);
  const answer: string = body.choices?.[0]?.message?.content ?? "";
  if (body.choices?.[0]?.finish_reason !== "stop" || !answer.includes(content)) {
    throw new HttpFailure(`incomplete answer: ${text.slice(0, 300)}`);
  }
  return answer;
}

/** A request the edge answered with an error or a broken body. */
class HttpFailure extends Error {}

/**
 * Why a request got no HTTP answer at all (fetch rejected before any response): `refused` when
 * nothing listened on the port, `closed` when a connection was accepted and closed without an
 * answer (Docker's port proxy for loopback clients accepts while no edge listens behind it);
 * undefined for an answered request that failed.
 */
function unanswered(err: unknown): "refused" | "closed" | undefined {
  if (err instanceof HttpFailure || !(err instanceof TypeError)) return undefined;
  const cause = err.cause instanceof Error ? err.cause.message : String(err.cause ?? "");
  return /Connection refused|ECONNREFUSED/i.test(`${err.message} ${cause}`) ? "refused" : "closed";
}

/** What a load generator saw. */
interface LoadReport {
  sent: number;
  ok: number;
  failed: string[];
  /** Attempts that got no HTTP answer (no edge listened; nothing was served), then retried. */
  unanswered: { refused: number; closed: number };
}

/**
 * `clients` loops of short requests until stopped. An attempt that got no HTTP answer at all is
 * retried after 200 ms, as a client of an edge replaced on its host must (for a moment no edge
 * process listens on the port, so nothing was served); an HTTP error or a broken answer counts
 * as failed.
 */
function load(edgeUrl: string, clients: number) {
  const report: LoadReport = { sent: 0, ok: 0, failed: [], unanswered: { refused: 0, closed: 0 } };
  let stopped = false;
  const loops = Array.from({ length: clients }, async (_, c) => {
    for (let i = 0; !stopped; i++) {
      report.sent++;
      const content = `c${c} r${i}`;
      for (let attempt = 0;; attempt++) {
        try {
          await chat(edgeUrl, content, { "mock.tokens": "4", "mock.token_delay_ms": "20" });
          report.ok++;
          break;
        } catch (err) {
          const why = unanswered(err);
          if (why === undefined || attempt >= 150) {
            report.failed.push(`${content}: ${err instanceof Error ? err.message : err}`);
            break;
          }
          report.unanswered[why]++;
          await new Promise((r) => setTimeout(r, 200));
        }
      }
    }
  });
  return {
    report,
    stop: async () => {
      stopped = true;
      await Promise.all(loops);
      return report;
    },
  };
}

/** Streams one chat completion to its end; returns the text and the finish reason. */
async function stream(edgeUrl: string, tokens: number, delayMs: number) {
  const res = await fetch(`${edgeUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      model: "chat",
      stream: true,
      messages: [{ role: "user", content: "the long one" }],
      metadata: { "mock.tokens": String(tokens), "mock.token_delay_ms": String(delayMs) },
    }),
  });
  assert.equal(res.status, 200, await res.clone().text());
  const raw = await res.text();
  let text = "";
  let finish: string | undefined;
  for (const line of raw.split("\n")) {
    if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
    const data = JSON.parse(line.slice(6));
    if (data.error) throw new Error(`the stream ended with an error: ${line}`);
    text += data.choices?.[0]?.delta?.content ?? "";
    finish = data.choices?.[0]?.finish_reason ?? finish;
  }
  return { text, finish };
}

/** A2A `message/send` to `agent`; returns the completed task's text. */
async function a2aSend(edgeUrl: string, agent: string, text: string): Promise<string> {
  const res = await fetch(`${edgeUrl}/a2a/${agent}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "message/send",
      params: {
        message: {
          kind: "message",
          messageId: crypto.randomUUID(),
          role: "user",
          parts: [{ kind: "text", text }],
        },
      },
    }),
  });
  const json = await res.json();
  assert.equal(json.result?.status?.state, "completed", JSON.stringify(json));
  return json.result.artifacts.flatMap((a: { parts: { text?: string }[] }) => a.parts)
    .map((p: { text?: string }) => p.text ?? "").join("");
}

/** `docker service update --image` to the next tag, waiting until it converged. */
async function rollTo(stack: SwarmStack, service: string, image: string): Promise<void> {
  const started = performance.now();
  log(`docker service update --image ${image} ${stack.service(service)}`);
  const progress = setInterval(
    () =>
      log(`  update of ${service} running (${Math.round((performance.now() - started) / 1000)} s)`),
    10_000,
  );
  try {
    await docker(
      ["service", "update", "--image", image, "--detach=false", "--quiet", stack.service(service)],
      180_000,
    );
  } finally {
    clearInterval(progress);
  }
  // The CLI returns once the tasks converged; the update's own state follows a moment later.
  const state = await until(
    `the update of ${service} to end`,
    async () => {
      const s = await docker([
        "service",
        "inspect",
        "--format",
        "{{if .UpdateStatus}}{{.UpdateStatus.State}}{{end}}",
        stack.service(service),
      ]);
      return s === "updating" ? undefined : s;
    },
    60_000,
    250,
  );
  assert.equal(state, "completed", `the update of ${service} ended '${state}'`);
  log(`  ${service} updated in ${((performance.now() - started) / 1000).toFixed(1)} s`);
}

Deno.test({
  name: "the fleet on a one-node Docker Swarm: secrets, enrollment by host label, OpenAI and " +
    "A2A through both edges, rolling node and edge updates under load with no failed request, " +
    "a scaled node service",
  ignore: skip,
  fn: async (t) => {
    const problem = await dockerProblem();
    if (problem) {
      throw new Error(
        `The swarm suite needs Docker: ${problem}. Set IOP_SKIP_FLEET=1 only to skip it on purpose.`,
      );
    }
    await ensureImages();
    for (const tier of ["edge", "node"]) {
      await docker(["tag", `iop/${tier}:${TAG}`, `iop/${tier}:${NEXT_TAG}`]);
    }
    const started = performance.now();
    try {
      await withSwarm(() =>
        withStack(`iop-swarm-${crypto.randomUUID().slice(0, 6)}`, async (stack) => {
          const gpuNode = `gpu-${stack.hostname}`;
          const cliNode = `cli-${stack.hostname}-1`;

          await step(t, "the stack converges and each edge enrolls its host's node", async () => {
            await untilConverged(stack.name, 150_000);
            await untilNode(stack.edgeAUrl, gpuNode);
            await untilNode(stack.edgeBUrl, cliNode);
            const { edges } = await getJson<{ edges: { edgeId: string; connected?: boolean }[] }>(
              `${stack.cpUrl}/edges`,
              { authorization: `Bearer ${stack.cpReadToken}` },
            );
            assert.deepEqual(
              edges.filter((e) => e.connected).map((e) => e.edgeId).sort(),
              ["edge-a", "edge-b"],
            );
          });

          await step(t, "OpenAI and A2A answer through both edges", async () => {
            assert.match(await chat(stack.edgeAUrl, "hello a"), /hello a/);
            assert.match(await chat(stack.edgeBUrl, "hello b"), /hello b/);
            assert.match(await a2aSend(stack.edgeAUrl, "demo", "ping a"), /ping a/);
            assert.equal(await a2aSend(stack.edgeBUrl, "echo", "one two"), "one\ntwo\n");
          });

          await step(
            t,
            "a rolling update of the GPU node service fails no request, the stream spanning it included",
            async () => {
              const traffic = load(stack.edgeAUrl, 3);
              await until("some load through edge-a", () => traffic.report.ok >= 6, 30_000, 50);
              // ~6 s of tokens: still streaming when the node is told to stop; it drains.
              const long = stream(stack.edgeAUrl, 100, 60);
              await new Promise((r) => setTimeout(r, 500));
              await rollTo(stack, "node-gpu", `iop/node:${NEXT_TAG}`);
              await untilNode(stack.edgeAUrl, gpuNode);
              const streamed = await long;
              await until("load after the update", () => traffic.report.ok >= 12, 30_000, 50);
              const report = await traffic.stop();
              log(
                `node update: ${report.sent} short requests sent, ${report.ok} ok, ` +
                  `${report.failed.length} failed, ${describe(report.unanswered)}; ` +
                  `the stream finished '${streamed.finish}' with ${streamed.text.length} chars`,
              );
              assert.deepEqual(report.failed, []);
              // edge-a stays up through a node update: no attempt may go unanswered there.
              assert.deepEqual(report.unanswered, { refused: 0, closed: 0 });
              assert.equal(streamed.finish, "stop");
              assert.match(streamed.text, /tok99/);
            },
          );

          await step(t, "a rolling update of edge-a fails no request that reached it", async () => {
            const traffic = load(stack.edgeAUrl, 3);
            await until("some load through edge-a", () => traffic.report.ok >= 6, 30_000, 50);
            await rollTo(stack, "edge-a", `iop/edge:${NEXT_TAG}`);
            await untilNode(stack.edgeAUrl, gpuNode);
            const after = traffic.report.ok;
            await until("load after the update", () => traffic.report.ok >= after + 6, 60_000, 50);
            const report = await traffic.stop();
            log(
              `edge update: ${report.sent} short requests sent, ${report.ok} ok, ` +
                `${report.failed.length} failed, ${describe(report.unanswered)} while no edge-a ` +
                "listened on its host port",
            );
            assert.deepEqual(report.failed, []);
          });

          await step(
            t,
            "a scaled CLI node service enrolls its new replica, which serves",
            async () => {
              const second = `cli-${stack.hostname}-2`;
              await docker(
                ["service", "scale", "--detach=false", `${stack.service("node-cli")}=2`],
                120_000,
              );
              await untilNode(stack.edgeBUrl, second);
              // Direct CLI runs go to the least busy node: two at once land on both.
              const served = new Set<string>();
              await until(
                "whoami served by both CLI nodes",
                async () => {
                  const answers = await Promise.all([0, 1].map(() => whoami(stack.edgeBUrl)));
                  for (const a of answers) served.add(a);
                  return served.has(second) && served.has(cliNode) || undefined;
                },
                60_000,
                100,
              );
            },
          );
        })
      );
    } finally {
      for (const tier of ["edge", "node"]) {
        await docker(["rmi", `iop/${tier}:${NEXT_TAG}`]).catch(() => {});
      }
      log(`done in ${Math.round((performance.now() - started) / 1000)} s`);
    }
  },
});

/** Runs one step; a failed one ends the test (the later steps build on it). */
async function step(t: Deno.TestContext, name: string, fn: () => Promise<void>): Promise<void> {
  if (!await t.step(name, fn)) throw new Error(`step failed: ${name}`);
}

/** Runs the `whoami` CLI profile; returns the node it names. */
async function whoami(edgeUrl: string): Promise<string> {
  const res = await fetch(`${edgeUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "whoami", messages: [{ role: "user", content: "a b" }] }),
  });
  const body = await res.json();
  assert.equal(res.status, 200, JSON.stringify(body));
  const text: string = body.choices[0].message.content;
  return text.match(/served-by (\S+)/)?.[1] ?? text;
}
