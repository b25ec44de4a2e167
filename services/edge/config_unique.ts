/**
 * Uniqueness checks of the Edge config (node ids, aliases, provider ids, rule names, …), with
 * errors that never show a whole token.
 * @module
 */
import { ConfigError } from "../../shared/config.ts";

/**
 * Throws a {@linkcode ConfigError} at the second of `entries` (key path, value) whose value
 * was seen before, naming the first; `what` names the values (a token is shown clipped).
 */
export function checkUnique(file: string, entries: [string, string][], what: string): void {
  const seen = new Map<string, string>();
  for (const [path, value] of entries) {
    const first = seen.get(value);
    if (first !== undefined) {
      throw new ConfigError(
        file,
        path,
        `duplicate ${what} '${redactIfToken(what, value)}' (first at ${first})`,
      );
    }
    seen.set(value, path);
  }
}

/** `value` as an error may show it: clipped to its first characters when `what` is a token. */
export function redactIfToken(what: string, value: string): string {
  return what.includes("token") ? `${value.slice(0, 2)}…` : value;
}
