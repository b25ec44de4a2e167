/**
 * The `{node}` placeholder of enrollment templates: a rule's `template` (the keys of a `nodes[]`
 * entry minus `id` and `token`) is written once and expanded for each node that enrolls under
 * the rule by replacing `{node}` with the node's id in every string of it, keys excepted.
 * Parsing the expanded template is the config's job (`enrolledRecord` in `enrollment_config.ts`).
 * @module
 */

/** The text replaced by the enrolling node's id. */
export const NODE_PLACEHOLDER = "{node}";

/**
 * Ids a node may enroll under: what a certificate's `iop://node/<id>`, a host name or a file name
 * can carry (a listed node's id has no such limit, being written by the operator).
 */
export const ENROLLABLE_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/** Characters of a `node_ids` pattern: an enrollable id with `*` wildcards. */
export const NODE_ID_PATTERN = /^[A-Za-z0-9._*-]+$/;

/** A deep copy of `value` with `{node}` replaced by `nodeId` in every string (not in keys). */
export function substituteNode(value: unknown, nodeId: string): unknown {
  if (typeof value === "string") return value.replaceAll(NODE_PLACEHOLDER, () => nodeId);
  if (Array.isArray(value)) return value.map((item) => substituteNode(item, nodeId));
  if (typeof value === "object" && value !== null) {
    return Object.fromEntries(
      Object.entries(value).map(([key, item]) => [key, substituteNode(item, nodeId)]),
    );
  }
  return value;
}

/**
 * An id the first of `patterns` admits (`*` read as `sample`), for checking a template at config
 * load: a template that fails for it would fail for the nodes it is meant for.
 */
export function sampleNodeId(patterns: readonly string[]): string {
  return (patterns[0] ?? "sample").replaceAll("*", "sample");
}
