/**
 * YAML configuration with `IOP_*` environment overrides, and a reader whose every error names
 * the file, the key path and the problem: `edge.yaml: nodes[1].token: must not be empty`.
 * @module
 */
import { parseDocument } from "yaml";

/** A configuration file (or environment override) is invalid. */
export class ConfigError extends Error {
  readonly file: string;
  readonly path: string;
  constructor(file: string, path: string, problem: string) {
    super(path ? `${file}: ${path}: ${problem}` : `${file}: ${problem}`);
    this.name = "ConfigError";
    this.file = file;
    this.path = path;
  }
}

/** Parses YAML text; an empty document is an empty object. */
export function parseYaml(text: string, file: string): unknown {
  const doc = parseDocument(text, { prettyErrors: true });
  const first = doc.errors[0];
  if (first) {
    const line = first.linePos?.[0];
    const where = line ? `line ${line.line}, column ${line.col}` : "";
    throw new ConfigError(file, where, `invalid YAML: ${first.message.split("\n")[0]}`);
  }
  return doc.toJS() ?? {};
}

/** Reads and parses a YAML file. */
export async function readYamlFile(file: string): Promise<unknown> {
  let text: string;
  try {
    text = await Deno.readTextFile(file);
  } catch (err) {
    throw new ConfigError(file, "", `cannot read file: ${(err as Error).message}`);
  }
  return parseYaml(text, file);
}

/** One environment variable that overrides one config key. */
export interface EnvOverride {
  /** e.g. `IOP_EDGE_HTTP_PORT`. */
  env: string;
  /** Dotted key path, e.g. `http.port`. */
  path: string;
  type: "string" | "number" | "boolean" | "list";
}

/** Writes each set environment variable into the raw config object, typed as declared. */
export function applyEnvOverrides(
  raw: unknown,
  overrides: readonly EnvOverride[],
  env: (name: string) => string | undefined = (name) => Deno.env.get(name),
): Record<string, unknown> {
  const root: Record<string, unknown> = isRecord(raw) ? raw : {};
  for (const o of overrides) {
    const value = env(o.env);
    if (value === undefined) continue;
    const parts = o.path.split(".");
    let cursor = root;
    for (const part of parts.slice(0, -1)) {
      const next = cursor[part];
      cursor = isRecord(next) ? next : (cursor[part] = {}) as Record<string, unknown>;
    }
    cursor[parts.at(-1)!] = convert(value, o);
  }
  return root;
}

function convert(value: string, o: EnvOverride): unknown {
  switch (o.type) {
    case "string":
      return value;
    case "number": {
      const n = Number(value);
      if (value.trim() === "" || !Number.isFinite(n)) {
        throw new ConfigError(o.env, "", `must be a number: current value is '${value}'`);
      }
      return n;
    }
    case "boolean":
      if (/^(1|true|yes|on)$/i.test(value)) return true;
      if (/^(0|false|no|off)$/i.test(value)) return false;
      throw new ConfigError(o.env, "", `must be true or false: current value is '${value}'`);
    case "list":
      return value.split(",").map((s) => s.trim()).filter((s) => s !== "");
  }
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Typed, path-aware access to a raw config object. */
export class ConfigReader {
  readonly file: string;
  readonly path: string;
  readonly #value: Record<string, unknown>;

  constructor(file: string, value: unknown, path = "") {
    this.file = file;
    this.path = path;
    if (value !== undefined && value !== null && !isRecord(value)) {
      throw new ConfigError(file, path, `must be a mapping: current value is ${describe(value)}`);
    }
    this.#value = isRecord(value) ? value : {};
  }

  #key(key: string): string {
    return this.path ? `${this.path}.${key}` : key;
  }

  /** Fails with this reader's file and the given key. */
  error(key: string, problem: string): ConfigError {
    return new ConfigError(this.file, key ? this.#key(key) : this.path, problem);
  }

  /** True when the key is present. */
  has(key: string): boolean {
    return this.#value[key] !== undefined && this.#value[key] !== null;
  }

  /** Keys present at this level. */
  keys(): string[] {
    return Object.keys(this.#value);
  }

  /** A string; `fallback` when absent; required when no fallback is given. */
  string(key: string, fallback?: string): string {
    const v = this.#value[key];
    if (v === undefined || v === null) {
      if (fallback !== undefined) return fallback;
      throw this.error(key, "is required");
    }
    if (typeof v === "number" || typeof v === "boolean") return String(v);
    if (typeof v !== "string") {
      throw this.error(key, `must be a string: current value is ${describe(v)}`);
    }
    return v;
  }

  /** A non-empty string. */
  nonEmpty(key: string, fallback?: string): string {
    const v = this.string(key, fallback);
    if (v.trim() === "") throw this.error(key, "must not be empty");
    return v;
  }

  /** A number within bounds. */
  number(
    key: string,
    fallback: number,
    bounds: { min?: number; max?: number; integer?: boolean } = {},
  ): number {
    const v = this.#value[key];
    if (v === undefined || v === null) return fallback;
    if (typeof v !== "number" || !Number.isFinite(v)) {
      throw this.error(key, `must be a number: current value is ${describe(v)}`);
    }
    if (bounds.integer !== false && !Number.isInteger(v)) {
      throw this.error(key, `must be a whole number: current value is ${v}`);
    }
    if (bounds.min !== undefined && v < bounds.min) {
      throw this.error(key, `must be at least ${bounds.min}: current value is ${v}`);
    }
    if (bounds.max !== undefined && v > bounds.max) {
      throw this.error(key, `must be at most ${bounds.max}: current value is ${v}`);
    }
    return v;
  }

  /** A boolean. */
  boolean(key: string, fallback: boolean): boolean {
    const v = this.#value[key];
    if (v === undefined || v === null) return fallback;
    if (typeof v !== "boolean") {
      throw this.error(key, `must be true or false: current value is ${describe(v)}`);
    }
    return v;
  }

  /** One of a fixed set of strings. */
  oneOf<T extends string>(key: string, allowed: readonly T[], fallback?: T): T {
    const v = this.string(key, fallback);
    if (!(allowed as readonly string[]).includes(v)) {
      throw this.error(key, `must be one of ${allowed.join(", ")}: current value is '${v}'`);
    }
    return v as T;
  }

  /** A list of strings. */
  strings(key: string): string[] {
    const v = this.#value[key];
    if (v === undefined || v === null) return [];
    if (!Array.isArray(v)) throw this.error(key, `must be a list: current value is ${describe(v)}`);
    return v.map((item, i) => {
      if (typeof item === "string") return item;
      if (typeof item === "number" || typeof item === "boolean") return String(item);
      throw new ConfigError(this.file, `${this.#key(key)}[${i}]`, `must be a string`);
    });
  }

  /** A string-to-string mapping. */
  stringMap(key: string): Record<string, string> {
    const sub = this.section(key);
    const out: Record<string, string> = {};
    for (const k of sub.keys()) out[k] = sub.string(k);
    return out;
  }

  /** A nested mapping (empty when absent). */
  section(key: string): ConfigReader {
    return new ConfigReader(this.file, this.#value[key], this.#key(key));
  }

  /** A list of mappings. */
  list(key: string): ConfigReader[] {
    const v = this.#value[key];
    if (v === undefined || v === null) return [];
    if (!Array.isArray(v)) throw this.error(key, `must be a list: current value is ${describe(v)}`);
    return v.map((item, i) => new ConfigReader(this.file, item, `${this.#key(key)}[${i}]`));
  }
}

function describe(v: unknown): string {
  if (Array.isArray(v)) return "a list";
  if (v === null) return "null";
  if (typeof v === "object") return "a mapping";
  return typeof v === "string" ? `'${v}'` : String(v);
}

/** Reads `--config <file>` from command-line arguments, or the given default. */
export function configPathFromArgs(args: readonly string[], fallback: string): string {
  const i = args.indexOf("--config");
  if (i >= 0 && args[i + 1]) return args[i + 1]!;
  const eq = args.find((a) => a.startsWith("--config="));
  return eq ? eq.slice("--config=".length) : fallback;
}
