/**
 * Checking a presented bearer token against the configured named tokens, and what the matched
 * token may do. Shared by the HTTP routes and the `/client` WebSocket.
 * @module
 */
import { SecretIndex } from "../../shared/secrets.ts";
import type { AccessRole, AccessToken } from "./access_config.ts";

/** Who a request acts as: the matched token's name and role (never its secret). */
export interface Principal {
  name: string;
  role: AccessRole;
}

const indexes = new WeakMap<readonly AccessToken[], SecretIndex<Principal>>();

/**
 * The token `presented` matches, as a {@linkcode Principal}, or undefined. Every configured
 * token is compared in constant time ({@linkcode SecretIndex}), so the time taken says nothing
 * about which one matched or how close a guess came. An empty presented value never matches.
 */
export function matchAccessToken(
  presented: string,
  tokens: readonly AccessToken[],
): Principal | undefined {
  let index = indexes.get(tokens);
  if (!index) {
    index = new SecretIndex(tokens.map((t) => [t.token, { name: t.name, role: t.role }] as const));
    indexes.set(tokens, index);
  }
  const principal = index.find(presented);
  return principal && { ...principal };
}

/** True when `role` includes what `needed` allows (operate includes read). */
export function roleAllows(role: AccessRole, needed: AccessRole): boolean {
  return needed === "read" || role === "operate";
}

/** The token of an `Authorization: Bearer <token>` header; empty when absent or another scheme. */
export function bearerToken(authorization: string | null | undefined): string {
  const match = /^Bearer[ \t]+(.*)$/i.exec(authorization ?? "");
  return match?.[1]?.trim() ?? "";
}
