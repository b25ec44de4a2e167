import assert from "node:assert/strict";
import { Hono } from "hono";
import { isJsonContentType, requireJsonBody } from "./json_content_type.ts";

Deno.test("isJsonContentType takes application/json, +json types and a UTF-8 charset only", () => {
  for (
    const type of [
      "application/json",
      "Application/JSON; charset=UTF-8",
      'application/json; charset="utf-8"',
      "application/vnd.api+json",
    ]
  ) assert.ok(isJsonContentType(type), type);
  for (
    const type of [
      undefined,
      "",
      "text/plain",
      "text/plain;charset=UTF-8",
      "application/x-www-form-urlencoded",
      "multipart/form-data; boundary=x",
      "application/json; charset=latin1",
      "application/jsonx",
    ]
  ) assert.ok(!isJsonContentType(type), String(type));
});

Deno.test("requireJsonBody answers 415 in the surface's shape before the handler runs", async () => {
  const app = new Hono();
  let handled = 0;
  app.post("*", requireJsonBody(), (c) => c.json({ handled: ++handled }));
  const post = (path: string, type?: string) =>
    app.request(path, {
      method: "POST",
      // Bytes, not a string, so that no Content-Type is added when none is given.
      body: new TextEncoder().encode("{}"),
      headers: type === undefined ? {} : { "content-type": type },
    });
  const openai = await post("/v1/chat/completions", "text/plain");
  assert.equal(openai.status, 415);
  assert.equal((await openai.json()).error.code, "unsupported_media_type");
  const ollama = await post("/api/chat", "application/x-www-form-urlencoded");
  assert.match((await ollama.json()).error, /got 'application\/x-www-form-urlencoded'/);
  const a2a = await post("/a2a", undefined);
  assert.equal(a2a.status, 415);
  assert.match((await a2a.json()).error.message, /^Invalid request: .*no Content-Type/);
  assert.equal(handled, 0);
  assert.equal((await post("/api/chat", "application/json")).status, 200);
});
