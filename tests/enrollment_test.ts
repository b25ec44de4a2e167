/**
 * Node enrollment end to end: a real Edge with mutual TLS on its node wire and nodes that are
 * not in its config. Nodes enroll under a rule with the rule's token and its enrollment
 * certificate (`iop://enroll/<rule>`) or a per-host one, then serve the rule's pool model through
 * the OpenAI surface and show in `/api/iop/status` and `/v1/models`; a wrong token, an id
 * outside the rule, another rule's certificate, a full rule and a duplicate id are refused with a
 * reason the node logs; a reload keeps the enrolled nodes serving.
 * @module
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { create } from "@bufbuild/protobuf";
import type { ServiceIdentity } from "../deploy/fleet_certs.ts";
import { NodeEnvelopeSchema, type RegisterResponse } from "../proto/gen/iop/v1/node_pb.ts";
import { enrolledRecord } from "../services/edge/nodes/enrollment_config.ts";
import type { StatusSnapshot } from "../services/edge/ports.ts";
import { mockAnswer } from "../services/node/adapters/mock.ts";
import { buildAdapterRegistry } from "../services/node/adapters/registry.ts";
import { NodeCore } from "../services/node/node.ts";
import { DEFAULT_NODE_POLICY } from "../services/node/policy.ts";
import { openRunStore } from "../services/node/store/sqlite_store.ts";
import { startEdgeClient } from "../services/node/transport/edge_client.ts";
import { createLogger } from "../shared/log.ts";
import { hashSecret } from "../shared/secrets.ts";
import { FrameConnection } from "../shared/wire/connection.ts";
import { dialLink } from "../shared/wire/link.ts";
import type { DialTlsFiles } from "../shared/wire/tls.ts";
import {
  adapterFactories,
  policyFor,
  type RawConfig,
  startEdge,
  type TestEdge,
  type TestNode,
} from "./stack.ts";
import { testCertificates } from "./tls_fixture.ts";
import { TextLog, until } from "./util.ts";

const GPU_SECRET = "gpu-enroll-secret";
const CPU_SECRET = "cpu-enroll-secret";
const GPU_CERT: ServiceIdentity = { role: "enroll", id: "gpu" };
const CPU_CERT: ServiceIdentity = { role: "enroll", id: "cpu" };
const GPU1_KEY = "gpu-1-node-key";

/** No listed node at all: the pool model is served only by nodes that enroll. */
function edgeConfig(
  options: { maxConcurrency?: number; nodeIds?: string[]; retainMs?: number } = {},
): RawConfig {
  return {
    edge: { id: "edge-enroll" },
    enrollment: [
      {
        name: "gpu",
        token: hashSecret(GPU_SECRET), // stored as `deno task hash-secret` prints it
        node_ids: options.nodeIds ?? ["gpu-*"],
        max_nodes: 2,
        ...(options.retainMs !== undefined ? { retain_disconnected_ms: options.retainMs } : {}),
        template: {
          alias: "{node}-box",
          adapters: [{ name: "mock", kind: "mock", tokens: 3, token_delay_ms: 1 }],
          providers: [{
            id: "{node}-llama",
            adapter: "mock",
            target: "demo",
            model_group: "llama3.2",
            max_concurrency: options.maxConcurrency ?? 4,
          }],
        },
      },
      {
        name: "cpu",
        token: CPU_SECRET,
        node_ids: ["cpu-*"],
        template: { adapters: [{ name: "mock", kind: "mock" }] },
      },
    ],
    models: [{ name: "llama3.2" }],
  };
}

/** A node's dialing TLS files: the fleet CA, and the client certificate of `cert`. */
async function dialFiles(cert: ServiceIdentity): Promise<DialTlsFiles> {
  const certs = await testCertificates(cert);
  return {
    file: "test",
    path: "edge",
    caFile: certs.ca,
    serverName: "",
    certFile: certs.certFor(cert.role, cert.id),
    keyFile: certs.keyFor(cert.role, cert.id),
  };
}

interface EnrollOptions {
  token?: string;
  /** Its node key (`node_key.ts`); default: a new one, as a new host makes. */
  nodeKey?: string;
  /** The client certificate it shows (default: the gpu rule's enrollment certificate). */
  cert?: ServiceIdentity;
  /** Where the node logs (warn and up); default: errors only, nowhere. */
  log?: TextLog;
}

/** Starts a real node that is in no config, over the real wire (registration not awaited). */
async function nodeProcess(edge: TestEdge, id: string, options: EnrollOptions = {}) {
  const log = options.log;
  const logger = log
    ? createLogger(`node.${id}`, { level: "warn", writer: (line) => log.append(`${line}\n`) })
    : createLogger(`node.${id}`, { level: "error", writer: () => {} });
  const rule = edge.config.enrollment.find((r) => id.startsWith(`${r.name}-`));
  // Its owner allows what the rule's template pushes, as for a listed node.
  const policy = rule ? policyFor(enrolledRecord(rule, id, "test")) : DEFAULT_NODE_POLICY;
  const store = openRunStore(`${edge.dir}/${id}-${crypto.randomUUID()}.sqlite`);
  const core = new NodeCore({
    nodeId: id,
    store,
    logger,
    policy,
    buildAdapters: (configs) => buildAdapterRegistry(configs, adapterFactories()),
  });
  const client = startEdgeClient({
    edgeAddress: `127.0.0.1:${edge.wire.port}`,
    tls: await dialFiles(options.cert ?? GPU_CERT),
    nodeId: id,
    token: options.token ?? GPU_SECRET,
    nodeKey: options.nodeKey ?? crypto.randomUUID(),
    version: "test",
    core,
    logger,
    backoffInitialMs: 20,
    backoffMaxMs: 200,
  });
  let stopping: Promise<void> | undefined;
  const stop = () =>
    stopping ??= (async () => {
      await client.stop();
      await core.close();
      store.close();
    })();
  const node: TestNode = {
    id,
    core,
    store,
    client,
    adapters: [],
    stop,
    [Symbol.asyncDispose]: stop,
  };
  return node;
}

/** Starts a node that enrolls; resolves once the Edge saw it apply the template's config. */
async function enroll(edge: TestEdge, id: string, options: EnrollOptions = {}): Promise<TestNode> {
  const applied = Promise.withResolvers<string[]>();
  const unsubscribe = edge.service.subscribe((event) => {
    if (event.type === "node_config_applied" && event.nodeId === id) {
      applied.resolve(event.adapters);
    }
  });
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`node '${id}' did not enroll within 10 s`)), 10_000);
  });
  try {
    const node = await nodeProcess(edge, id, options);
    edge.nodes.set(id, node); // the Edge fixture stops it on close
    node.adapters = await Promise.race([applied.promise, late]);
    return node;
  } finally {
    clearTimeout(timer);
    unsubscribe();
  }
}

/** Opens a TLS link showing `cert`, sends one register request, returns the Edge's answer. */
async function register(
  edge: TestEdge,
  cert: ServiceIdentity,
  as: { id: string; token: string; nodeKey?: string },
): Promise<RegisterResponse | undefined> {
  const files = await dialFiles(cert);
  const link = await dialLink({
    address: `127.0.0.1:${edge.wire.port}`,
    tls: {
      ca: await Deno.readTextFile(files.caFile),
      serverName: "",
      cert: await Deno.readTextFile(files.certFile),
      key: await Deno.readTextFile(files.keyFile),
    },
  });
  const conn = new FrameConnection(link, {
    inSchema: NodeEnvelopeSchema,
    outSchema: NodeEnvelopeSchema,
  });
  try {
    await conn.send(create(NodeEnvelopeSchema, {
      msg: {
        case: "registerRequest",
        value: { nodeId: as.id, token: as.token, nodeKey: as.nodeKey ?? "", protocolVersion: 2 },
      },
    }));
    const answer = await conn.messages().next();
    return answer.value?.msg.case === "registerResponse" ? answer.value.msg.value : undefined;
  } finally {
    conn.close();
  }
}

function openai(edge: TestEdge): OpenAI {
  return new OpenAI({ apiKey: "none", baseURL: `${edge.url}/v1`, maxRetries: 0 });
}

async function ask(edge: TestEdge, prompt: string): Promise<string> {
  const completion = await openai(edge).chat.completions.create({
    model: "llama3.2",
    messages: [{ role: "user", content: prompt }],
  });
  return completion.choices[0]?.message.content ?? "";
}

async function status(edge: TestEdge): Promise<StatusSnapshot> {
  const res = await fetch(`${edge.url}/api/iop/status`);
  assert.equal(res.status, 200);
  return await res.json();
}

async function metric(edge: TestEdge, name: string): Promise<string> {
  return await edge.registry.getSingleMetricAsString(name);
}

Deno.test("two nodes not in the config enroll under a rule and serve its pool model over OpenAI", async () => {
  await using edge = await startEdge({ config: edgeConfig(), http: true, tls: "mutual" });
  // Before any node enrolls the model is configured but not servable: unavailable, not unknown.
  assert.deepEqual((await openai(edge).models.list()).data, []);
  await assert.rejects(
    ask(edge, "too early"),
    (err: unknown) => err instanceof OpenAI.APIError && err.status === 503,
  );
  // What the template's adapters cannot honour is refused already, naming the field.
  const tools = await openai(edge).chat.completions.create({
    model: "llama3.2",
    messages: [{ role: "user", content: "too early" }],
    tools: [{ type: "function", function: { name: "f", parameters: { type: "object" } } }],
  }).catch((err) => err);
  assert.ok(tools instanceof OpenAI.APIError && tools.status === 400, String(tools));
  assert.match(tools.message, /^400 tools: model 'llama3.2' is served by a mock adapter/);

  // One shows the rule's enrollment certificate, the other a certificate made for its host.
  const gpu1 = await enroll(edge, "gpu-1");
  const gpu2 = await enroll(edge, "gpu-2", { cert: { role: "node", id: "gpu-2" } });
  assert.deepEqual(gpu1.adapters, ["mock"]);
  assert.deepEqual(gpu2.adapters, ["mock"]);

  const models = await openai(edge).models.list();
  assert.deepEqual(models.data.map((m) => m.id), ["llama3.2"]);

  // Each node serves: the other one drained, the pool must take this one.
  for (const [serving, other] of [[gpu1, gpu2], [gpu2, gpu1]] as const) {
    edge.service.drainNode(other.id, true);
    edge.service.drainNode(serving.id, false);
    assert.equal(await ask(edge, `hello ${serving.id}`), mockAnswer(`hello ${serving.id}`, 3));
    assert.deepEqual(serving.store.history(5).map((r) => r.status), ["completed"]);
  }

  const snapshot = await status(edge);
  assert.deepEqual(
    snapshot.nodes.map((n) => [n.id, n.alias, n.connected, n.enrolledBy]),
    [["gpu-1", "gpu-1-box", true, "gpu"], ["gpu-2", "gpu-2-box", true, "gpu"]],
  );
  assert.deepEqual(
    snapshot.nodes.flatMap((n) => n.resources.map((r) => [r.id, r.modelGroup, r.maxConcurrency])),
    [["gpu-1-llama", "llama3.2", 4], ["gpu-2-llama", "llama3.2", 4]],
  );
  assert.match(await metric(edge, "iop_edge_enrolled_nodes"), /rule="gpu"} 2/);
  assert.match(await metric(edge, "iop_edge_enrolled_nodes"), /rule="cpu"} 0/);
});

Deno.test("a wrong token, an id outside the rule, another rule's certificate, a full rule and a taken id are refused", async () => {
  const edgeLog = new TextLog();
  await using edge = await startEdge({
    config: edgeConfig(),
    http: true,
    tls: "mutual",
    logger: createLogger("edge", { level: "warn", writer: (line) => edgeLog.append(`${line}\n`) }),
  });
  const gpu1 = await enroll(edge, "gpu-1", { nodeKey: GPU1_KEY });
  const gpu2 = await enroll(edge, "gpu-2");

  // A real node with a wrong token logs the Edge's reason and stays out.
  const nodeLog = new TextLog();
  await using wrong = await nodeProcess(edge, "gpu-3", { token: "guessed", log: nodeLog });
  await nodeLog.waitFor(/edge refused registration.*unknown node id 'gpu-3' or wrong node token/);
  await wrong.stop();
  await edgeLog.waitFor(/node registration refused.*"node_id":"gpu-3".*"refusal":"wrong_token"/);

  // cert, id, node key, reason; the temporary ones (a full rule, a connected id) say so.
  const refusals = [
    [
      GPU_CERT,
      "tpu-1",
      "",
      /^node id 'tpu-1' is not admitted by enrollment rule 'gpu' \(node_ids: gpu-\*\)$/,
    ],
    [
      CPU_CERT,
      "gpu-3",
      "",
      /^client certificate is not for node 'gpu-3' nor for an enrollment rule admitting it \(it names enroll\/cpu\)$/,
    ],
    [
      GPU_CERT,
      "gpu-3",
      "",
      /^enrollment rule 'gpu' is full: its 2 nodes \(max_nodes\) are connected$/,
    ],
    [GPU_CERT, "gpu-1", GPU1_KEY, /^node 'gpu-1' enrolled under rule 'gpu' is connected already/],
    [GPU_CERT, "gpu-1", "", /^node id 'gpu-1' is held by the node that enrolled under it/],
    [
      GPU_CERT,
      "cpu-1",
      "",
      /^client certificate is not for node 'cpu-1' nor for an enrollment rule admitting it/,
    ],
  ] as const;
  for (const [cert, id, nodeKey, reason] of refusals) {
    const answer = await register(edge, cert, { id, token: GPU_SECRET, nodeKey });
    assert.equal(answer?.accepted, false, id);
    assert.match(answer?.reason ?? "", reason);
    assert.equal(answer?.retryable, /is full|connected already/.test(answer?.reason ?? ""), id);
  }
  assert.doesNotMatch(edgeLog.text, new RegExp(GPU_SECRET));

  const refused = await metric(edge, "iop_edge_node_registration_refusals_total");
  for (
    const [reason, count] of Object.entries({
      wrong_token: 1,
      id_not_admitted: 1,
      certificate: 2,
      rule_full: 1,
      duplicate: 1,
      id_held: 1,
    })
  ) {
    assert.match(refused, new RegExp(`reason="${reason}"} ${count}\\b`), refused);
  }
  // A real node refused for a full rule warns and retries: a human need not act.
  const waitingLog = new TextLog();
  await using waiting = await nodeProcess(edge, "gpu-3", { log: waitingLog });
  await waitingLog.waitFor(
    /"level":"warn"[^\n]*edge refused registration for now; retrying[^\n]*is full/,
  );
  await waiting.stop();
  assert.doesNotMatch(waitingLog.text, /"level":"error"/);

  // The refusals disturbed nobody: both enrolled nodes are connected and nobody else is known.
  const shown = (await status(edge)).nodes.map((n) => [n.id, n.connected]);
  assert.deepEqual(shown, [["gpu-1", true], ["gpu-2", true]]);
  assert.equal(gpu1.client.registered, true);

  // A node gone keeps its record (shown disconnected); a newcomer takes the place of one that is
  // away, so max_nodes still holds.
  await gpu2.stop();
  await until(
    "gpu-2 disconnected",
    async () => (await status(edge)).nodes.find((n) => n.id === "gpu-2")?.connected === false,
  );
  await enroll(edge, "gpu-3");
  assert.deepEqual((await status(edge)).nodes.map((n) => [n.id, n.connected]), [
    ["gpu-1", true],
    ["gpu-3", true],
  ]);
  assert.match(await metric(edge, "iop_edge_enrolled_nodes"), /rule="gpu"} 2/);
});

Deno.test("a config reload keeps enrolled nodes serving, with their rebuilt records pushed live", async () => {
  const dir = await Deno.makeTempDir({ prefix: "iop_enrollment_" });
  const file = `${dir}/edge.yaml`;
  try {
    await Deno.writeTextFile(file, JSON.stringify(edgeConfig()));
    await using edge = await startEdge({
      config: edgeConfig(),
      configFile: file,
      http: true,
      tls: "mutual",
    });
    const gpu1 = await enroll(edge, "gpu-1");
    const gpu2 = await enroll(edge, "gpu-2");
    const sessions = edge.service.sessions();

    // The template changes: both nodes take their new records without reconnecting.
    await Deno.writeTextFile(file, JSON.stringify(edgeConfig({ maxConcurrency: 8 })));
    const first = await edge.service.reload();
    assert.ok(first.ok, first.detail);
    assert.match(first.detail, /\(connected nodes reconfigured: 2, dropped: 0\)$/);
    const now = edge.service.sessions();
    assert.ok(sessions.length === 2 && now.every((s, i) => s === sessions[i]), "same connections");
    const resources = (await status(edge)).nodes.flatMap((n) => n.resources);
    assert.deepEqual(resources.map((r) => r.maxConcurrency), [8, 8]);
    assert.equal(await ask(edge, "after reload"), mockAnswer("after reload", 3));

    // The rule narrows: gpu-2 is no longer admitted and is let go, gpu-1 serves on.
    await Deno.writeTextFile(file, JSON.stringify(edgeConfig({ nodeIds: ["gpu-1"] })));
    const second = await edge.service.reload();
    assert.ok(second.ok, second.detail);
    assert.match(second.detail, /dropped: 1\)$/);
    await until("gpu-2 let go", () => edge.service.sessions().length === 1);
    assert.equal(gpu1.client.registered, true);
    assert.deepEqual((await status(edge)).nodes.map((n) => [n.id, n.connected]), [
      ["gpu-1", true],
    ]);
    assert.equal(await ask(edge, "still here"), mockAnswer("still here", 3));
    await gpu2.stop();
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("another holder of the rule's token and certificate cannot take a disconnected node's id; the node itself comes back", async () => {
  await using edge = await startEdge({ config: edgeConfig(), http: true, tls: "mutual" });
  const first = await enroll(edge, "gpu-1", { nodeKey: GPU1_KEY });
  const before = (await status(edge)).nodes;
  await first.stop(); // a blip: its record is kept, shown disconnected
  await until(
    "gpu-1 disconnected",
    async () => (await status(edge)).nodes.find((n) => n.id === "gpu-1")?.connected === false,
  );

  // The impostor shows everything the rule's nodes share, but not gpu-1's node key.
  for (const nodeKey of ["", "a-guess"]) {
    const answer = await register(edge, GPU_CERT, { id: "gpu-1", token: GPU_SECRET, nodeKey });
    assert.equal(answer?.accepted, false);
    assert.equal(answer?.retryable, false);
    assert.match(
      answer?.reason ?? "",
      /^node id 'gpu-1' is held by the node that enrolled under it/,
    );
  }
  assert.deepEqual((await status(edge)).nodes.map((n) => [n.id, n.connected]), [["gpu-1", false]]);

  // The node restarts with the key it keeps and gets its record back.
  const back = await enroll(edge, "gpu-1", { nodeKey: GPU1_KEY });
  assert.equal(back.client.registered, true);
  const after = (await status(edge)).nodes;
  assert.deepEqual(after.map((n) => [n.id, n.alias, n.connected]), [["gpu-1", "gpu-1-box", true]]);
  assert.deepEqual(after[0]?.resources, before[0]?.resources);
  assert.equal(await ask(edge, "who"), mockAnswer("who", 3));
});

Deno.test("an enrolled record that goes takes its providers' metric series with it", async () => {
  await using edge = await startEdge({
    config: edgeConfig({ retainMs: 0 }),
    http: true,
    tls: "mutual",
  });
  const gpu1 = await enroll(edge, "gpu-1");
  const gpu2 = await enroll(edge, "gpu-2");
  for (const node of [gpu1, gpu2]) {
    edge.service.drainNode(node === gpu1 ? gpu2.id : gpu1.id, true);
    edge.service.drainNode(node.id, false);
    assert.equal(await ask(edge, node.id), mockAnswer(node.id, 3));
  }
  const series = async () =>
    [...(await metric(edge, "iop_edge_provider_in_flight")).matchAll(/provider="([^"]+)"/g)]
      .map((m) => m[1]);
  assert.deepEqual(await series(), ["gpu-1-llama", "gpu-2-llama"]);

  await gpu2.stop();
  // retain_disconnected_ms 0: the record goes at the next status read.
  await until(
    "gpu-2's record to go",
    async () => (await status(edge)).nodes.every((n) => n.id !== "gpu-2"),
  );
  assert.deepEqual(edge.service.config.nodes.map((n) => n.id), ["gpu-1"]);
  assert.deepEqual(await series(), ["gpu-1-llama"]);
  assert.match(await metric(edge, "iop_edge_provider_queued"), /provider="gpu-1-llama"/);
  assert.doesNotMatch(await metric(edge, "iop_edge_provider_queued"), /gpu-2-llama/);
});
