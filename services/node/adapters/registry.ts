/**
 * Builds the Node's adapter instances from the configuration the Edge pushes. The factories are
 * passed in by `main.ts`, so this file knows no adapter kind and a new kind needs no change here.
 * @module
 */
import type { Adapter, AdapterConfig } from "../ports.ts";

/** Builds one adapter from its configuration; may throw when the settings are unusable. */
export type AdapterFactory = (config: AdapterConfig) => Adapter;

/** Factories by adapter kind; a kind without one is rejected. */
export type AdapterFactories = Partial<Record<AdapterConfig["kind"], AdapterFactory>>;

/** A read-only map of adapters by name, with their list. */
export interface AdapterRegistry extends ReadonlyMap<string, Adapter> {
  /** The adapters in configuration order. */
  list(): Adapter[];
}

/** The registry plus why each refused adapter was refused. */
export interface AdapterRegistryBuild {
  adapters: AdapterRegistry;
  /** Reason by adapter name, for adapters that are configured and enabled but not registered. */
  rejected: Record<string, string>;
}

function readOnly(map: Map<string, Adapter>): AdapterRegistry {
  // A wrapper, not the Map itself, so a caller cannot add or remove adapters by a cast.
  const registry: AdapterRegistry = {
    get: (name) => map.get(name),
    has: (name) => map.has(name),
    get size() {
      return map.size;
    },
    list: () => [...map.values()],
    keys: () => map.keys(),
    values: () => map.values(),
    entries: () => map.entries(),
    forEach: (fn, thisArg) => map.forEach((v, k) => fn.call(thisArg, v, k, registry)),
    [Symbol.iterator]: () => map[Symbol.iterator](),
  };
  return registry;
}

/**
 * Builds an adapter for each enabled configuration. Disabled ones are skipped; a name used by
 * more than one enabled configuration is ambiguous, so none of them is built; an unknown kind or
 * a factory that throws rejects that adapter with the reason.
 */
export function buildAdapterRegistry(
  configs: AdapterConfig[],
  factories: AdapterFactories,
): AdapterRegistryBuild {
  const enabled = configs.filter((c) => c.enabled);
  const uses = new Map<string, number>();
  for (const c of enabled) uses.set(c.name, (uses.get(c.name) ?? 0) + 1);

  const adapters = new Map<string, Adapter>();
  const rejected: Record<string, string> = {};
  for (const config of enabled) {
    const count = uses.get(config.name) ?? 0;
    if (config.name === "") {
      rejected[config.name] = "adapter name is empty";
    } else if (count > 1) {
      rejected[config.name] = `adapter name is used by ${count} enabled adapters`;
    } else {
      // Configurations arrive over the wire, so the kind may be one this build does not know.
      const factory = Object.hasOwn(factories, config.kind)
        ? factories[config.kind as keyof AdapterFactories]
        : undefined;
      if (factory === undefined) {
        rejected[config.name] = `unknown adapter kind '${config.kind}'`;
        continue;
      }
      try {
        adapters.set(config.name, factory(config));
      } catch (err) {
        rejected[config.name] = err instanceof Error ? err.message : String(err);
      }
    }
  }
  return { adapters: readOnly(adapters), rejected };
}
