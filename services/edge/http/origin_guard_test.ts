import assert from "node:assert/strict";
import { Hono } from "hono";
import { isOriginAllowed, originGuard } from "./origin_guard.ts";

function app(allowed: string[]): Hono {
  const app = new Hono();
  app.use("*", originGuard(() => allowed));
  app.post("/v1/chat/completions", (c) => c.json({ ok: true }));
  return app;
}

Deno.test("isOriginAllowed matches listed origins exactly, or any with *", () => {
  assert.ok(isOriginAllowed("https://app.example.com", ["https://app.example.com"]));
  assert.ok(!isOriginAllowed("https://app.example.com:8443", ["https://app.example.com"]));
  assert.ok(!isOriginAllowed("null", ["https://app.example.com"]));
  assert.ok(isOriginAllowed("https://x.example", ["*"]));
});

Deno.test("originGuard refuses a foreign Origin with 403 and lets requests without one through", async () => {
  const a = app([]);
  const body = JSON.stringify({});
  const plain = await a.request("/v1/chat/completions", { method: "POST", body });
  assert.equal(plain.status, 200);
  const foreign = await a.request("/v1/chat/completions", {
    method: "POST",
    body,
    headers: { origin: "https://evil.example" },
  });
  assert.equal(foreign.status, 403);
  const { error } = await foreign.json();
  assert.equal(error.code, "origin_not_allowed");
  assert.match(error.message, /origin 'https:\/\/evil\.example' are not allowed/);
});

Deno.test("originGuard answers the preflight and marks answers only for listed origins", async () => {
  const a = app(["https://app.example.com"]);
  const preflight = await a.request("/v1/chat/completions", {
    method: "OPTIONS",
    headers: {
      origin: "https://app.example.com",
      "access-control-request-method": "POST",
      "access-control-request-headers": "authorization, content-type",
    },
  });
  assert.equal(preflight.status, 204);
  assert.equal(preflight.headers.get("access-control-allow-origin"), "https://app.example.com");
  assert.equal(
    preflight.headers.get("access-control-allow-methods"),
    "GET, POST, DELETE, OPTIONS",
  );
  assert.equal(
    preflight.headers.get("access-control-allow-headers"),
    "authorization, content-type",
  );
  const answer = await a.request("/v1/chat/completions", {
    method: "POST",
    body: "{}",
    headers: { origin: "https://app.example.com" },
  });
  assert.equal(answer.status, 200);
  assert.equal(answer.headers.get("access-control-allow-origin"), "https://app.example.com");
  assert.equal(answer.headers.get("vary"), "Origin");
  const other = await a.request("/v1/chat/completions", {
    method: "OPTIONS",
    headers: { origin: "https://evil.example", "access-control-request-method": "POST" },
  });
  assert.equal(other.status, 403);
  assert.equal(other.headers.get("access-control-allow-origin"), null);
});

Deno.test("originGuard lets a listed origin's preflight of DELETE through, for DELETE /v1/responses/{id}", async () => {
  const a = new Hono();
  a.use("*", originGuard(() => ["https://app.example.com"]));
  a.delete("/v1/responses/:id", (c) => c.json({ id: c.req.param("id"), deleted: true }));
  const origin = "https://app.example.com";
  const preflight = await a.request("/v1/responses/resp_1", {
    method: "OPTIONS",
    headers: { origin, "access-control-request-method": "DELETE" },
  });
  assert.equal(preflight.status, 204);
  const allowed = preflight.headers.get("access-control-allow-methods")!.split(/,\s*/);
  assert.ok(allowed.includes("DELETE"), `allowed: ${allowed.join(", ")}`);
  const deleted = await a.request("/v1/responses/resp_1", {
    method: "DELETE",
    headers: { origin },
  });
  assert.equal(deleted.status, 200);
  assert.equal(deleted.headers.get("access-control-allow-origin"), origin);
});
