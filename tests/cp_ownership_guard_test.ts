/**
 * Ownership guard (SPEC §2): the Control Plane owns only the connection view, command results
 * and audit. Its contract and its registry must carry no node token, node address or edge
 * configuration. This walks the generated descriptors of control.proto and the data a live
 * registry holds after real edges attached and ran a command.
 */
import assert from "node:assert/strict";
import { create, type DescMessage, toJson } from "@bufbuild/protobuf";
import {
  EdgeCommandRequestSchema,
  EdgeSelectorSchema,
  EdgeViewSchema,
  file_iop_v1_control,
  RelayedEventSchema,
} from "../proto/gen/iop/v1/control_pb.ts";
import { startControlPlane } from "../services/cp/control_plane.ts";
import { startCpEdge, testCpConfig } from "./cp_harness.ts";
import { until } from "./util.ts";
import { quiet } from "./stack.ts";

/** Name parts that mean a secret, a network location or configuration. */
const FORBIDDEN_PARTS = new Set([
  "token",
  "address",
  "addr",
  "host",
  "hostname",
  "port",
  "config",
  "configuration",
  "credential",
  "secret",
  "password",
  "key",
  "url",
  "endpoint",
  "remote",
  "ip",
]);

/** Fields allowed despite a forbidden part, each with its reason. */
const ALLOWED = new Map([
  [
    "iop.v1.EdgeHello.credential",
    "the edge's own login to the control plane; checked, never stored",
  ],
  [
    "iop.v1.ClientHello.credential",
    "an operator's access token for this control plane; checked, never stored",
  ],
]);

/** Splits snake_case or camelCase into lower-case parts. */
function parts(name: string): string[] {
  return name.replace(/([a-z0-9])([A-Z])/g, "$1_$2").toLowerCase().split(/[_\W]+/).filter(Boolean);
}

function forbidden(name: string): boolean {
  return parts(name).some((p) => FORBIDDEN_PARTS.has(p));
}

function allMessages(messages: readonly DescMessage[]): DescMessage[] {
  return messages.flatMap((m) => [m, ...allMessages(m.nestedMessages)]);
}

/** Every object key in a JSON value, with its path. */
function keysOf(value: unknown, path = "$"): [string, string][] {
  if (Array.isArray(value)) return value.flatMap((v, i) => keysOf(v, `${path}[${i}]`));
  if (value && typeof value === "object") {
    return Object.entries(value).flatMap(([k, v]) =>
      [[`${path}.${k}`, k], ...keysOf(v, `${path}.${k}`)] as [string, string][]
    );
  }
  return [];
}

Deno.test("the guard's name check flags tokens, addresses and config and passes summary names", () => {
  for (
    const bad of [
      "node_token",
      "nodeAddress",
      "host",
      "listen_port",
      "edgeConfig",
      "api_key",
      "base_url",
    ]
  ) {
    assert.ok(forbidden(bad), `${bad} is flagged`);
  }
  for (
    const good of [
      "report",
      "support",
      "edge_id",
      "in_flight",
      "queued",
      "adapter_kind",
      "last_seen_ms",
    ]
  ) {
    assert.ok(!forbidden(good), `${good} passes`);
  }
});

Deno.test("Control Plane contracts carry no token, address or config field and reference no Edge↔Node message", () => {
  const violations: string[] = [];
  const allowedSeen = new Set<string>();
  const messages = allMessages(file_iop_v1_control.messages);
  assert.ok(messages.length > 20, "the walk sees the whole contract");
  for (const message of messages) {
    if (forbidden(message.name)) violations.push(`message ${message.typeName}`);
    for (const field of message.fields) {
      const id = `${message.typeName}.${field.name}`;
      if (forbidden(field.name)) {
        if (ALLOWED.has(id)) allowedSeen.add(id);
        else violations.push(`field ${id}`);
      }
      const ref = field.message;
      if (ref && ref.file.name !== "iop/v1/control" && ref.file.name !== "iop/v1/common") {
        violations.push(`field ${id} references ${ref.typeName} from ${ref.file.name}`);
      }
    }
  }
  assert.deepEqual(violations, []);
  assert.deepEqual(
    [...allowedSeen].sort(),
    [...ALLOWED.keys()].sort(),
    "every allowance is still needed",
  );
  assert.deepEqual(
    file_iop_v1_control.dependencies.map((d) => d.name),
    ["iop/v1/common"],
    "control.proto does not import the Edge↔Node contract",
  );
});

Deno.test("the registry's stored data holds no node token, node address, credential or config key", async () => {
  await using cp = await startControlPlane(await testCpConfig(":memory:"), { logger: quiet("cp") });
  await using edge = await startCpEdge({ edgeId: "edge-guard", cpAddress: cp.wireAddress });
  await until(
    "the edge's status with its node",
    () => cp.registry.get("edge-guard")?.status?.nodes[0]?.connected ? true : undefined,
  );
  const command = cp.commands.submit({
    selector: create(EdgeSelectorSchema, { all: true }),
    // Built with create() so that fields added to the contract later keep their defaults.
    command: create(EdgeCommandRequestSchema, {
      kind: { case: "agent", value: { agentId: "deployer", command: "deploy", input: "v9" } },
    }),
    actor: "guard",
    via: "http",
  });
  await until("the command to finish", () => command.outcome === "running" ? undefined : true);
  await until(
    "run summaries relayed",
    () => cp.registry.events("edge-guard")?.some((e) => e.event.case === "run") ? true : undefined,
  );

  const stored = {
    edges: cp.registry.list().map((v) => toJson(EdgeViewSchema, v, { alwaysEmitImplicit: true })),
    events: (cp.registry.events("edge-guard") ?? []).map((e) =>
      toJson(RelayedEventSchema, e, { alwaysEmitImplicit: true })
    ),
  };
  const badKeys = keysOf(stored).filter(([, key]) => forbidden(key)).map(([path]) => path);
  assert.deepEqual(badKeys, []);
  const text = JSON.stringify(stored);
  assert.ok(text.includes("edge-guard-node"), "the walk sees the node the edge reported");
  assert.ok(text.includes("deployer"), "the walk sees the agent the edge reported");
  assert.ok(!text.includes(edge.nodeToken), "no node token");
  assert.ok(!text.includes(`:${edge.nodeWire.port}`), "no node wire address");
  assert.ok(!text.includes("test-edge-credential"), "no edge credential");
  assert.ok(!text.includes('echo \\"deploying'), "no CLI profile definition from the edge config");
});
