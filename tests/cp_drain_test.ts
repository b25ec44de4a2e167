/**
 * A stopping Control Plane drains: a real `services/cp/main.ts` process with a real Edge and
 * Node attached. On SIGTERM it refuses new fleet commands (HTTP 503, and an UNAVAILABLE error on
 * the `/client` socket), answers `/readyz` 503 and keeps serving reads, while a command in
 * flight gets its result over the still open edge wire and is audited succeeded; what outlives
 * `shutdown.drain_timeout_ms`, or a second SIGTERM, is audited unknown with the reason. It exits
 * 0 every time.
 * @module
 */
import assert from "node:assert/strict";
import { create, fromBinary, type MessageInitShape, toBinary } from "@bufbuild/protobuf";
import { type ClientEnvelope, ClientEnvelopeSchema } from "../proto/gen/iop/v1/control_pb.ts";
import { STOPPED_REASON, STOPPING_MESSAGE } from "../services/cp/drain.ts";
import { DomainAgents } from "../services/edge/agents/domain_agents.ts";
import { startCpLink } from "../services/edge/cp_link/cp_link.ts";
import { openAuditStore } from "../services/cp/store/audit_store.ts";
import type { AuditRecord } from "../services/cp/ports.ts";
import { TEST_OPERATE_TOKEN, TEST_READ_TOKEN, testEdgeCredential } from "./cp_harness.ts";
import { quiet, startStack, type TestEdge } from "./stack.ts";
import { dialTlsConfig, listenTlsConfig } from "./tls_fixture.ts";
import { freePort, TextLog, until } from "./util.ts";

/** Parsed JSON of the HTTP API, read field by field in assertions. */
// deno-lint-ignore no-explicit-any
type Json = any;
type Msg = NonNullable<MessageInitShape<typeof ClientEnvelopeSchema>["msg"]>;

const EDGE_ID = "edge-a";
const OPERATE = { authorization: `Bearer ${TEST_OPERATE_TOKEN}` };
const READ = { authorization: `Bearer ${TEST_READ_TOKEN}` };
/** A run of CLI profile `wait` on the edge: it ends once the test writes the release file. */
const WAIT_COMMAND = JSON.stringify({
  edges: { edgeIds: [EDGE_ID] },
  command: { run: { adapter: "cli", target: "wait" } },
});

/** A Control Plane process, its log, and the audit file it writes. */
interface CpProcess {
  url: string;
  /** `host:port` of the edge wire. */
  wire: string;
  auditPath: string;
  log: TextLog;
  signal(signal: Deno.Signal): void;
  /** The exit status; fails the test if the process does not stop within 30 s. */
  exited(): Promise<Deno.CommandStatus>;
}

/** An Edge with one Node whose CLI profile `wait` runs until {@linkcode Fleet.release}. */
interface Fleet {
  cp: CpProcess;
  edge: TestEdge;
  /** Lets every `wait` run end. */
  release(): Promise<void>;
}

async function startCpProcess(dir: string, drainTimeoutMs?: number): Promise<CpProcess> {
  const httpPort = freePort();
  const wirePort = freePort();
  const file = `${dir}/cp.yaml`;
  const auditPath = `${dir}/audit.sqlite`;
  // JSON is valid YAML.
  await Deno.writeTextFile(
    file,
    JSON.stringify({
      control_plane: { id: "cp-drain" },
      http: { host: "127.0.0.1", port: httpPort },
      wire: {
        host: "127.0.0.1",
        port: wirePort,
        heartbeat_interval_ms: 500,
        tls: await listenTlsConfig("cp", "cp-test"),
        edges: [{ id: EDGE_ID, credential: testEdgeCredential(EDGE_ID) }],
      },
      access: {
        tokens: [
          { name: "operator", token: TEST_OPERATE_TOKEN, role: "operate" },
          { name: "viewer", token: TEST_READ_TOKEN, role: "read" },
        ],
      },
      audit: { path: auditPath },
      ...(drainTimeoutMs === undefined ? {} : { shutdown: { drain_timeout_ms: drainTimeoutMs } }),
    }),
  );
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      new URL("../services/cp/main.ts", import.meta.url).pathname,
      "--config",
      file,
    ],
    env: { IOP_LOG_LEVEL: "info", NO_COLOR: "1" },
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const log = new TextLog();
  const pump = log.readFrom(child.stderr);
  const url = `http://127.0.0.1:${httpPort}`;
  const failed = child.status.then((s) => {
    throw new Error(`control plane exited with ${s.code} before it was ready:\n${log.text}`);
  });
  failed.catch(() => {});
  await Promise.race([
    failed,
    until("control plane process to be ready", async () => {
      const res = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(2_000) });
      await res.body?.cancel();
      return res.ok;
    }, 30_000),
  ]);
  return {
    url,
    wire: `127.0.0.1:${wirePort}`,
    auditPath,
    log,
    signal: (signal) => child.kill(signal),
    exited: async () => {
      const late = setTimeout(() => child.kill("SIGKILL"), 30_000);
      const status = await child.status.finally(() => clearTimeout(late));
      await pump;
      return status;
    },
  };
}

async function withFleet(drainTimeoutMs: number | undefined, fn: (fleet: Fleet) => Promise<void>) {
  const dir = await Deno.makeTempDir({ prefix: "iop-cp-drain-" });
  const cp = await startCpProcess(dir, drainTimeoutMs);
  const released = `${dir}/released`;
  const edge = await startStack({
    config: {
      edge: { id: EDGE_ID },
      control_plane: {
        address: cp.wire,
        credential: testEdgeCredential(EDGE_ID),
        reconnect_max_ms: 300,
        tls: await dialTlsConfig("edge"),
      },
      nodes: [{
        id: "node-1",
        token: "node-1-token",
        adapters: [{
          name: "cli",
          kind: "cli",
          profiles: [{
            name: "wait",
            command: "sh",
            args: [
              "-c",
              `echo started; while [ ! -f '${released}' ]; do sleep 0.05; done; echo done`,
            ],
            timeout_ms: 60_000,
          }],
        }],
      }],
    },
  });
  const link = startCpLink({
    service: edge.service,
    agents: new DomainAgents(edge.service),
    version: "test",
    logger: quiet("edge.cp_link"),
    backoffInitialMs: 50,
  });
  const release = () => Deno.writeTextFile(released, "");
  try {
    await until("the edge attached with its node", async () => {
      const { body } = await getJson(`${cp.url}/edges/${EDGE_ID}`);
      return body.connected && body.status?.nodes?.[0]?.connected;
    });
    await fn({ cp, edge, release });
  } finally {
    await release();
    try {
      cp.signal("SIGKILL");
    } catch {
      // Already exited.
    }
    await cp.exited();
    await link.stop();
    await edge.close();
    await Deno.remove(dir, { recursive: true });
  }
}

async function getJson(url: string, init?: RequestInit): Promise<{ status: number; body: Json }> {
  const res = await fetch(url, { signal: AbortSignal.timeout(10_000), headers: READ, ...init });
  return { status: res.status, body: await res.json() };
}

function submit(cp: CpProcess): Promise<{ status: number; body: Json }> {
  return getJson(`${cp.url}/commands`, {
    method: "POST",
    headers: { ...OPERATE, "content-type": "application/json" },
    body: WAIT_COMMAND,
  });
}

/** Submits the `wait` command and resolves once its run has started on the node. */
async function startWaitCommand(cp: CpProcess): Promise<string> {
  const accepted = await submit(cp);
  assert.equal(accepted.status, 202, JSON.stringify(accepted.body));
  const id = accepted.body.commandId as string;
  await until("the command's run to start on the node", async () => {
    const { body } = await getJson(`${cp.url}/commands/${id}`);
    return body.edges[EDGE_ID].runId !== "";
  });
  return id;
}

/** SIGTERM, then waits until the Control Plane says it is stopping. */
async function sigterm(cp: CpProcess): Promise<void> {
  cp.signal("SIGTERM");
  await until("/readyz to say stopping", async () => {
    const { status, body } = await getJson(`${cp.url}/readyz`);
    return status === 503 && body.status === "stopping";
  });
}

/** The audit rows in the file the Control Plane left, newest first. */
function auditRows(cp: CpProcess): AuditRecord[] {
  const audit = openAuditStore(cp.auditPath);
  try {
    return audit.recent(10);
  } finally {
    audit.close();
  }
}

/** A command submitted on a `/client` socket with the operate token, and the answer. */
async function submitOnSocket(cp: CpProcess): Promise<ClientEnvelope> {
  const ws = new WebSocket(`${cp.url.replace("http", "ws")}/client`);
  ws.binaryType = "arraybuffer";
  const received: ClientEnvelope[] = [];
  ws.onmessage = (e) => received.push(fromBinary(ClientEnvelopeSchema, new Uint8Array(e.data)));
  const closed = new Promise((resolve) => ws.onclose = resolve);
  await new Promise((resolve, reject) => {
    ws.onopen = resolve;
    ws.onerror = reject;
  });
  const call = async (correlationId: bigint, msg: Msg) => {
    ws.send(toBinary(ClientEnvelopeSchema, create(ClientEnvelopeSchema, { correlationId, msg })));
    return await until("an answer", () => received.find((r) => r.correlationId === correlationId));
  };
  try {
    const ack = await call(1n, {
      case: "hello",
      value: { clientName: "ops-app", credential: TEST_OPERATE_TOKEN },
    });
    assert.equal(ack.msg.case, "helloAck");
    return await call(2n, {
      case: "submitCommand",
      value: {
        edges: { edgeIds: [EDGE_ID] },
        command: { kind: { case: "run", value: { adapter: "cli", target: "wait" } } },
      },
    });
  } finally {
    ws.close();
    await closed;
  }
}

Deno.test("on SIGTERM the control plane refuses new commands, keeps serving reads, lets the command in flight finish and exits 0 with it audited succeeded", async () => {
  await withFleet(undefined, async ({ cp, release }) => {
    const id = await startWaitCommand(cp);
    await sigterm(cp);

    const refused = await submit(cp);
    assert.equal(refused.status, 503);
    assert.deepEqual(refused.body, { error: { code: "UNAVAILABLE", message: STOPPING_MESSAGE } });
    const onSocket = await submitOnSocket(cp);
    assert.equal(onSocket.msg.case, "error");
    assert.equal(onSocket.msg.value.code, "UNAVAILABLE");
    assert.equal(onSocket.msg.value.message, STOPPING_MESSAGE);
    assert.equal(onSocket.msg.value.retryable, true);

    const running = await getJson(`${cp.url}/commands/${id}`);
    assert.equal(running.status, 200, "reads keep working during the drain");
    assert.equal(running.body.outcome, "running");
    const audit = await getJson(`${cp.url}/audit`);
    assert.equal(audit.status, 200);

    await release();
    const status = await cp.exited();
    assert.equal(status.code, 0, cp.log.text);
    const rows = auditRows(cp);
    assert.deepEqual(rows.map((r) => r.commandId), [id], "refused commands leave no audit row");
    assert.equal(rows[0]!.outcome, "succeeded");
    assert.equal(rows[0]!.results[EDGE_ID]!.status, "succeeded");
    assert.match(cp.log.text, /"msg":"control plane draining".*"shares_left":1/);
    assert.match(cp.log.text, /control plane drained: every command in flight finished/);
  });
});

Deno.test("a command that outlives shutdown.drain_timeout_ms is audited unknown with the reason, and the control plane exits 0", async () => {
  await withFleet(300, async ({ cp }) => {
    const id = await startWaitCommand(cp);
    cp.signal("SIGTERM");
    const status = await cp.exited();
    assert.equal(status.code, 0, cp.log.text);
    const [row] = auditRows(cp);
    assert.equal(row?.commandId, id);
    assert.equal(row.outcome, "unknown");
    assert.ok(row.finishedAtMs > 0);
    assert.deepEqual(
      {
        status: row.results[EDGE_ID]!.status,
        summary: row.results[EDGE_ID]!.summary,
        errorCode: row.results[EDGE_ID]!.errorCode,
        retryable: row.results[EDGE_ID]!.retryable,
      },
      { status: "unknown", summary: STOPPED_REASON, errorCode: "UNAVAILABLE", retryable: false },
    );
    assert.match(cp.log.text, /drain timeout \(300 ms\)/);
  });
});

Deno.test("a second SIGTERM during the drain ends the wait: the command in flight is audited unknown and the exit code is 0", async () => {
  await withFleet(undefined, async ({ cp }) => {
    const id = await startWaitCommand(cp);
    await sigterm(cp);
    cp.signal("SIGTERM");
    const status = await cp.exited();
    assert.equal(status.code, 0, cp.log.text);
    const [row] = auditRows(cp);
    assert.equal(row?.commandId, id);
    assert.equal(row.outcome, "unknown");
    assert.equal(row.results[EDGE_ID]!.summary, STOPPED_REASON);
    assert.match(cp.log.text, /signal received again during the drain/);
  });
});
