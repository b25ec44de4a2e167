/**
 * Strict readers for JSON-RPC params: each throws a -32602 error naming the bad path, so a
 * malformed request never reaches the task manager.
 * @module
 */
import { invalidParams } from "./rpc_error.ts";

/** A JSON object read field by field. */
export type JsonObject = Record<string, unknown>;

/** True for a plain JSON object (not null, not an array). */
export function isObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Requires `value` to be an object. */
export function object(value: unknown, path: string): JsonObject {
  if (!isObject(value)) throw invalidParams(path, "must be an object");
  return value;
}

/** An optional object field. */
export function optObject(o: JsonObject, key: string, path: string): JsonObject | undefined {
  const v = o[key];
  if (v === undefined || v === null) return undefined;
  return object(v, `${path}.${key}`);
}

/** A required non-empty string field. */
export function str(o: JsonObject, key: string, path: string): string {
  const v = o[key];
  if (typeof v !== "string" || v === "") {
    throw invalidParams(`${path}.${key}`, "must be a non-empty string");
  }
  return v;
}

/** An optional string field; absent or null gives "". */
export function optStr(o: JsonObject, key: string, path: string): string {
  const v = o[key];
  if (v === undefined || v === null) return "";
  if (typeof v !== "string") throw invalidParams(`${path}.${key}`, "must be a string");
  return v;
}

/** An optional non-negative integer field. */
export function optInt(o: JsonObject, key: string, path: string): number | undefined {
  const v = o[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0) {
    throw invalidParams(`${path}.${key}`, "must be a non-negative integer");
  }
  return v;
}

/** An optional boolean field. */
export function optBool(o: JsonObject, key: string, path: string): boolean | undefined {
  const v = o[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "boolean") throw invalidParams(`${path}.${key}`, "must be a boolean");
  return v;
}

/** A required non-empty array field. */
export function nonEmptyArray(o: JsonObject, key: string, path: string): unknown[] {
  const v = o[key];
  if (!Array.isArray(v) || v.length === 0) {
    throw invalidParams(`${path}.${key}`, "must be a non-empty array");
  }
  return v;
}

/** An optional metadata object, kept as given. */
export function optMetadata(o: JsonObject, path: string): Record<string, unknown> | undefined {
  return optObject(o, "metadata", path);
}
