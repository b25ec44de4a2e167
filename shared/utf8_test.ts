import assert from "node:assert/strict";
import { utf8Length } from "./utf8.ts";

Deno.test("utf8Length counts the bytes TextEncoder writes, for every width and lone surrogates", () => {
  const encoder = new TextEncoder();
  for (const text of ["", "plain", "é", "€uro", "😀", "a😀b€é", "\ud800", "x\udc00y", "\ud83d"]) {
    assert.equal(utf8Length(text), encoder.encode(text).byteLength, JSON.stringify(text));
  }
});
