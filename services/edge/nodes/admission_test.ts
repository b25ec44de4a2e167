import assert from "node:assert/strict";
import { createLogger } from "../../../shared/log.ts";
import { hashSecret } from "../../../shared/secrets.ts";
import { parseEdgeConfig } from "../config.ts";
import { type Admission, admitNode, LISTED_SEAT, shownId } from "./admission.ts";
import { Enrollment } from "./enrollment.ts";
import { NodeStore } from "./node_store.ts";

function listed(nodes: Record<string, unknown>[]) {
  const config = parseEdgeConfig({ nodes }, "edge.yaml");
  const store = new NodeStore(config.nodes);
  const enrollment = new Enrollment(config, {
    logger: createLogger("test", { level: "error", writer: () => {} }),
    onChange: () => {},
  });
  return (nodeId: string, token: string): Admission =>
    admitNode({ nodeId, token, nodeKey: "", peerIds: [], mutualTls: false }, store, enrollment);
}

const node = (id: string, token: string, alias?: string) => ({
  id,
  token,
  ...(alias ? { alias } : {}),
  adapters: [{ kind: "mock" }],
});

Deno.test("a listed node is admitted by its own id and token, plain or stored as its hash", () => {
  const admit = listed([node("a", "a-token"), node("b", hashSecret("plain-b"))]);
  const a = admit("a", "a-token");
  assert.ok(a.ok);
  assert.equal(a.record.id, "a");
  assert.equal(a.seat, LISTED_SEAT);
  assert.ok(admit("b", "plain-b").ok);
  assert.deepEqual(admit("b", hashSecret("plain-b")), {
    ok: false,
    code: "wrong_token",
    reason: "unknown node token",
  });
});

Deno.test("a listed node is refused another node's token, an empty one, and its alias as id", () => {
  const admit = listed([node("a", "a-token", "gpu"), node("b", "b-token")]);
  assert.equal((admit("a", "b-token") as { code: string }).code, "wrong_token");
  assert.equal((admit("a", "") as { code: string }).code, "wrong_token");
  assert.deepEqual(admit("gpu", "a-token"), {
    ok: false,
    code: "unknown_node",
    reason: "unknown node id 'gpu' or wrong node token",
  });
});

Deno.test("shownId() clips a long claimed id and says how long it was", () => {
  assert.equal(shownId("n1"), "n1");
  assert.equal(shownId("x".repeat(128)), "x".repeat(128));
  assert.equal(shownId("x".repeat(16_000)), `${"x".repeat(128)}… (16000 chars)`);
});
