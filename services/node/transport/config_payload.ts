/**
 * Converts the NodeConfigPayload pushed by the Edge into the Node's domain adapter configs,
 * validating each adapter's settings with its kind's own rules (`shared/adapter_kinds/`).
 * @module
 */
import type { NodeConfigPayload } from "../../../proto/gen/iop/v1/node_pb.ts";
import { adapterKind } from "../../../shared/adapter_kinds/catalog.ts";
import { ConfigReader } from "../../../shared/config.ts";
import type { AdapterConfig } from "../ports.ts";

/** The domain view of a config payload. */
export interface NodeSettings {
  adapters: AdapterConfig[];
  /** Why each adapter that could not be read was refused, by adapter name. */
  rejected: Record<string, string>;
  heartbeatIntervalMs: number;
}

/**
 * Wire payload → domain settings. An adapter of a kind this build does not know still reaches
 * the registry, which reports it rejected; one whose settings do not read is rejected here.
 */
export function fromConfigPayload(payload: NodeConfigPayload): NodeSettings {
  const adapters: AdapterConfig[] = [];
  const rejected: Record<string, string> = {};
  payload.adapters.forEach((a, i) => {
    const base = { name: a.name, enabled: a.enabled };
    const kind = adapterKind(a.kind);
    if (!kind) {
      adapters.push({ ...base, kind: a.kind, settings: {} } as unknown as AdapterConfig);
      return;
    }
    try {
      const raw: unknown = a.settingsJson === "" ? {} : JSON.parse(a.settingsJson);
      const reader = new ConfigReader("pushed config", raw, `adapters[${i}]`);
      adapters.push({ ...base, kind: a.kind, settings: kind.parse(reader) } as AdapterConfig);
    } catch (err) {
      rejected[a.name] = `settings do not read: ${(err as Error).message}`;
    }
  });
  return {
    adapters,
    rejected,
    heartbeatIntervalMs: payload.heartbeatIntervalMs || 2000,
  };
}
