import assert from "node:assert/strict";
import { cutToBytes, utf8Length } from "./utf8.ts";

Deno.test("utf8Length counts the bytes TextEncoder writes, for every width and lone surrogates", () => {
  const encoder = new TextEncoder();
  for (const text of ["", "plain", "é", "€uro", "😀", "a😀b€é", "\ud800", "x\udc00y", "\ud83d"]) {
    assert.equal(utf8Length(text), encoder.encode(text).byteLength, JSON.stringify(text));
  }
});

Deno.test("cutToBytes keeps the longest prefix that fits and splits no character, lone surrogates included", () => {
  const encoder = new TextEncoder();
  for (const text of ["a😀b€é", "\ud800\ud800x", "\ud800é", "😀😀"]) {
    for (let max = 0; max <= encoder.encode(text).byteLength; max++) {
      const kept = cutToBytes(text, max);
      assert.ok(text.startsWith(kept), JSON.stringify([text, max]));
      assert.ok(encoder.encode(kept).byteLength <= max, JSON.stringify([text, max, kept]));
      const next = text.slice(
        0,
        kept.length + (/[\ud800-\udbff]/.test(text[kept.length] ?? "") &&
            /[\udc00-\udfff]/.test(text[kept.length + 1] ?? "")
          ? 2
          : 1),
      );
      if (kept !== text) {
        assert.ok(encoder.encode(next).byteLength > max, JSON.stringify([text, max]));
      }
    }
  }
  assert.equal(utf8Length("\ud800\ud800"), 6);
});
