/**
 * Secrets a service checks but need not know: edge credentials, node tokens, API keys. A config
 * holds each either plain or as `sha256:<64 hex>` (made by `deno task hash-secret`), so a leaked
 * config file does not hand out the secrets themselves. Comparisons hash both sides and compare
 * the digests in constant time, so neither the content nor the length of a secret leaks through
 * timing.
 *
 * A plain secret may not itself begin with `sha256:`; such a value must be a well-formed hash,
 * which {@linkcode readStoredSecret} checks at load time so that a typo is a config error and not
 * a silent mismatch at every login.
 *
 * @example Hash a secret and check presented values against it
 * ```ts
 * import assert from "node:assert/strict";
 * import { hashSecret, secretMatches } from "./secrets.ts";
 *
 * const stored = hashSecret("s3cret");
 * assert.match(stored, /^sha256:[0-9a-f]{64}$/);
 * assert.ok(secretMatches("s3cret", stored));
 * assert.ok(secretMatches("s3cret", "s3cret"));
 * assert.ok(!secretMatches("guess", stored));
 * ```
 * @module
 */
import { Buffer } from "node:buffer";
import { createHash, timingSafeEqual } from "node:crypto";
import type { ConfigReader } from "./config.ts";

/** Prefix of a hashed stored secret. */
export const HASHED_SECRET_PREFIX = "sha256:";

const HASHED = /^sha256:[0-9a-fA-F]{64}$/;

/** SHA-256 of the empty string: a hash of no secret, refused at load. */
const EMPTY_DIGEST = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

function digest(secret: string): Buffer {
  return createHash("sha256").update(secret, "utf8").digest();
}

/** The stored form of a secret: `sha256:` and the lower-case hex SHA-256 of its UTF-8 bytes. */
export function hashSecret(secret: string): string {
  return HASHED_SECRET_PREFIX + digest(secret).toString("hex");
}

/** True when a stored value is in the hashed form (`sha256:` and 64 hex digits). */
export function isHashedSecret(stored: string): boolean {
  return HASHED.test(stored);
}

/**
 * What is wrong with a stored secret, or undefined when it is usable: empty, or a `sha256:`
 * value that is not 64 hex digits, or the hash of the empty string. Never repeats the value.
 */
export function storedSecretProblem(stored: string): string | undefined {
  if (stored.trim() === "") return "must not be empty";
  if (!stored.startsWith(HASHED_SECRET_PREFIX)) return undefined;
  const hex = stored.slice(HASHED_SECRET_PREFIX.length);
  if (!HASHED.test(stored)) {
    return `must be 'sha256:' followed by 64 hex digits (see 'deno task hash-secret'): ` +
      `current value has ${hex.length} characters after 'sha256:'` +
      (/^[0-9a-fA-F]*$/.test(hex) ? "" : ", not all of them hex digits");
  }
  if (hex.toLowerCase() === EMPTY_DIGEST) return "must not be the hash of an empty secret";
  return undefined;
}

/** Reads a required stored secret; throws a ConfigError naming the key when it is unusable. */
export function readStoredSecret(reader: ConfigReader, key: string): string {
  const stored = reader.string(key);
  const problem = storedSecretProblem(stored);
  if (problem) throw reader.error(key, problem);
  return stored;
}

/** Reads a list of stored secrets, skipping empty entries; a bad one is named by its index. */
export function readStoredSecrets(reader: ConfigReader, key: string): string[] {
  return reader.strings(key).flatMap((stored, i) => {
    if (stored === "") return [];
    const problem = storedSecretProblem(stored);
    if (problem) throw reader.error(`${key}[${i}]`, problem);
    return [stored];
  });
}

/**
 * The SHA-256 hex of the secret a stored value stands for, whether stored plain or hashed:
 * equal fingerprints mean the same secret. For load-time duplicate checks and change detection;
 * not constant time, so never for checking what a peer presents.
 * Throws TypeError on a malformed `sha256:` value.
 */
export function secretFingerprint(stored: string): string {
  if (!stored.startsWith(HASHED_SECRET_PREFIX)) return digest(stored).toString("hex");
  if (!HASHED.test(stored)) {
    throw new TypeError("Cannot fingerprint the stored secret as it is a malformed sha256: value");
  }
  return stored.slice(HASHED_SECRET_PREFIX.length).toLowerCase();
}

/**
 * True when `presented` is the secret `stored` stands for (plain, or `sha256:<hex>`). Both sides
 * are reduced to SHA-256 digests and compared with `timingSafeEqual`, so the time taken says
 * nothing about where or whether the lengths differ. An empty presented secret never matches.
 * Throws TypeError on a malformed `sha256:` value (config readers refuse those at load).
 */
export function secretMatches(presented: string, stored: string): boolean {
  const expected = Buffer.from(secretFingerprint(stored), "hex");
  const same = timingSafeEqual(digest(presented), expected);
  return same && presented !== "";
}

/**
 * Stored secrets, each standing for a value (a tenant, a named token), looked up by what a peer
 * presents. The stored digests are decoded once; a lookup hashes the presented secret once and
 * compares it with every entry in constant time, so its timing says nothing about which matched.
 */
export class SecretIndex<T> {
  readonly #entries: { digest: Buffer; value: T }[];

  /** Throws TypeError on a malformed `sha256:` value (config readers refuse those at load). */
  constructor(entries: Iterable<readonly [stored: string, value: T]>) {
    this.#entries = [...entries].map(([stored, value]) => ({
      digest: Buffer.from(secretFingerprint(stored), "hex"),
      value,
    }));
  }

  /** Number of stored secrets. */
  get size(): number {
    return this.#entries.length;
  }

  /** The value of the secret `presented` matches; undefined for none (and for ""). */
  find(presented: string): T | undefined {
    const given = digest(presented);
    let found: T | undefined;
    for (const entry of this.#entries) {
      if (timingSafeEqual(given, entry.digest) && found === undefined) found = entry.value;
    }
    return presented === "" ? undefined : found;
  }
}
