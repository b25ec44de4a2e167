/**
 * The shipped node configs allow exactly what their edges push: every adapter of the sample
 * edge configs passes the node's policy (read the way a Node reads it, from the pushed
 * payload), and the policy allows nothing those adapters do not use.
 * @module
 */
import assert from "node:assert/strict";
import { loadEdgeConfig, type NodeRecord, parseEdgeConfig } from "../services/edge/config.ts";
import { buildNodeConfigPayload } from "../services/edge/nodes/mapper.ts";
import { loadNodeConfig } from "../services/node/config.ts";
import { applyNodePolicy, type NodePolicy } from "../services/node/policy.ts";
import { fromConfigPayload } from "../services/node/transport/config_payload.ts";
import { policyFor } from "./stack.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const none = () => undefined;

/** The refusals a node with `policy` answers to what the Edge pushes for `record`. */
function refusals(policy: NodePolicy, record: NodeRecord): Record<string, string> {
  const pushed = fromConfigPayload(buildNodeConfigPayload(record, { heartbeatIntervalMs: 2000 }));
  assert.deepEqual(pushed.rejected, {});
  return applyNodePolicy(policy, pushed.adapters, ROOT).refused;
}

/** The policy allowing exactly what `records` push, each list sorted. */
function usedBy(records: NodeRecord[]): NodePolicy {
  const each = records.map(policyFor);
  const union = (pick: (p: NodePolicy) => readonly string[]) =>
    [...new Set(each.flatMap(pick))].sort();
  return {
    adapterKinds: union((p) => p.adapterKinds) as NodePolicy["adapterKinds"][number][],
    cli: { commands: union((p) => p.cli.commands), cwd: union((p) => p.cli.cwd) },
    apiKeyEnv: union((p) => p.apiKeyEnv),
    backendHosts: union((p) => p.backendHosts),
    isDefault: false,
  };
}

function sorted(policy: NodePolicy): NodePolicy {
  return {
    adapterKinds: [...policy.adapterKinds].sort(),
    cli: { commands: [...policy.cli.commands].sort(), cwd: [...policy.cli.cwd].sort() },
    apiKeyEnv: [...policy.apiKeyEnv].sort(),
    backendHosts: [...policy.backendHosts].sort(),
    isDefault: policy.isDefault,
  };
}

Deno.test("deploy/config/node.yaml allows exactly what deploy/config/edge.yaml pushes", async () => {
  const edge = await loadEdgeConfig(`${ROOT}/deploy/config/edge.yaml`, none);
  const node = await loadNodeConfig(`${ROOT}/deploy/config/node.yaml`, none);
  const record = edge.nodes.find((n) => n.id === node.node.id)!;
  assert.deepEqual(refusals(node.policy, record), {});
  assert.deepEqual(sorted(node.policy), usedBy([record]));
});

Deno.test("compose/config/node.yaml allows exactly what edge-a and edge-b push to their nodes", async () => {
  const node = await loadNodeConfig(`${ROOT}/compose/config/node.yaml`, none);
  const records: NodeRecord[] = [];
  for (const file of ["edge-a.yaml", "edge-b.yaml"]) {
    records.push(...(await loadEdgeConfig(`${ROOT}/compose/config/${file}`, none)).nodes);
  }
  assert.deepEqual(records.map((r) => r.id), ["node-a1", "node-a2", "node-b1"]);
  for (const record of records) assert.deepEqual(refusals(node.policy, record), {}, record.id);
  assert.deepEqual(sorted(node.policy), usedBy(records));
});

Deno.test("compose/config/gpu-node.yaml allows exactly the edge config compose/README.md gives it", async () => {
  const node = await loadNodeConfig(`${ROOT}/compose/config/gpu-node.yaml`, none);
  // The `nodes:` entry of compose/README.md's "GPU host" section.
  const record = parseEdgeConfig({
    nodes: [{
      id: "gpu-01",
      token: "secret",
      adapters: [
        { name: "ollama", kind: "ollama", base_url: "http://ollama:11434" },
        { name: "vllm", kind: "vllm", base_url: "http://vllm:8000" },
      ],
    }],
  }, "README.md").nodes[0]!;
  assert.deepEqual(refusals(node.policy, record), {});
  assert.deepEqual(sorted(node.policy), usedBy([record]));
});
