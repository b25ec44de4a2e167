import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { type NodeEnvelope, NodeEnvelopeSchema } from "../../proto/gen/iop/v1/node_pb.ts";
import { IopError } from "../errors.ts";
import { FrameConnection, OversizeSendError, type WireMetrics } from "./connection.ts";
import { FrameError } from "./frame.ts";
import { plainLink } from "./link.ts";

type Conn = FrameConnection<typeof NodeEnvelopeSchema, typeof NodeEnvelopeSchema>;

function output(seq: number, text: string): NodeEnvelope {
  return create(NodeEnvelopeSchema, {
    msg: {
      case: "runEvent",
      value: { runId: "r", seq: BigInt(seq), event: { case: "output", value: { text } } },
    },
  });
}

function counting(): WireMetrics & { rejectedReasons: string[]; framesIn: number } {
  const m = {
    rejectedReasons: [] as string[],
    framesIn: 0,
    frame: (d: "in" | "out") => {
      if (d === "in") m.framesIn++;
    },
    bytes: () => {},
    rejected: (reason: string) => void m.rejectedReasons.push(reason),
  };
  return m;
}

async function pair(
  options: { maxFrameBytes?: number; maxSendBytes?: number; metrics?: WireMetrics } = {},
) {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const accepted = listener.accept();
  const client = await Deno.connect({ hostname: "127.0.0.1", port: listener.addr.port });
  const server = await accepted;
  listener.close();
  const wrap = (c: Deno.Conn): Conn =>
    new FrameConnection(plainLink(c), {
      inSchema: NodeEnvelopeSchema,
      outSchema: NodeEnvelopeSchema,
      ...options,
    });
  return { a: wrap(client), b: wrap(server), rawClient: client };
}

Deno.test({
  name: "FrameConnection delivers many unawaited sends in order, coalesced",
  sanitizeOps: true,
  sanitizeResources: true,
  async fn() {
    const { a, b } = await pair();
    const sends = Array.from({ length: 500 }, (_, i) => a.send(output(i + 1, `t${i}`)));
    const received: number[] = [];
    for await (const m of b.messages()) {
      if (m.msg.case === "runEvent") received.push(Number(m.msg.value.seq));
      if (received.length === 500) break;
    }
    await Promise.all(sends);
    assert.deepEqual(received, Array.from({ length: 500 }, (_, i) => i + 1));
    a.close();
    b.close();
  },
});

Deno.test({
  name: "FrameConnection.send waits while the peer does not read (backpressure)",
  sanitizeOps: true,
  sanitizeResources: true,
  async fn() {
    const { a, b } = await pair({ maxFrameBytes: 1 << 20 });
    const big = "z".repeat(256 * 1024);
    let resolved = 0;
    const sends = Array.from(
      { length: 256 },
      (_, i) => a.send(output(i + 1, big)).then(() => void resolved++),
    );
    // 64 MiB cannot fit in the socket buffers: some sends must still be pending.
    await new Promise((r) => setTimeout(r, 200));
    assert.ok(resolved < 256, `all ${resolved} sends resolved although nobody read`);
    let count = 0;
    for await (const _ of b.messages()) {
      if (++count === 256) break;
    }
    await Promise.all(sends);
    assert.equal(resolved, 256);
    a.close();
    b.close();
  },
});

Deno.test({
  name: "FrameConnection rejects sends after close with UNAVAILABLE and reports the reason",
  sanitizeOps: true,
  sanitizeResources: true,
  async fn() {
    const { a, b } = await pair();
    a.close("test over");
    assert.equal(await a.closed, "test over");
    await assert.rejects(
      a.send(output(1, "late")),
      (err: unknown) =>
        err instanceof IopError && err.code === "UNAVAILABLE" && /test over/.test(err.message),
    );
    // The peer sees the end of the stream and closes too.
    for await (const _ of b.messages()) { /* drain */ }
    assert.equal(await b.closed, "peer closed");
  },
});

Deno.test({
  name: "FrameConnection closes on an oversize frame from the peer and counts it",
  sanitizeOps: true,
  sanitizeResources: true,
  async fn() {
    const metrics = counting();
    const { a, b } = await pair({ maxFrameBytes: 1024, metrics });
    await a.send(output(1, "small"));
    void a.send(output(2, "x".repeat(4096))).catch(() => {});
    const seen: number[] = [];
    await assert.rejects(
      (async () => {
        for await (const m of b.messages()) {
          if (m.msg.case === "runEvent") seen.push(Number(m.msg.value.seq));
        }
      })(),
      (err: unknown) => err instanceof FrameError && err.kind === "oversize",
    );
    assert.deepEqual(seen, [1]);
    assert.deepEqual(metrics.rejectedReasons, ["oversize"]);
    assert.equal(await b.closed, "oversize frame");
    a.close();
  },
});

Deno.test({
  name: "FrameConnection closes on garbage bytes from the peer",
  sanitizeOps: true,
  sanitizeResources: true,
  async fn() {
    const metrics = counting();
    const { b, rawClient } = await pair({ metrics });
    await rawClient.write(new Uint8Array([5, 0xff, 0xff, 0xff, 0xff, 0xff]));
    await assert.rejects(
      (async () => {
        for await (const _ of b.messages()) { /* none */ }
      })(),
      (err: unknown) => err instanceof FrameError,
    );
    assert.equal(metrics.rejectedReasons.length, 1);
    rawClient.close();
  },
});

Deno.test({
  name: "FrameConnection refuses to send a message over maxSendBytes, and the link stays up",
  sanitizeOps: true,
  sanitizeResources: true,
  async fn() {
    const { a, b } = await pair({ maxFrameBytes: 1024, maxSendBytes: 1024 });
    await assert.rejects(a.send(output(1, "x".repeat(4096))), (err: unknown) => {
      assert.ok(err instanceof OversizeSendError);
      assert.equal(err.code, "INVALID_ARGUMENT");
      assert.equal(err.retryable, false);
      assert.equal(err.limit, 1024);
      assert.ok(err.bytes > 4096);
      assert.match(
        err.message,
        /Cannot send the message as it is \d+ bytes, over the peer's frame limit of 1024 bytes/,
      );
      return true;
    });
    await a.send(output(2, "small"));
    for await (const m of b.messages()) {
      // The refused frame never reached the peer, which did not close for it.
      assert.equal(m.msg.case === "runEvent" && Number(m.msg.value.seq), 2);
      break;
    }
    assert.equal(b.isClosed, false);
    a.close();
    b.close();
  },
});
