/**
 * The `/client` WebSocket with binary protobuf envelopes, and domain agents driven as fleet
 * commands: a real Control Plane with a real Edge and Node in this process.
 */
import assert from "node:assert/strict";
import { create, fromBinary, type MessageInitShape, toBinary } from "@bufbuild/protobuf";
import {
  type ClientEnvelope,
  ClientEnvelopeSchema,
  EdgeCommandRequestSchema,
  EdgeSelectorSchema,
} from "../proto/gen/iop/v1/control_pb.ts";
import { startControlPlane } from "../services/cp/control_plane.ts";
import { startCpEdge, TEST_OPERATE_TOKEN, TEST_READ_TOKEN, testCpConfig } from "./cp_harness.ts";
import { until } from "./util.ts";
import { quiet } from "./stack.ts";

type Msg = NonNullable<MessageInitShape<typeof ClientEnvelopeSchema>["msg"]>;

/** A binary client: sends envelopes, collects every answer and push in order. */
async function openClient(url: string) {
  const ws = new WebSocket(url.replace("http", "ws") + "/client");
  ws.binaryType = "arraybuffer";
  const received: ClientEnvelope[] = [];
  ws.onmessage = (e) => received.push(fromBinary(ClientEnvelopeSchema, new Uint8Array(e.data)));
  const closed = new Promise((resolve) => ws.onclose = resolve);
  await new Promise((resolve, reject) => {
    ws.onopen = resolve;
    ws.onerror = reject;
  });
  let next = 1n;
  return {
    received,
    async call(msg: Msg): Promise<ClientEnvelope> {
      const id = next++;
      ws.send(
        toBinary(ClientEnvelopeSchema, create(ClientEnvelopeSchema, { correlationId: id, msg })),
      );
      return await until("an answer", () => received.find((r) => r.correlationId === id));
    },
    send(msg: Msg) {
      ws.send(toBinary(ClientEnvelopeSchema, create(ClientEnvelopeSchema, { msg })));
    },
    async close() {
      ws.close();
      await closed;
    },
  };
}

Deno.test("a binary /client session gets fleet status, needs an operate token to command, and streams per-edge results", async () => {
  await using cp = await startControlPlane(await testCpConfig(":memory:"), { logger: quiet("cp") });
  await using _edge = await startCpEdge({ edgeId: "edge-ws", cpAddress: cp.wireAddress });
  await until("edge status", () => cp.registry.get("edge-ws")?.status ? true : undefined);

  const before = await openClient(cp.httpUrl);
  const early = await before.call({ case: "statusRequest", value: {} });
  assert.equal(early.msg.case, "error");
  assert.equal(early.msg.value?.code, "UNAUTHENTICATED", "hello with a token comes first");
  const readOnly = await before.call({
    case: "hello",
    value: { clientName: "viewer", credential: TEST_READ_TOKEN },
  });
  assert.equal(readOnly.msg.case === "helloAck" && readOnly.msg.value.canCommand, false);
  const denied = await before.call({
    case: "submitCommand",
    value: { edges: { all: true }, command: { kind: { case: "reload", value: {} } } },
  });
  assert.equal(denied.msg.case === "error" && denied.msg.value.code, "PERMISSION_DENIED");
  await before.close();

  const client = await openClient(cp.httpUrl);
  const ack = await client.call({
    case: "hello",
    value: { clientName: "ops-app", credential: TEST_OPERATE_TOKEN },
  });
  assert.equal(ack.msg.case === "helloAck" && ack.msg.value.canCommand, true);
  client.send({ case: "subscribe", value: {} });
  const status = await client.call({ case: "statusRequest", value: { refresh: true } });
  assert.equal(status.msg.case, "status");
  const edges = status.msg.case === "status" ? status.msg.value.edges : [];
  assert.deepEqual(edges.map((e) => [e.edgeId, e.connected, e.status?.nodes[0]?.id]), [
    ["edge-ws", true, "edge-ws-node"],
  ]);

  const accepted = await client.call({
    case: "submitCommand",
    value: {
      edges: { edgeIds: ["edge-ws", "edge-gone"] },
      command: { kind: { case: "run", value: { adapter: "mock", target: "demo", prompt: "hi" } } },
    },
  });
  assert.equal(accepted.msg.case, "commandAccepted");
  const commandId = accepted.msg.case === "commandAccepted" ? accepted.msg.value.commandId : "";
  const resultOf = (edgeId: string) =>
    client.received.find((r) =>
      r.msg.case === "commandUpdate" && r.msg.value.commandId === commandId &&
      r.msg.value.edgeId === edgeId && r.msg.value.update.case === "result"
    );
  const ok = await until("edge-ws result", () => resultOf("edge-ws"));
  const gone = await until("edge-gone result", () => resultOf("edge-gone"));
  const okResult = ok.msg.case === "commandUpdate" && ok.msg.value.update.case === "result"
    ? ok.msg.value.update.value
    : undefined;
  assert.equal(okResult?.status, "succeeded");
  assert.equal(okResult?.nodeId, "edge-ws-node");
  const goneResult = gone.msg.case === "commandUpdate" && gone.msg.value.update.case === "result"
    ? gone.msg.value.update.value
    : undefined;
  assert.equal(goneResult?.status, "failed");
  assert.equal(goneResult?.error?.code, "NOT_FOUND");
  assert.equal(cp.commands.get(commandId)?.outcome, "partial");
  assert.ok(
    client.received.some((r) => r.msg.case === "event" && r.msg.value.event.case === "relayed"),
    "subscribed clients get relayed fleet events",
  );
  await client.close();
});

Deno.test("a domain agent reports busy while its command runs, error after a failure, and ready again after a success", async () => {
  await using cp = await startControlPlane(await testCpConfig(":memory:"), { logger: quiet("cp") });
  await using edge = await startCpEdge({ edgeId: "edge-ag", cpAddress: cp.wireAddress });
  await until("edge status", () => cp.registry.get("edge-ag")?.status ? true : undefined);
  const agentState = () =>
    cp.registry.get("edge-ag")?.status?.agents.find((a) => a.id === "deployer");
  const submit = (command: string) =>
    cp.commands.submit({
      selector: create(EdgeSelectorSchema, { all: true }),
      command: create(EdgeCommandRequestSchema, {
        kind: { case: "agent", value: { agentId: "deployer", command, input: "v2" } },
      }),
      actor: "test",
      via: "client",
    });

  const slow = submit("slow");
  await until(
    "agent busy on the control plane",
    () => agentState()?.state === "busy" ? true : undefined,
  );
  const second = submit("build");
  await until("second command refused", () => second.outcome !== "running" ? true : undefined);
  assert.equal(second.edges.get("edge-ag")?.result?.error?.code, "OVERLOADED");
  const runId = slow.edges.get("edge-ag")?.progress[0]?.runId ?? "";
  assert.ok(edge.service.cancelRun(runId, "test over"));
  await until("slow command ends", () => slow.outcome !== "running" ? true : undefined);
  assert.equal(slow.edges.get("edge-ag")?.status, "cancelled");

  const broken = submit("broken");
  await until("broken command ends", () => broken.outcome !== "running" ? true : undefined);
  assert.equal(broken.edges.get("edge-ag")?.status, "failed");
  await until(
    "agent error on the control plane",
    () => agentState()?.state === "error" ? true : undefined,
  );
  assert.match(agentState()?.detail ?? "", /broken failed/);

  const deploy = submit("deploy");
  await until("deploy ends", () => deploy.outcome !== "running" ? true : undefined);
  assert.equal(deploy.outcome, "succeeded");
  assert.match(deploy.edges.get("edge-ag")?.result?.summary ?? "", /deploying v2\ndone/);
  await until("agent ready again", () => agentState()?.state === "ready" ? true : undefined);
  assert.equal(agentState()?.lastCommand, "deploy");
  assert.equal(agentState()?.lastStatus, "succeeded");
});
