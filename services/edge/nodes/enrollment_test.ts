import assert from "node:assert/strict";
import { createLogger } from "../../../shared/log.ts";
import { parseEdgeConfig } from "../config.ts";
import { EdgeService } from "../service.ts";
import { type Admission, admitNode, type Seat } from "./admission.ts";

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

/** What a registering node shows besides its id and token. */
interface Shown {
  /** Its certificate's identities; absent = no mutual TLS. */
  peerIds?: string[];
  /** Its node key; default `key-<id>`, as if each test node kept its own. */
  key?: string;
}

/**
 * An Edge service over `raw`, without sockets: admissions go through its snapshot in force, as
 * the node transport's do. `changes` counts the snapshots it swapped in since.
 */
function edge(raw: Record<string, unknown>) {
  let nowMs = 1_000;
  const service = new EdgeService({
    config: parseEdgeConfig(raw, FILE),
    logger: createLogger("test", { level: "error" }),
    version: "test",
    now: () => nowMs,
  });
  const snapshots = new Set([service.config]);
  /** The seat of each id's last successful admission. */
  const seats = new Map<string, Seat>();
  return {
    enrollment: service.enrollment,
    get changes() {
      snapshots.add(service.config);
      return snapshots.size - 1;
    },
    get nodes() {
      snapshots.add(service.config);
      return service.nodeStore.list().map((n) => n.id);
    },
    advance: (ms: number) => nowMs += ms,
    admit(id: string, token: string, shown: Shown = {}): Admission {
      const admission = admitNode(
        {
          nodeId: id,
          token,
          nodeKey: shown.key ?? `key-${id}`,
          peerIds: shown.peerIds ?? [],
          mutualTls: shown.peerIds !== undefined,
        },
        service.nodeStore,
        service.enrollment,
      );
      snapshots.add(service.config);
      if (admission.ok) seats.set(id, admission.seat);
      return admission;
    },
    /** Admits and marks connected, as the transport and service do. */
    join(id: string, token = "gpu-enroll-token", shown: Shown = {}) {
      const admission = this.admit(id, token, shown);
      assert.ok(admission.ok, admission.ok ? "" : admission.reason);
      admission.seat.connected();
      return admission.record;
    },
    /** The connection of the last admission under `id` ended. */
    disconnect(id: string) {
      seats.get(id)!.release();
    },
    /** The node said it was stopping, then its link closed (a drain before an update). */
    stop(id: string) {
      seats.get(id)!.release(true);
    },
    reload(next: Record<string, unknown>) {
      service.applyConfig(parseEdgeConfig(next, FILE));
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
  // Without a rule's token a peer is told the same whether or not a rule admits the id.
  assert.deepEqual(refusal(e.admit("gpu-1", "guess")), [
    "wrong_token",
    "unknown node id 'gpu-1' or wrong node token",
  ]);
  assert.deepEqual(refusal(e.admit("cpu-1", "guess")), [
    "unknown_node",
    "unknown node id 'cpu-1' or wrong node token",
  ]);
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
  first.seat.connected();
  assert.equal(refusal(e.admit("gpu-1", "gpu-enroll-token"))[0], "duplicate");
  e.disconnect("gpu-1");
  const again = e.admit("gpu-1", "gpu-enroll-token");
  assert.ok(again.ok);
  assert.equal(again.record, first.record, "the kept record is reused");
  // An answer that could not be sent frees the id at once.
  again.seat.release();
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
  e.disconnect("gpu-2");
  e.advance(10);
  e.disconnect("gpu-1");
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
  e.disconnect("gpu-1");
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
  const cert = (...peerIds: string[]) => ({ peerIds });
  assert.ok(e.admit("gpu-1", "gpu-enroll-token", cert("enroll/gpu")).ok);
  assert.ok(e.admit("gpu-2", "gpu-enroll-token", cert("node/gpu-2")).ok);
  // The refusal names no rule: the peer may hold no rule's token.
  assert.deepEqual(refusal(e.admit("gpu-3", "gpu-enroll-token", cert("enroll/cpu"))), [
    "certificate",
    "client certificate is not for node 'gpu-3' nor for an enrollment rule admitting it " +
    "(it names enroll/cpu)",
  ]);
  // Even with the other rule's token: the certificate is checked first.
  assert.equal(refusal(e.admit("gpu-3", "cpu-enroll-token", cert("enroll/cpu")))[0], "certificate");
  assert.equal(refusal(e.admit("gpu-3", "gpu-enroll-token", cert("node/gpu-1")))[0], "certificate");
  // An id no rule admits, with another's certificate and no token: told the same.
  assert.equal(refusal(e.admit("tpu-3", "guess", cert("node/gpu-1")))[0], "certificate");
  // A listed node's id cannot be taken with an enrollment certificate.
  const listed = edge({ nodes: [LISTED], enrollment: [gpuRule({ node_ids: ["*"] })] });
  assert.deepEqual(refusal(listed.admit("n1", "n1-token", cert("enroll/gpu"))), [
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
  e.disconnect("gpu-3");
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

Deno.test("a long claimed id is refused by its shape before any pattern is matched against it", () => {
  // Many stars: as a backtracking regular expression, each of these ids would take hours.
  const e = edge({ enrollment: [gpuRule({ node_ids: ["*-*-*-*-*-*-*-*-x"] })] });
  const long = "-".repeat(16_000);
  // A peer without a rule's token learns nothing of the rules, and sees its id clipped.
  assert.deepEqual(refusal(e.admit(long, "guess")), [
    "unknown_node",
    `unknown node id '${"-".repeat(128)}… (16000 chars)' or wrong node token`,
  ]);
  const [code, reason] = refusal(e.admit(long, "gpu-enroll-token"));
  assert.equal(code, "invalid_id");
  assert.ok(reason.length < 400, reason);
  // The longest id that may enroll is matched at once too.
  const longest = `a${"-".repeat(127)}`;
  assert.equal(refusal(e.admit(longest, "guess"))[0], "unknown_node");
  assert.equal(refusal(e.admit(longest, "gpu-enroll-token"))[0], "id_not_admitted");
  assert.ok(e.admit(`${longest.slice(0, -1)}x`, "gpu-enroll-token").ok);
});

Deno.test("a late release from an earlier admission leaves a newer one under the same id alone", () => {
  const e = edge({ enrollment: [gpuRule({ retain_disconnected_ms: 0 })] });
  const first = e.admit("gpu-1", "gpu-enroll-token");
  assert.ok(first.ok);
  first.seat.connected();
  first.seat.release();
  // Readmitted: the same record, a new admission; the old seat no longer moves it.
  const second = e.admit("gpu-1", "gpu-enroll-token");
  assert.ok(second.ok);
  first.seat.release();
  assert.equal(refusal(e.admit("gpu-1", "gpu-enroll-token"))[0], "duplicate");
  second.seat.release();
  // The record goes; a new one is made for the next node, which an old seat cannot free.
  e.advance(1);
  e.enrollment.prune();
  assert.deepEqual(e.nodes, []);
  const third = e.admit("gpu-1", "gpu-enroll-token");
  assert.ok(third.ok);
  second.seat.release();
  assert.equal(refusal(e.admit("gpu-1", "gpu-enroll-token"))[0], "duplicate");
});

Deno.test("another holder of the rule's token cannot take a kept id: it is bound to its node's key", () => {
  const e = edge({ enrollment: [gpuRule()] });
  e.join("gpu-1", "gpu-enroll-token", { key: "real-key" });
  e.disconnect("gpu-1"); // a blip
  for (const key of ["impostor-key", ""]) {
    const [code, reason] = refusal(e.admit("gpu-1", "gpu-enroll-token", { key }));
    assert.equal(code, "id_held");
    assert.equal(
      reason,
      "node id 'gpu-1' is held by the node that enrolled under it (rule 'gpu'): a registration " +
        "under it must show that node's node key until its record goes (the rule's " +
        "retain_disconnected_ms after it disconnected)",
    );
  }
  // The real node comes back; while it is connected the impostor is told it is held, not busy.
  e.join("gpu-1", "gpu-enroll-token", { key: "real-key" });
  assert.equal(
    refusal(e.admit("gpu-1", "gpu-enroll-token", { key: "impostor-key" }))[0],
    "id_held",
  );
  // Once the record went, the id is free for whoever enrolls next.
  e.disconnect("gpu-1");
  e.advance(15 * 60_000 + 1);
  assert.ok(e.admit("gpu-1", "gpu-enroll-token", { key: "impostor-key" }).ok);
});

Deno.test("a node that stopped gives up its id: its replacement, with a new key, enrolls at once", () => {
  const e = edge({ enrollment: [gpuRule()] });
  e.join("gpu-host-1", "gpu-enroll-token", { key: "old-container" });
  e.stop("gpu-host-1");
  e.join("gpu-host-1", "gpu-enroll-token", { key: "new-container" });
  e.disconnect("gpu-host-1"); // a blip of the new one: now bound to its key
  assert.equal(
    refusal(e.admit("gpu-host-1", "gpu-enroll-token", { key: "old-container" }))[0],
    "id_held",
  );
});

Deno.test("a node that enrolled with its own certificate must show it again to come back", () => {
  const e = edge({ enrollment: [gpuRule()] });
  e.join("gpu-1", "gpu-enroll-token", { peerIds: ["node/gpu-1"], key: "k" });
  e.disconnect("gpu-1");
  const [code, reason] = refusal(
    e.admit("gpu-1", "gpu-enroll-token", { peerIds: ["enroll/gpu"], key: "k" }),
  );
  assert.equal(code, "id_held");
  assert.match(reason, /must show that node's certificate naming iop:\/\/node\/<id> until/);
  assert.ok(e.admit("gpu-1", "gpu-enroll-token", { peerIds: ["node/gpu-1"], key: "k" }).ok);
  // An older node sending no key, with the rule's certificate, binds its id to nothing.
  e.join("gpu-2", "gpu-enroll-token", { peerIds: ["enroll/gpu"], key: "" });
  e.disconnect("gpu-2");
  assert.ok(e.admit("gpu-2", "gpu-enroll-token", { peerIds: ["enroll/gpu"], key: "other" }).ok);
});
