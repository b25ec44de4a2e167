/**
 * Reading a node record of the Edge config: its adapters (each kind's settings checked by the
 * kind, `shared/adapter_kinds/`) and its providers.
 * @module
 */
import type { ConfigReader } from "../../../shared/config.ts";
import { readStoredSecret } from "../../../shared/secrets.ts";
import { ADAPTER_KIND_NAMES, adapterKind } from "../../../shared/adapter_kinds/catalog.ts";
import type { NodeAdapterRecord, NodeRecord } from "../config.ts";
import { checkUnique } from "../config_unique.ts";

/**
 * Reads one node record: a `nodes[]` entry, or an enrollment template expanded for a node
 * (`enrollment_config.ts`); a {@linkcode ConfigError} names the bad key.
 */
export function parseNode(r: ConfigReader): NodeRecord {
  const adapters = r.list("adapters").map(parseAdapter);
  checkUnique(
    r.file,
    adapters.map((a, i) => [`${r.path}.adapters[${i}].name`, a.name]),
    "adapter name",
  );
  const providers = r.list("providers").map((p) => ({
    id: p.nonEmpty("id"),
    adapter: p.nonEmpty("adapter"),
    target: p.nonEmpty("target"),
    modelGroup: p.string("model_group", ""),
    maxConcurrency: p.number("max_concurrency", 1, { min: 1 }),
  }));
  providers.forEach((p, j) => {
    const matches = adapters.filter((a) => a.name === p.adapter);
    const path = `providers[${j}].adapter`;
    if (matches.length === 0) {
      throw r.error(path, `adapter '${p.adapter}' is not defined on this node`);
    }
    if (!matches[0]!.enabled) {
      throw r.error(path, `adapter '${p.adapter}' is disabled on this node`);
    }
    // A pool queues and caps its providers; a CLI run must start at once or be refused.
    if (matches[0]!.kind === "cli") {
      throw r.error(
        path,
        `'${p.adapter}' is a cli adapter; CLI profiles are never queued: expose them with a direct model route`,
      );
    }
  });
  if (r.has("max_concurrent_runs")) {
    throw r.error(
      "max_concurrent_runs",
      "was removed: a node no longer caps its runs; concurrency is limited per provider by " +
        "providers[].max_concurrency (pool models queue on it), and direct routes run at once",
    );
  }
  return {
    id: r.nonEmpty("id"),
    // Absent means no alias; one written out must name something.
    alias: r.has("alias") ? r.nonEmpty("alias") : "",
    // Plain or sha256:<hex> (`deno task hash-secret`); a malformed hash fails here.
    token: readStoredSecret(r, "token"),
    adapters,
    providers,
  };
}

function parseAdapter(r: ConfigReader): NodeAdapterRecord {
  const kind = r.oneOf("kind", ADAPTER_KIND_NAMES);
  const base = { name: r.nonEmpty("name", kind), enabled: r.boolean("enabled", true) };
  const settings = adapterKind(kind)!.parse(r) as object;
  return { ...base, kind, ...settings } as NodeAdapterRecord;
}
