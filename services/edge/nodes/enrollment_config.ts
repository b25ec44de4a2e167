/**
 * The Edge config's `enrollment` list: the rules by which nodes not listed under `nodes` join
 * (`enrollment.ts`), and the record a node gets under a rule (its template with `{node}`
 * replaced, read like a `nodes[]` entry).
 * @module
 */
import { ConfigError, ConfigReader } from "../../../shared/config.ts";
import { readStoredSecret, secretFingerprint } from "../../../shared/secrets.ts";
import { ENROLLMENT_RULE_NAME } from "../../../shared/wire/tls.ts";
import type { EnrollmentRule, NodeRecord } from "../config.ts";
import { checkUnique } from "../config_unique.ts";
import {
  ENROLLABLE_ID,
  NODE_ID_PATTERN,
  NODE_PLACEHOLDER,
  sampleNodeId,
  substituteNode,
} from "./enrollment_template.ts";
import { parseNode } from "./node_config.ts";

/**
 * The `enrollment` list. Each rule's template is checked by expanding it for a sample id the rule
 * admits; names are unique; tokens differ from each other and from every node's, as secrets.
 */
export function readEnrollment(
  root: ConfigReader,
  raw: unknown,
  nodes: readonly NodeRecord[],
): EnrollmentRule[] {
  const entries = (raw as { enrollment?: unknown[] } | undefined)?.enrollment;
  const rules = root.list("enrollment").map((r, i) => readEnrollmentRule(r, entries?.[i]));
  checkUnique(root.file, rules.map((rule) => [`${rule.path}.name`, rule.name]), "enrollment rule");
  const seen = new Map(nodes.map((n, i) => [secretFingerprint(n.token), `nodes[${i}].token`]));
  for (const rule of rules) {
    const first = seen.get(secretFingerprint(rule.token));
    if (first !== undefined) {
      throw new ConfigError(
        root.file,
        `${rule.path}.token`,
        `is the same secret as ${first}: every rule and node needs a token of its own`,
      );
    }
    seen.set(secretFingerprint(rule.token), `${rule.path}.token`);
  }
  return rules;
}

function readEnrollmentRule(r: ConfigReader, raw: unknown): EnrollmentRule {
  const name = r.nonEmpty("name");
  if (!ENROLLMENT_RULE_NAME.test(name)) {
    throw r.error(
      "name",
      `must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit: current value is '${name}'`,
    );
  }
  const nodeIds = r.strings("node_ids");
  if (nodeIds.length === 0) throw r.error("node_ids", "must list at least one id pattern");
  nodeIds.forEach((pattern, i) => {
    if (!NODE_ID_PATTERN.test(pattern)) {
      throw r.error(
        `node_ids[${i}]`,
        `must use only letters, digits, '.', '_', '-' and '*': current value is '${pattern}'`,
      );
    }
  });
  if (!r.has("template")) {
    throw r.error("template", "is required: what every node enrolled under the rule serves");
  }
  const template = r.section("template");
  for (const key of ["id", "token"]) {
    if (template.has(key)) {
      throw template.error(
        key,
        "must not be set: an enrolling node gives its own id and presents the rule's token",
      );
    }
  }
  // Two nodes of one rule must not end up with the same alias or provider id.
  if (template.has("alias") && !template.string("alias").includes(NODE_PLACEHOLDER)) {
    throw template.error(
      "alias",
      `must contain ${NODE_PLACEHOLDER}: each enrolled node needs an alias of its own`,
    );
  }
  template.list("providers").forEach((p) => {
    if (p.has("id") && !p.string("id").includes(NODE_PLACEHOLDER)) {
      throw p.error(
        "id",
        `must contain ${NODE_PLACEHOLDER}: each enrolled node needs provider ids of its own`,
      );
    }
  });
  const rule: Omit<EnrollmentRule, "sample"> = {
    name,
    // Plain or sha256:<hex> (`deno task hash-secret`), like a node token.
    token: readStoredSecret(r, "token"),
    nodeIds,
    maxNodes: r.number("max_nodes", 256, { min: 1 }),
    retainDisconnectedMs: r.number("retain_disconnected_ms", 15 * 60_000, { min: 0 }),
    template: structuredClone((raw as { template: Record<string, unknown> }).template),
    path: r.path,
  };
  const sampleId = sampleNodeId(nodeIds);
  if (!ENROLLABLE_ID.test(sampleId)) {
    throw r.error(
      "node_ids[0]",
      `must admit ids of letters, digits, '.', '_' and '-' (at most 128): '${sampleId}' is not one`,
    );
  }
  return { ...rule, sample: enrolledRecord(rule, sampleId, r.file) };
}

/**
 * The record a node with id `nodeId` gets under `rule`: the template with `{node}` replaced,
 * read and checked like a `nodes[]` entry; a {@linkcode ConfigError} names the template key.
 */
export function enrolledRecord(
  rule: Omit<EnrollmentRule, "sample">,
  nodeId: string,
  file: string,
): NodeRecord {
  const expanded = substituteNode(rule.template, nodeId) as Record<string, unknown>;
  const reader = new ConfigReader(
    file,
    { ...expanded, id: nodeId, token: rule.token },
    `${rule.path}.template`,
  );
  return { ...parseNode(reader), enrolledBy: rule.name };
}
