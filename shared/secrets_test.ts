import assert from "node:assert/strict";
import { ConfigError, ConfigReader } from "./config.ts";
import {
  hashSecret,
  isHashedSecret,
  readStoredSecret,
  readStoredSecrets,
  secretFingerprint,
  SecretIndex,
  secretMatches,
  storedSecretProblem,
} from "./secrets.ts";

// printf %s s3cret | sha256sum
const S3CRET_HASH = "sha256:1ec1c26b50d5d3c58d9583181af8076655fe00756bf7285940ba3670f99fcba0";

Deno.test("hashSecret() gives sha256: and the lower-case hex SHA-256 of the UTF-8 bytes", () => {
  assert.equal(hashSecret("s3cret"), S3CRET_HASH);
  assert.match(hashSecret("ünï"), /^sha256:[0-9a-f]{64}$/);
  assert.notEqual(hashSecret("a"), hashSecret("b"));
});

Deno.test("isHashedSecret() accepts only sha256: with 64 hex digits", () => {
  assert.ok(isHashedSecret(S3CRET_HASH));
  assert.ok(isHashedSecret(S3CRET_HASH.toUpperCase().replace("SHA256:", "sha256:")));
  assert.ok(!isHashedSecret("s3cret"));
  assert.ok(!isHashedSecret("sha256:abc"));
  assert.ok(!isHashedSecret(`${S3CRET_HASH}0`));
  assert.ok(!isHashedSecret(S3CRET_HASH.replace(/.$/, "g")));
});

Deno.test("secretMatches() accepts the right secret against its plain or hashed form", () => {
  assert.equal(secretMatches("s3cret", "s3cret"), true);
  assert.equal(secretMatches("s3cret", S3CRET_HASH), true);
  assert.equal(
    secretMatches("s3cret", S3CRET_HASH.toUpperCase().replace("SHA256", "sha256")),
    true,
  );
});

Deno.test("secretMatches() refuses other secrets of any length, and never the hash itself", () => {
  for (const guess of ["", "s", "s3cre", "s3cret ", "S3CRET", "x".repeat(10_000)]) {
    assert.equal(secretMatches(guess, "s3cret"), false, `plain vs '${guess.slice(0, 8)}'`);
    assert.equal(secretMatches(guess, S3CRET_HASH), false, `hashed vs '${guess.slice(0, 8)}'`);
  }
  assert.equal(secretMatches(S3CRET_HASH, S3CRET_HASH), false, "the hash is not a password");
});

Deno.test("secretMatches() never accepts an empty presented secret", () => {
  assert.equal(secretMatches("", hashSecret("")), false);
});

Deno.test("secretMatches() throws TypeError on a malformed sha256: value", () => {
  assert.throws(() => secretMatches("s3cret", "sha256:abc"), {
    name: "TypeError",
    message: "Cannot fingerprint the stored secret as it is a malformed sha256: value",
  });
});

Deno.test("secretFingerprint() is the same for a secret stored plain or hashed", () => {
  assert.equal(secretFingerprint("s3cret"), secretFingerprint(S3CRET_HASH));
  assert.equal(
    secretFingerprint(S3CRET_HASH.toUpperCase().replace("SHA256", "sha256")),
    secretFingerprint("s3cret"),
  );
  assert.notEqual(secretFingerprint("s3cret"), secretFingerprint("other"));
});

Deno.test("storedSecretProblem() explains a bad stored secret without repeating it", () => {
  assert.equal(storedSecretProblem("plain"), undefined);
  assert.equal(storedSecretProblem(S3CRET_HASH), undefined);
  assert.equal(storedSecretProblem("  "), "must not be empty");
  assert.equal(
    storedSecretProblem("sha256:abc"),
    "must be 'sha256:' followed by 64 hex digits (see 'deno task hash-secret'): " +
      "current value has 3 characters after 'sha256:'",
  );
  const nonHex = `sha256:${"z".repeat(64)}`;
  assert.match(
    storedSecretProblem(nonHex)!,
    /has 64 characters after 'sha256:', not all of them hex/,
  );
  assert.ok(!storedSecretProblem(nonHex)!.includes("zzzz"));
  assert.equal(storedSecretProblem(hashSecret("")), "must not be the hash of an empty secret");
});

Deno.test("readStoredSecret() throws a ConfigError naming the key of a malformed hash", () => {
  const reader = new ConfigReader("edge.yaml", { token: "sha256:12" }, "nodes[0]");
  assert.throws(
    () => readStoredSecret(reader, "token"),
    (err) =>
      err instanceof ConfigError && err.path === "nodes[0].token" &&
      err.message.startsWith("edge.yaml: nodes[0].token: must be 'sha256:' followed by 64 hex"),
  );
  const ok = new ConfigReader("edge.yaml", { token: S3CRET_HASH });
  assert.equal(readStoredSecret(ok, "token"), S3CRET_HASH);
});

Deno.test("readStoredSecrets() skips empty entries and names a bad one by its index", () => {
  const ok = new ConfigReader("edge.yaml", { keys: ["a", "", S3CRET_HASH] }, "http");
  assert.deepEqual(readStoredSecrets(ok, "keys"), ["a", S3CRET_HASH]);
  const bad = new ConfigReader("edge.yaml", { keys: ["a", "sha256:nope"] }, "http");
  assert.throws(
    () => readStoredSecrets(bad, "keys"),
    (err) => err instanceof ConfigError && err.path === "http.keys[1]",
  );
});

Deno.test("SecretIndex finds the value of a plain or hashed stored secret, nothing for others", () => {
  const index = new SecretIndex(
    [
      ["plain-one", "a"],
      [hashSecret("hashed-two"), "b"],
    ] as const,
  );
  assert.equal(index.size, 2);
  assert.equal(index.find("plain-one"), "a");
  assert.equal(index.find("hashed-two"), "b");
  assert.equal(index.find(hashSecret("hashed-two")), undefined, "the hash itself is no key");
  assert.equal(index.find("plain-on"), undefined);
  assert.equal(index.find(""), undefined);
  assert.throws(() => new SecretIndex([["sha256:zz", "c"]]), TypeError);
});
