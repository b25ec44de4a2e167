import assert from "node:assert/strict";
import { createLogger } from "../../../shared/log.ts";
import { type EdgeConfig, parseEdgeConfig } from "../config.ts";
import { type Admission, admitNode } from "./admission.ts";
import { Enrollment } from "./enrollment.ts";
import { NodeStore } from "./node_store.ts";

const FILE = "edge.yaml";

function gpuRule(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    name: "gpu",
    token: "gpu-enroll-token",
    node_ids: ["gpu-*"],
    template: {
      alias: "{node}-box",
      adapters: [{ name: "mock", kind: "mock" }],
      providers: [{ id: "{node}-llama", adapter: "mock", target: "demo", model_group: "llama" }],
    },
    ...extra,
  };
}

const LISTED = { id: "n1", alias: "gpu-9", token: "n1-token", adapters: [{ kind: "mock" }] };

/** A listed node without an alias. */
function listed(id: string) {
  return { id, token: "n1-token", adapters: [{ kind: "mock" }] };
}

/** An Enrollment over `raw`, with the snapshot in force rebuilt the way the service does. */
function edge(raw: Record<string, unknown>) {
  let file: EdgeConfig = parseEdgeConfig(raw, FILE);
  let nowMs = 1_000;
  let changes = 0;
  let store = new NodeStore(file.nodes);
  const enrollment = new Enrollment(file, {
    logger: createLogger("test", { level: "error" }),
    now: () => nowMs,
    onChange: () => {
      changes++;
      store = new NodeStore(enrollment.overlay(file).nodes);
    },
  });
  return {
    enrollment,
    get changes() {
      return changes;
    },
    get nodes() {
      return store.list().map((n) => n.id);
    },
    advance: (ms: number) => nowMs += ms,
    admit: (id: string, token: string, peerIds?: string[]): Admission =>
      admitNode(
        { nodeId: id, token, peerIds: peerIds ?? [], mutualTls: peerIds !== undefined },
        store,
        enrollment,
      ),
    /** Admits and marks connected, as the transport and service do. */
    join(id: string, token = "gpu-enroll-token") {
      const admission = this.admit(id, token);
      assert.ok(admission.ok, admission.ok ? "" : admission.reason);
      enrollment.connected(id);
      return admission.record;
    },
    reload(next: Record<string, unknown>) {
      file = parseEdgeConfig(next, FILE);
      enrollment.rebase(file);
      store = new NodeStore(enrollment.overlay(file).nodes);
    },
  };
}

function refusal(admission: Admission): [string, string] {
  assert.ok(!admission.ok, "expected a refusal");
  return [admission.code, admission.reason];
}

Deno.test("a node matching a rule with its token enrolls with the expanded template", () => {
  const e = edge({ nodes: [LISTED], enrollment: [gpuRule()] });
  const record = e.join("gpu-1");
  assert.equal(record.alias, "gpu-1-box");
  assert.equal(record.enrolledBy, "gpu");
  assert.deepEqual(record.providers.map((p) => p.id), ["gpu-1-llama"]);
  assert.deepEqual(e.nodes, ["n1", "gpu-1"]);
  assert.equal(e.changes, 1);
  const second = e.join("gpu-2");
  assert.equal(second.alias, "gpu-2-box");
  assert.deepEqual(e.nodes, ["n1", "gpu-1", "gpu-2"]);
});

Deno.test("a listed node is admitted by its own token and never enrolled", () => {
  const e = edge({
    nodes: [listed("gpu-0")],
    enrollment: [gpuRule()],
  });
  assert.equal(e.admit("gpu-0", "n1-token").ok, true);
  assert.deepEqual(refusal(e.admit("gpu-0", "gpu-enroll-token")), [
    "wrong_token",
    "unknown node token",
  ]);
  assert.equal(e.changes, 0);
});

Deno.test("a wrong token, an unknown id or an id outside the rule is refused with its reason", () => {
  const e = edge({ enrollment: [gpuRule()] });
  assert.deepEqual(refusal(e.admit("gpu-1", "guess")), ["wrong_token", "unknown node token"]);
  assert.deepEqual(refusal(e.admit("cpu-1", "guess")), ["unknown_node", "unknown node id 'cpu-1'"]);
  // Only a holder of the rule's token learns which ids the rule admits.
  assert.deepEqual(refusal(e.admit("cpu-1", "gpu-enroll-token")), [
    "id_not_admitted",
    "node id 'cpu-1' is not admitted by enrollment rule 'gpu' (node_ids: gpu-*)",
  ]);
  assert.deepEqual(e.nodes, []);
});

Deno.test("an id that is not host-like cannot be enrolled, even under a `*` rule", () => {
  const e = edge({ enrollment: [gpuRule({ node_ids: ["*"] })] });
  const [code, reason] = refusal(e.admit("gpu/../1", "gpu-enroll-token"));
  assert.equal(code, "invalid_id");
  assert.match(reason, /^node id 'gpu\/\.\.\/1' cannot be enrolled: it must be 1 to 128 letters/);
});

Deno.test("an enrolled record may not take a name another node has", () => {
  const e = edge({ nodes: [LISTED], enrollment: [gpuRule({ template: { alias: "{node}" } })] });
  assert.deepEqual(refusal(e.admit("gpu-9", "gpu-enroll-token")), [
    "name_taken",
    "cannot enroll node 'gpu-9': the name 'gpu-9' is already another node's id or alias",
  ]);
});

Deno.test("a second node cannot take a connected enrolled id; after it disconnects it can", () => {
  const e = edge({ enrollment: [gpuRule()] });
  const first = e.admit("gpu-1", "gpu-enroll-token");
  assert.ok(first.ok);
  // Registering (answer not yet sent) counts as connected.
  const [code, reason] = refusal(e.admit("gpu-1", "gpu-enroll-token"));
  assert.equal(code, "duplicate");
  assert.match(reason, /node 'gpu-1' enrolled under rule 'gpu' is connected already/);
  e.enrollment.connected("gpu-1");
  assert.equal(refusal(e.admit("gpu-1", "gpu-enroll-token"))[0], "duplicate");
  e.enrollment.disconnected("gpu-1");
  const again = e.admit("gpu-1", "gpu-enroll-token");
  assert.ok(again.ok);
  assert.equal(again.record, first.record, "the kept record is reused");
  // An answer that could not be sent frees the id at once.
  again.release();
  assert.ok(e.admit("gpu-1", "gpu-enroll-token").ok);
});

Deno.test("max_nodes holds: a full rule refuses, or makes room by its longest-disconnected record", () => {
  const e = edge({ enrollment: [gpuRule({ max_nodes: 2 })] });
  e.join("gpu-1");
  e.join("gpu-2");
  assert.deepEqual(refusal(e.admit("gpu-3", "gpu-enroll-token")), [
    "rule_full",
    "enrollment rule 'gpu' is full: its 2 nodes (max_nodes) are connected",
  ]);
  e.enrollment.disconnected("gpu-2");
  e.advance(10);
  e.enrollment.disconnected("gpu-1");
  e.join("gpu-3");
  assert.deepEqual(e.nodes, ["gpu-1", "gpu-3"], "gpu-2 was away longest");
  e.join("gpu-4");
  assert.deepEqual(e.nodes, ["gpu-3", "gpu-4"]);
  assert.equal(refusal(e.admit("gpu-5", "gpu-enroll-token"))[0], "rule_full");
});

Deno.test("a disconnected enrolled node keeps its record for retain_disconnected_ms", () => {
  const e = edge({ enrollment: [gpuRule({ retain_disconnected_ms: 60_000 })] });
  e.join("gpu-1");
  e.join("gpu-2");
  e.enrollment.disconnected("gpu-1");
  e.advance(60_000);
  e.enrollment.prune();
  assert.deepEqual(e.nodes, ["gpu-1", "gpu-2"]);
  e.advance(1);
  const before = e.changes;
  e.enrollment.prune();
  assert.deepEqual(e.nodes, ["gpu-2"], "the connected one stays however long");
  assert.equal(e.changes, before + 1);
});

Deno.test("with mutual TLS the certificate must name the node or the rule admitting it", () => {
  const e = edge({
    enrollment: [gpuRule(), {
      ...gpuRule(),
      name: "cpu",
      token: "cpu-enroll-token",
      node_ids: ["cpu-*"],
    }],
  });
  assert.ok(e.admit("gpu-1", "gpu-enroll-token", ["enroll/gpu"]).ok);
  assert.ok(e.admit("gpu-2", "gpu-enroll-token", ["node/gpu-2"]).ok);
  assert.deepEqual(refusal(e.admit("gpu-3", "gpu-enroll-token", ["enroll/cpu"])), [
    "certificate",
    "client certificate is not for node 'gpu-3' or enrollment rule 'gpu' (it names enroll/cpu)",
  ]);
  // Even with the other rule's token: the certificate is checked first.
  assert.equal(refusal(e.admit("gpu-3", "cpu-enroll-token", ["enroll/cpu"]))[0], "certificate");
  assert.equal(refusal(e.admit("gpu-3", "gpu-enroll-token", ["node/gpu-1"]))[0], "certificate");
  // A listed node's id cannot be taken with an enrollment certificate.
  const listed = edge({ nodes: [LISTED], enrollment: [gpuRule({ node_ids: ["*"] })] });
  assert.deepEqual(refusal(listed.admit("n1", "n1-token", ["enroll/gpu"])), [
    "certificate",
    "client certificate is not for node 'n1' (it names enroll/gpu)",
  ]);
});

Deno.test("a reload keeps records its rules still admit, rebuilt, and drops the others", () => {
  const rules = [gpuRule({ node_ids: ["gpu-*"] })];
  const e = edge({ enrollment: rules });
  e.join("gpu-1");
  e.join("gpu-2");
  e.join("gpu-3");
  e.enrollment.disconnected("gpu-3");
  const template = { alias: "{node}-new", adapters: [{ name: "mock", kind: "mock" }] };
  e.reload({
    nodes: [listed("gpu-2")],
    enrollment: [gpuRule({ template, max_nodes: 1 })],
  });
  // gpu-2 is listed now; of gpu-1 (connected) and gpu-3 (away) max_nodes 1 keeps the connected.
  assert.deepEqual(e.nodes, ["gpu-2", "gpu-1"]);
  assert.deepEqual(e.enrollment.records().map((r) => [r.id, r.alias, r.providers.length]), [
    ["gpu-1", "gpu-1-new", 0],
  ]);
  e.reload({ enrollment: [] });
  assert.deepEqual(e.nodes, []);
});
