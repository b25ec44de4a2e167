/**
 * Who may use the Control Plane's HTTP API and `/client` WebSocket: named bearer tokens, each
 * with a role, and the browser origins besides the Control Plane's own that may open the
 * dashboard socket or call the API from a page.
 *
 * ```yaml
 * access:
 *   tokens: # names and secrets unique; role read (fleet data) or operate (read + commands)
 *     - { name: ops-alice, token: "sha256:…", role: operate } # deno task hash-secret
 *     - { name: grafana, token: plain-secret, role: read }
 *   allowed_origins: [] # e.g. https://ops.example.com; the CP's own origin is always allowed
 *   refresh_min_interval_ms: 5000 # at most one fleet-wide status refresh per interval
 *   client_auth_timeout_ms: 5000 # a /client socket must authenticate within this
 * ```
 *
 * `admin.tokens` (and `IOP_CP_ADMIN_TOKENS`) still work as a deprecated shorthand: each becomes
 * an operate token named `admin-1`, `admin-2`, … in its order. No token at all means no data
 * route answers; `/healthz`, `/readyz`, `/metrics` and the dashboard's files stay open.
 * @module
 */
import { ConfigError, type ConfigReader } from "../../shared/config.ts";
import { readStoredSecret, readStoredSecrets, secretFingerprint } from "../../shared/secrets.ts";

/** What a token may do: `read` fleet data, or `operate` (read and send commands). */
export type AccessRole = "read" | "operate";

/** Every {@linkcode AccessRole}. */
export const ACCESS_ROLES: readonly AccessRole[] = ["read", "operate"];

/** One named token. */
export interface AccessToken {
  /** Shown in logs and recorded as the audit's actor. */
  name: string;
  /** Plain or `sha256:<64 hex>`; compare with `secretMatches`, never with `===`. */
  token: string;
  role: AccessRole;
  /** The key it came from: `access.tokens`, or the deprecated `admin.tokens`. */
  declaredIn: "access.tokens" | "admin.tokens";
}

/** The validated `access` section. */
export interface AccessConfig {
  tokens: AccessToken[];
  /** Origins (`scheme://host[:port]`) allowed besides the Control Plane's own. */
  allowedOrigins: string[];
  /** Fleet-wide (and per-edge) status refreshes are at most one per this interval. */
  refreshMinIntervalMs: number;
  /** A `/client` socket that has not authenticated by then is closed. */
  clientAuthTimeoutMs: number;
}

/**
 * Replaces `access.tokens` as `name:role:token,…` (the token may contain `:`, as in
 * `sha256:<hex>`, but not `,`); set to an empty string for no token.
 */
export const ACCESS_TOKENS_ENV = "IOP_CP_ACCESS_TOKENS";

/** Writes {@linkcode ACCESS_TOKENS_ENV} into the raw config's `access.tokens`. */
export function applyAccessTokensOverride(
  raw: Record<string, unknown>,
  env: (name: string) => string | undefined,
): void {
  const value = env(ACCESS_TOKENS_ENV);
  if (value === undefined) return;
  const tokens = value.split(",").map((s) => s.trim()).filter((s) => s !== "").map((entry, i) => {
    const [name = "", role = "", ...rest] = entry.split(":");
    const token = rest.join(":");
    if (name.trim() === "" || role.trim() === "" || token.trim() === "") {
      throw new ConfigError(
        ACCESS_TOKENS_ENV,
        "",
        `entry ${i + 1} must be 'name:role:token' (comma-separated entries)`,
      );
    }
    return { name: name.trim(), role: role.trim(), token: token.trim() };
  });
  const access = raw.access;
  if (typeof access === "object" && access !== null && !Array.isArray(access)) {
    (access as Record<string, unknown>).tokens = tokens;
  } else {
    raw.access = { tokens };
  }
}

/** Reads `access` (and the deprecated `admin.tokens`); throws a ConfigError naming the key. */
export function parseAccess(access: ConfigReader, admin: ConfigReader): AccessConfig {
  const tokens: AccessToken[] = access.list("tokens").map((t) => ({
    name: t.nonEmpty("name"),
    token: readStoredSecret(t, "token"),
    role: t.oneOf("role", ACCESS_ROLES),
    declaredIn: "access.tokens",
  }));
  const keys = tokens.map((_, i) => `${access.path}.tokens[${i}]`);
  readStoredSecrets(admin, "tokens").forEach((token, i) => {
    tokens.push({ name: `admin-${i + 1}`, token, role: "operate", declaredIn: "admin.tokens" });
    keys.push(`${admin.path}.tokens[${i}]`);
  });
  checkUnique(tokens, keys, access.file);
  return {
    tokens,
    allowedOrigins: access.strings("allowed_origins").map((origin, i) =>
      readOrigin(access, `allowed_origins[${i}]`, origin)
    ),
    refreshMinIntervalMs: access.number("refresh_min_interval_ms", 5_000, { min: 0 }),
    clientAuthTimeoutMs: access.number("client_auth_timeout_ms", 5_000, { min: 100 }),
  };
}

/** Refuses a second token with the same name, or the same secret however it is stored. */
function checkUnique(tokens: readonly AccessToken[], keys: readonly string[], file: string): void {
  const names = new Map<string, string>();
  const secrets = new Map<string, string>();
  tokens.forEach((t, i) => {
    const key = keys[i]!;
    const firstName = names.get(t.name);
    if (firstName !== undefined) {
      const hint = t.declaredIn === "admin.tokens"
        ? ": admin.tokens entries are named admin-1, admin-2, … so rename the access token"
        : "";
      throw new ConfigError(
        file,
        t.declaredIn === "admin.tokens" ? key : `${key}.name`,
        `duplicate token name '${t.name}' (first at ${firstName})${hint}`,
      );
    }
    names.set(t.name, t.declaredIn === "admin.tokens" ? key : `${key}.name`);
    const fingerprint = secretFingerprint(t.token);
    const firstSecret = secrets.get(fingerprint);
    if (firstSecret !== undefined) {
      throw new ConfigError(
        file,
        t.declaredIn === "admin.tokens" ? key : `${key}.token`,
        `is the same secret as ${firstSecret}: each token needs its own secret, so that the ` +
          "audit can name who acted",
      );
    }
    secrets.set(fingerprint, t.declaredIn === "admin.tokens" ? key : `${key}.token`);
  });
}

/** An origin as browsers send it: `scheme://host[:port]`, no path, no trailing slash. */
function readOrigin(access: ConfigReader, key: string, value: string): string {
  let origin: string | undefined;
  try {
    origin = new URL(value).origin;
  } catch { /* reported below */ }
  if (origin === undefined || origin === "null" || origin !== value.replace(/\/$/, "")) {
    throw access.error(
      key,
      `must be an origin like https://ops.example.com (scheme, host and optional port, no ` +
        `path; '*' is not allowed): current value is '${value}'`,
    );
  }
  return origin;
}
