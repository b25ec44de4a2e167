/**
 * Reads a parsed JSON request body field by field, so that a bad request is answered with an
 * error naming the offending field (`messages[2].role`), the way OpenAI names it in `param`.
 * @module
 */
import { UINT32_MAX } from "../../../shared/run_codec.ts";
import { IopError } from "../../../shared/errors.ts";

/** INVALID_ARGUMENT about one request field; `param` is its path. */
export class FieldError extends IopError {
  /** Path of the bad field, e.g. `messages[0].content`. */
  readonly param: string;

  constructor(param: string, message: string) {
    super("INVALID_ARGUMENT", message);
    this.name = "FieldError";
    this.param = param;
  }
}

/** Largest value of an `int32` backend setting (Ollama's `top_k`, `num_ctx`). */
export const INT32_MAX = 2_147_483_647;

/**
 * Bounds of a seed: the wire's `int64`, narrowed to the integers a JSON number holds exactly.
 */
export const SEED_BOUNDS = {
  min: Number.MIN_SAFE_INTEGER,
  max: Number.MAX_SAFE_INTEGER,
  integer: true,
} as const;

/** Bounds of a token count carried in the wire's `uint32 max_tokens`. */
export const MAX_TOKENS_BOUNDS = { min: 1, max: UINT32_MAX, integer: true } as const;

/** The range a number field must lie in, inclusive; `integer` refuses fractions. */
export interface NumberBounds {
  min?: number;
  max?: number;
  integer?: boolean;
}

function typeName(v: unknown): string {
  return v === null ? "null" : Array.isArray(v) ? "array" : typeof v;
}

/** A view of one JSON object at `path` of the request body. */
export class JsonFields {
  readonly path: string;
  readonly value: Record<string, unknown>;

  constructor(value: unknown, path = "") {
    if (typeof value !== "object" || value === null || Array.isArray(value)) {
      throw new FieldError(
        path,
        path === ""
          ? `The request body must be a JSON object, not ${typeName(value)}`
          : `'${path}' must be an object, not ${typeName(value)}`,
      );
    }
    this.value = value as Record<string, unknown>;
    this.path = path;
  }

  /** Path of a key of this object. */
  at(key: string): string {
    return this.path === "" ? key : `${this.path}.${key}`;
  }

  /** True when the key is present and not null. */
  has(key: string): boolean {
    return this.value[key] !== undefined && this.value[key] !== null;
  }

  /** Throws a {@linkcode FieldError} about `key`. */
  fail(key: string, message: string): never {
    throw new FieldError(this.at(key), `'${this.at(key)}' ${message}`);
  }

  /** A required non-empty string. */
  requiredString(key: string): string {
    const v = this.value[key];
    if (v === undefined || v === null) this.fail(key, "is required");
    if (typeof v !== "string") this.fail(key, `must be a string, not ${typeName(v)}`);
    if (v === "") this.fail(key, "must not be empty");
    return v;
  }

  /** An optional string. */
  string(key: string): string | undefined {
    const v = this.value[key];
    if (v === undefined || v === null) return undefined;
    if (typeof v !== "string") this.fail(key, `must be a string, not ${typeName(v)}`);
    return v;
  }

  /** An optional boolean. */
  boolean(key: string): boolean | undefined {
    const v = this.value[key];
    if (v === undefined || v === null) return undefined;
    if (typeof v !== "boolean") this.fail(key, `must be a boolean, not ${typeName(v)}`);
    return v;
  }

  /** An optional number within bounds; `integer` also rejects fractions. */
  number(key: string, bounds: NumberBounds = {}): number | undefined {
    const v = this.value[key];
    if (v === undefined || v === null) return undefined;
    if (typeof v !== "number") this.fail(key, `must be a number, not ${typeName(v)}`);
    // JSON's 1e999 parses as Infinity.
    if (!Number.isFinite(v)) this.fail(key, `must be a finite number: got ${v}`);
    if (bounds.integer && !Number.isInteger(v)) this.fail(key, `must be an integer: got ${v}`);
    if (bounds.min !== undefined && v < bounds.min) {
      this.fail(key, `must be at least ${bounds.min}: got ${v}`);
    }
    if (bounds.max !== undefined && v > bounds.max) {
      this.fail(key, `must be at most ${bounds.max}: got ${v}`);
    }
    return v;
  }

  /** An optional array (absent → undefined). */
  array(key: string): unknown[] | undefined {
    const v = this.value[key];
    if (v === undefined || v === null) return undefined;
    if (!Array.isArray(v)) this.fail(key, `must be an array, not ${typeName(v)}`);
    return v;
  }

  /** The objects of an optional array, each as a {@linkcode JsonFields}. */
  objects(key: string): JsonFields[] {
    return (this.array(key) ?? []).map((item, i) => new JsonFields(item, `${this.at(key)}[${i}]`));
  }

  /** An optional nested object. */
  object(key: string): JsonFields | undefined {
    return this.has(key) ? new JsonFields(this.value[key], this.at(key)) : undefined;
  }

  /** An optional string or list of strings (OpenAI's `stop`). */
  stringList(key: string): string[] | undefined {
    const v = this.value[key];
    if (v === undefined || v === null) return undefined;
    if (typeof v === "string") return [v];
    if (Array.isArray(v) && v.every((s) => typeof s === "string")) return v as string[];
    this.fail(key, "must be a string or an array of strings");
  }
}

/** Parses a request body as JSON; a syntax error names the body. */
export async function readJsonBody(req: Request): Promise<JsonFields> {
  // Read outside the try: a body-limit error must reach its middleware, not become a 400.
  const text = await req.text();
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new FieldError("", `The request body is not valid JSON: ${(err as Error).message}`);
  }
  return new JsonFields(raw);
}
