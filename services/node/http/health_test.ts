import assert from "node:assert/strict";
import { Registry } from "prom-client";
import { DRAINING_REASON } from "../drain.ts";
import { createNodeHttp, type NodeHealth } from "./health.ts";

function readyz(health: NodeHealth): Promise<Response> {
  return Promise.resolve(createNodeHttp(health, new Registry()).request("/readyz"));
}

Deno.test("a registered node is ready until it starts stopping, then answers 503 saying why", async () => {
  const state: { stopping?: string } = {};
  const health: NodeHealth = {
    nodeId: "n1",
    registered: () => true,
    inFlight: () => 2,
    stopping: () => state.stopping,
  };
  const ready = await readyz(health);
  assert.equal(ready.status, 200);
  assert.equal((await ready.json()).status, "ready");
  state.stopping = DRAINING_REASON;
  const draining = await readyz(health);
  assert.equal(draining.status, 503);
  assert.deepEqual(await draining.json(), {
    status: "stopping: it finishes its runs in flight and takes no new one",
    node_id: "n1",
    runs_in_flight: 2,
  });
});
