import assert from "node:assert/strict";
import { checkFields, type FieldPolicy, never, onlyAt } from "./field_policy.ts";
import { FieldError, JsonFields } from "./json_fields.ts";

const POLICY: FieldPolicy = {
  model: "carried",
  user: "inert",
  logprobs: onlyAt("cannot be true", false),
  include: onlyAt("must be empty", []),
  audio: never("cannot be honoured"),
};

function check(body: Record<string, unknown>): void {
  checkFields(new JsonFields(body), POLICY, "/v1/test");
}

Deno.test("checkFields passes listed fields, inert ones, defaults and nulls", () => {
  check({ model: "m", user: "u", logprobs: false, include: [], audio: null });
});

Deno.test("checkFields refuses unlisted fields and non-default values, naming the field", () => {
  const cases: [Record<string, unknown>, string, RegExp][] = [
    [{ model: "m", seed: 1 }, "seed", /'seed' is not a parameter of \/v1\/test/],
    [{ logprobs: true }, "logprobs", /'logprobs' cannot be true/],
    [{ include: ["x"] }, "include", /'include' must be empty/],
    [{ audio: { voice: "alloy" } }, "audio", /'audio' cannot be honoured/],
    [{ constructor: 1 }, "constructor", /not a parameter/],
  ];
  for (const [body, param, message] of cases) {
    assert.throws(() => check(body), (err: unknown) => {
      assert.ok(err instanceof FieldError, String(err));
      assert.equal(err.param, param);
      assert.match(err.message, message);
      return true;
    });
  }
});
