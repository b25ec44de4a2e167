import assert from "node:assert/strict";
import { IopError } from "../errors.ts";
import { PendingRequests } from "./pending.ts";

Deno.test({
  name: "PendingRequests pairs a response with its request by id",
  sanitizeOps: true,
  async fn() {
    const pending = new PendingRequests<string>();
    const a = pending.open(1_000, "a");
    const b = pending.open(1_000, "b");
    assert.notEqual(a.id, b.id);
    assert.equal(pending.settle(b.id, "B"), true);
    assert.equal(pending.settle(a.id, "A"), true);
    assert.equal(await a.response, "A");
    assert.equal(await b.response, "B");
    assert.equal(pending.settle(a.id, "late"), false);
    assert.equal(pending.size, 0);
  },
});

Deno.test({
  name: "PendingRequests rejects with TIMEOUT when no answer comes",
  sanitizeOps: true,
  async fn() {
    const pending = new PendingRequests<string>();
    const { response } = pending.open(5, "node command history");
    await assert.rejects(
      response,
      (err: unknown) =>
        err instanceof IopError && err.code === "TIMEOUT" &&
        /node command history/.test(err.message),
    );
  },
});

Deno.test({
  name: "PendingRequests.rejectAll fails every waiting request",
  sanitizeOps: true,
  async fn() {
    const pending = new PendingRequests<string>();
    const reqs = [pending.open(1_000, "x"), pending.open(1_000, "y")];
    pending.rejectAll(new IopError("NODE_LOST", "gone"));
    for (const r of reqs) {
      await assert.rejects(
        r.response,
        (err: unknown) => err instanceof IopError && err.code === "NODE_LOST",
      );
    }
    assert.equal(pending.size, 0);
  },
});

Deno.test({
  name:
    "PendingRequests: a request abandoned by its caller is rejected without an unhandled rejection",
  sanitizeOps: true,
  async fn() {
    const pending = new PendingRequests<string>();
    let unhandled = 0;
    const onUnhandled = (e: PromiseRejectionEvent) => {
      unhandled++;
      e.preventDefault();
    };
    globalThis.addEventListener("unhandledrejection", onUnhandled);
    try {
      pending.open(1_000, "never awaited");
      pending.rejectAll(new IopError("UNAVAILABLE", "link broke"));
      await new Promise((r) => setTimeout(r, 10));
      assert.equal(unhandled, 0);
    } finally {
      globalThis.removeEventListener("unhandledrejection", onUnhandled);
    }
  },
});
