/**
 * The rule every request body of the model APIs follows: each top-level field is carried to the
 * backend, accepted because it changes nothing a backend does, or refused with a 400 naming it —
 * never dropped. Each endpoint lists its fields once ({@linkcode FieldPolicy});
 * {@linkcode checkFields} refuses the fields it does not list (as OpenAI does: "Unrecognized
 * request argument") and those that ask, with a value other than their default, for something
 * no backend of this Edge does.
 * @module
 */
import { isDeepStrictEqual } from "node:util";
import type { JsonFields } from "./json_fields.ts";

/**
 * How one field is treated: `carried` (the endpoint's parser reads it into the run), `inert`
 * (accepted and not carried: it changes nothing a backend does; the table says why), or
 * honoured only at a default value (any other value is refused with `reason`).
 */
export type FieldRule =
  | "carried"
  | "inert"
  | { defaults: readonly unknown[]; reason: string };

/** Every top-level field an endpoint accepts, by name. */
export type FieldPolicy = Readonly<Record<string, FieldRule>>;

/** A field honoured only at one of `defaults` (a `null` is always absent). */
export function onlyAt(reason: string, ...defaults: unknown[]): FieldRule {
  return { defaults, reason };
}

/** A field honoured only when absent (or `null`): any value asks for what no backend here does. */
export function never(reason: string): FieldRule {
  return { defaults: [], reason };
}

/**
 * Throws a 400 FieldError for the first field of `body` that `policy` does not list, or that
 * asks for what the Edge cannot honour. `endpoint` names the API in the message
 * (`/v1/chat/completions`).
 */
export function checkFields(body: JsonFields, policy: FieldPolicy, endpoint: string): void {
  for (const key in body.value) {
    const rule = Object.hasOwn(policy, key) ? policy[key] : undefined;
    if (rule === undefined) {
      body.fail(key, `is not a parameter of ${endpoint}`);
    }
    if (rule === "carried" || rule === "inert") continue;
    const value = body.value[key];
    if (value === null || value === undefined) continue;
    if (!rule.defaults.some((d) => isDeepStrictEqual(d, value))) body.fail(key, rule.reason);
  }
}
