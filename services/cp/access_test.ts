import assert from "node:assert/strict";
import { hashSecret } from "../../shared/secrets.ts";
import { bearerToken, matchAccessToken, roleAllows } from "./access.ts";
import type { AccessToken } from "./access_config.ts";

const TOKENS: AccessToken[] = [
  {
    name: "ops-alice",
    token: hashSecret("alice-secret"),
    role: "operate",
    declaredIn: "access.tokens",
  },
  { name: "grafana", token: "grafana-secret", role: "read", declaredIn: "access.tokens" },
  { name: "admin-1", token: "legacy", role: "operate", declaredIn: "admin.tokens" },
];

Deno.test("matchAccessToken() names the token that matched, hashed or plain, and only that one", () => {
  assert.deepEqual(matchAccessToken("alice-secret", TOKENS), {
    name: "ops-alice",
    role: "operate",
  });
  assert.deepEqual(matchAccessToken("grafana-secret", TOKENS), { name: "grafana", role: "read" });
  assert.deepEqual(matchAccessToken("legacy", TOKENS), { name: "admin-1", role: "operate" });
});

Deno.test("matchAccessToken() refuses a wrong, empty or hash-as-token value", () => {
  assert.equal(matchAccessToken("alice-secre", TOKENS), undefined);
  assert.equal(matchAccessToken("", TOKENS), undefined);
  assert.equal(matchAccessToken(hashSecret("alice-secret"), TOKENS), undefined);
  assert.equal(matchAccessToken("alice-secret", []), undefined);
});

Deno.test("matchAccessToken() compares every token even after a match", () => {
  const compared: string[] = [];
  const spying = TOKENS.map((t) => ({
    ...t,
    get token() {
      compared.push(t.name);
      return t.token;
    },
  }));
  matchAccessToken("alice-secret", spying);
  assert.deepEqual(compared, ["ops-alice", "grafana", "admin-1"]);
});

Deno.test("roleAllows() lets operate do what read does, and not the other way round", () => {
  assert.ok(roleAllows("read", "read"));
  assert.ok(roleAllows("operate", "read"));
  assert.ok(roleAllows("operate", "operate"));
  assert.ok(!roleAllows("read", "operate"));
});

Deno.test("bearerToken() reads only the Bearer scheme", () => {
  assert.equal(bearerToken("Bearer abc"), "abc");
  assert.equal(bearerToken("bearer  abc "), "abc");
  assert.equal(bearerToken("Basic abc"), "");
  assert.equal(bearerToken("Bearerabc"), "");
  assert.equal(bearerToken(undefined), "");
  assert.equal(bearerToken(null), "");
});
