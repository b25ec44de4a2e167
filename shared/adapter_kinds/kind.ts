/**
 * What an adapter kind is, in one place: its settings, their defaults and validation, and their
 * plain form. The Edge validates its YAML with `parse`; it pushes `toConfig` of the result to the
 * Node as JSON, and the Node reads that with the same `parse`, so both ends apply one rule.
 * @module
 */
import type { ConfigReader } from "../config.ts";

/** One adapter kind (or a family of kinds that share their settings). */
export interface AdapterKind<Kind extends string, Settings> {
  /** The `kind` values this module serves. */
  readonly kinds: readonly Kind[];
  /** Reads and validates the settings of one adapter entry, with the kind's defaults. */
  parse(r: ConfigReader): Settings;
  /** The settings in the form `parse` reads (the config file's keys). */
  toConfig(settings: Settings): Record<string, unknown>;
}
