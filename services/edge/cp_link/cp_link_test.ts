import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { type EdgeEnvelope, EdgeEnvelopeSchema } from "../../../proto/gen/iop/v1/control_pb.ts";
import { createLogger } from "../../../shared/log.ts";
import { FrameConnection } from "../../../shared/wire/connection.ts";
import { listenFrames } from "../../../shared/wire/listener.ts";
import { DomainAgents } from "../agents/domain_agents.ts";
import { type EdgeConfig, parseEdgeConfig } from "../config.ts";
import { EdgeService } from "../service.ts";
import { startCpLink } from "./cp_link.ts";

const logger = createLogger("test", { writer: () => {} });

/** A scripted Control Plane: accepts (or refuses) hellos and records every frame it gets. */
async function fakeCp(accept = true) {
  const received: EdgeEnvelope[] = [];
  const conns: FrameConnection<typeof EdgeEnvelopeSchema, typeof EdgeEnvelopeSchema>[] = [];
  const listener = await listenFrames({
    hostname: "127.0.0.1",
    port: 0,
    logger,
    handle: async (raw) => {
      const conn = new FrameConnection(raw, {
        inSchema: EdgeEnvelopeSchema,
        outSchema: EdgeEnvelopeSchema,
      });
      conns.push(conn);
      for await (const envelope of conn.messages()) {
        received.push(envelope);
        if (envelope.msg.case === "hello") {
          await conn.send(create(EdgeEnvelopeSchema, {
            msg: {
              case: "helloAck",
              value: {
                accepted: accept,
                reason: accept ? "" : "bad credential",
                heartbeatIntervalMs: 200,
              },
            },
          }));
        }
      }
    },
  });
  return {
    address: `127.0.0.1:${listener.port}`,
    received,
    send: (envelope: EdgeEnvelope) => conns.at(-1)!.send(envelope),
    /** Drops the newest connection, as a lost link would. */
    drop: () => conns.at(-1)!.close("dropped by the test"),
    close: () => listener.close(),
  };
}

function config(address: string): EdgeConfig {
  return parseEdgeConfig({
    edge: { id: "edge-t", labels: { site: "lab" } },
    // Plain TCP: the link's protocol is under test here (tests/trusted_links_test.ts has TLS).
    control_plane: {
      address,
      credential: "cred-1",
      reconnect_max_ms: 200,
      insecure_plaintext: true,
    },
  }, "edge.yaml");
}

async function until<T>(check: () => T | undefined): Promise<T> {
  for (let i = 0; i < 400; i++) {
    const v = check();
    if (v !== undefined) return v;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error("condition not met in time");
}

Deno.test("the link says hello with id, credential, version and capabilities, and answers status with the same correlation id", async () => {
  const cp = await fakeCp();
  const service = new EdgeService({ config: config(cp.address), logger, version: "9.9" });
  const link = startCpLink({ service, agents: new DomainAgents(service), version: "9.9", logger });
  try {
    await until(() => link.attached || undefined);
    const hello = cp.received[0]?.msg;
    assert.equal(hello?.case, "hello");
    if (hello?.case !== "hello") return;
    assert.equal(hello.value.edgeId, "edge-t");
    assert.equal(hello.value.credential, "cred-1");
    assert.equal(hello.value.version, "9.9");
    assert.deepEqual({ ...hello.value.labels }, { site: "lab" });
    assert.ok(hello.value.capabilities.includes("agents"));
    await cp.send(create(EdgeEnvelopeSchema, {
      correlationId: 7n,
      msg: { case: "statusRequest", value: {} },
    }));
    const answer = await until(() => cp.received.find((e) => e.msg.case === "statusResponse"));
    assert.equal(answer.correlationId, 7n);
    assert.equal(answer.msg.case === "statusResponse" && answer.msg.value.edge?.edgeId, "edge-t");
  } finally {
    await link.stop();
    await cp.close();
  }
});

Deno.test("a config reload that changes the address re-points the link to the new Control Plane", async () => {
  const first = await fakeCp();
  const second = await fakeCp();
  let next = config(first.address);
  const service = new EdgeService({
    config: next,
    logger,
    version: "1",
    loadConfig: () => Promise.resolve(next),
  });
  const link = startCpLink({ service, agents: new DomainAgents(service), version: "1", logger });
  try {
    await until(() => first.received.some((e) => e.msg.case === "hello") || undefined);
    next = config(second.address);
    assert.equal((await service.reload()).ok, true);
    await until(() => second.received.some((e) => e.msg.case === "hello") || undefined);
    await until(() => link.attached || undefined);
  } finally {
    await link.stop();
    await first.close();
    await second.close();
  }
});

Deno.test("a refused hello leaves the link detached and it keeps retrying", async () => {
  const cp = await fakeCp(false);
  const service = new EdgeService({ config: config(cp.address), logger, version: "1" });
  const link = startCpLink({ service, agents: new DomainAgents(service), version: "1", logger });
  try {
    await until(() => cp.received.filter((e) => e.msg.case === "hello").length >= 2 || undefined);
    assert.equal(link.attached, false);
  } finally {
    await link.stop();
    await cp.close();
  }
});

Deno.test("a command result that finds the link down is held and delivered after the next hello", async () => {
  const cp = await fakeCp();
  const edgeConfig = config(cp.address);
  let finishReload: (() => void) | undefined;
  const service = new EdgeService({
    config: edgeConfig,
    logger,
    version: "1",
    loadConfig: () => new Promise((resolve) => finishReload = () => resolve(edgeConfig)),
  });
  const link = startCpLink({
    service,
    agents: new DomainAgents(service),
    version: "1",
    logger,
    backoffInitialMs: 20,
  });
  const hellos = () => cp.received.filter((e) => e.msg.case === "hello").length;
  try {
    await until(() => link.attached || undefined);
    await cp.send(create(EdgeEnvelopeSchema, {
      msg: {
        case: "commandRequest",
        value: { commandId: "cmd_held", timeoutMs: 0, kind: { case: "reload", value: {} } },
      },
    }));
    const finish = await until(() => finishReload);
    cp.drop();
    await until(() => hellos() >= 2 || undefined);
    finish();
    const result = await until(() => cp.received.find((e) => e.msg.case === "commandResult"));
    assert.ok(
      cp.received.indexOf(result) > cp.received.findLastIndex((e) => e.msg.case === "hello"),
      "the result travels on the new link, after its hello",
    );
    assert.equal(result.msg.case === "commandResult" && result.msg.value.commandId, "cmd_held");
    assert.equal(result.msg.case === "commandResult" && result.msg.value.status, "succeeded");
  } finally {
    await link.stop();
    await cp.close();
  }
});
