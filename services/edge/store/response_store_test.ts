import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { IopError } from "../../../shared/errors.ts";
import {
  openResponseStore,
  openResponseStoreFile,
  type ResponseLimits,
  type StoredResponse,
} from "./response_store.ts";

const DAY_MS = 24 * 60 * 60 * 1000;

/** The store's clock in these tests: responses created at 1000-5000 ms are fresh. */
const clock = { now: () => 10_000 };

function limits(overrides: Partial<ResponseLimits> = {}): ResponseLimits {
  return {
    maxStored: 100,
    maxStoredPerTenant: 100,
    maxTotalBytes: 1024 * 1024 * 1024,
    retentionMs: 30 * DAY_MS,
    maxResponseBytes: 1024 * 1024,
    ...overrides,
  };
}

function response(id: string, owner: string, createdAtMs: number, text = "hi"): StoredResponse {
  return {
    id,
    owner,
    model: "demo",
    createdAtMs,
    status: "completed",
    previousResponseId: null,
    input: [{
      id: `msg_${id}`,
      type: "message",
      role: "user",
      status: "completed",
      content: [{ type: "input_text", text }],
    }],
    response: { id, object: "response", status: "completed", output: [] },
  };
}

Deno.test("a stored response reads back whole for its owner only, and only its owner deletes it", () => {
  const store = openResponseStore(":memory:", () => limits(), clock);
  const stored = { ...response("resp_a", "alpha", 1000), previousResponseId: "resp_0" };
  assert.equal(store.put(stored), true);
  assert.deepEqual(store.get("resp_a", "alpha"), stored);
  assert.equal(store.get("resp_a", "beta"), undefined);
  assert.equal(store.get("resp_nope", "alpha"), undefined);
  assert.equal(store.delete("resp_a", "beta"), false);
  assert.deepEqual(store.get("resp_a", "alpha")?.id, "resp_a");
  assert.equal(store.delete("resp_a", "alpha"), true);
  assert.equal(store.get("resp_a", "alpha"), undefined);
  assert.equal(store.delete("resp_a", "alpha"), false);
  assert.equal(store.count(), 0);
  store.close();
});

Deno.test("beyond max_stored the oldest responses are dropped first, whoever owns them", () => {
  const bounds = limits({ maxStored: 3 });
  const store = openResponseStore(":memory:", () => bounds, clock);
  // Stored out of creation order: age decides, not the order of the puts.
  store.put(response("resp_2", "alpha", 2000));
  store.put(response("resp_1", "beta", 1000));
  store.put(response("resp_3", "alpha", 3000));
  store.put(response("resp_4", "beta", 4000));
  assert.equal(store.count(), 3);
  assert.equal(store.get("resp_1", "beta"), undefined);
  for (const [id, owner] of [["resp_2", "alpha"], ["resp_3", "alpha"], ["resp_4", "beta"]]) {
    assert.ok(store.get(id!, owner!), `${id} is kept`);
  }
  // The bound is read at each put: a reload that lowers it applies at the next one.
  bounds.maxStored = 1;
  store.put(response("resp_5", "alpha", 5000));
  assert.equal(store.count(), 1);
  assert.ok(store.get("resp_5", "alpha"));
  store.close();
});

Deno.test("a response older than retention_ms is gone at once and purged at the next put", () => {
  let now = 10 * DAY_MS;
  const store = openResponseStore(":memory:", () => limits({ retentionMs: DAY_MS }), {
    now: () => now,
  });
  store.put(response("resp_old", "alpha", now));
  now += DAY_MS - 1;
  assert.ok(store.get("resp_old", "alpha"), "kept until its retention ends");
  now += 2;
  assert.equal(store.get("resp_old", "alpha"), undefined);
  assert.equal(store.delete("resp_old", "alpha"), false);
  assert.equal(store.count(), 1, "not yet purged");
  store.put(response("resp_new", "alpha", now));
  assert.equal(store.count(), 1);
  assert.ok(store.get("resp_new", "alpha"));
  store.close();
});

Deno.test("a response larger than max_response_bytes is not stored, and the put says so", () => {
  const store = openResponseStore(":memory:", () => limits({ maxResponseBytes: 2048 }), clock);
  assert.equal(store.put(response("resp_big", "alpha", 1000, "x".repeat(4096))), false);
  assert.equal(store.get("resp_big", "alpha"), undefined);
  assert.equal(store.count(), 0);
  // Bytes, not characters: 700 three-byte characters are 2100 bytes.
  assert.equal(store.put(response("resp_wide", "alpha", 1000, "€".repeat(700))), false);
  assert.equal(store.put(response("resp_small", "alpha", 1000, "x".repeat(512))), true);
  store.close();
});

Deno.test("beyond max_stored_per_tenant a tenant's own oldest responses go, not another tenant's", () => {
  const bounds = limits({ maxStored: 10, maxStoredPerTenant: 2 });
  const store = openResponseStore(":memory:", () => bounds, clock);
  store.put(response("resp_b1", "beta", 1000));
  for (let i = 1; i <= 5; i++) store.put(response(`resp_a${i}`, "alpha", 1000 + i));
  assert.equal(store.count(), 3);
  assert.ok(store.get("resp_b1", "beta"), "the other tenant's oldest response is kept");
  assert.deepEqual(
    [1, 2, 3, 4, 5].filter((i) => store.get(`resp_a${i}`, "alpha")).map((i) => `resp_a${i}`),
    ["resp_a4", "resp_a5"],
  );
  // The global bound still holds across tenants.
  bounds.maxStored = 2;
  store.put(response("resp_c1", "gamma", 2000));
  assert.equal(store.count(), 2);
  assert.equal(store.get("resp_b1", "beta"), undefined);
  store.close();
});

Deno.test("beyond max_total_bytes the oldest responses go until the rest fit", () => {
  const sample = response("resp_1", "alpha", 1000, "x".repeat(1000));
  const one = JSON.stringify(sample.input).length + JSON.stringify(sample.response).length;
  const bounds = limits({ maxTotalBytes: 1024 * 1024 });
  const store = openResponseStore(":memory:", () => bounds, clock);
  for (let i = 1; i <= 4; i++) {
    store.put(response(`resp_${i}`, "alpha", 1000 + i, "x".repeat(1000)));
  }
  assert.equal(store.count(), 4);
  // Room for about two and a half: the two newest stay.
  bounds.maxTotalBytes = Math.floor(one * 2.5);
  store.put(response("resp_5", "beta", 2000, "x".repeat(1000)));
  assert.deepEqual(
    [1, 2, 3, 4].filter((i) => store.get(`resp_${i}`, "alpha")).map((i) => `resp_${i}`),
    ["resp_4"],
  );
  assert.ok(store.get("resp_5", "beta"));
  assert.equal(store.count(), 2);
  store.close();
});

Deno.test("responses survive a reopen of the file, which is at schema version 2 in WAL mode", async () => {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/nested/responses.db`;
  const first = await openResponseStoreFile(path, () => limits());
  first.put(response("resp_kept", "alpha", Date.now()));
  first.close();

  const db = new DatabaseSync(path);
  const { user_version } = db.prepare("PRAGMA user_version").get() as { user_version: number };
  assert.equal(user_version, 2);
  const { journal_mode } = db.prepare("PRAGMA journal_mode").get() as { journal_mode: string };
  assert.equal(journal_mode, "wal");
  db.close();

  const again = await openResponseStoreFile(path, () => limits());
  assert.equal(again.count(), 1);
  assert.equal(again.get("resp_kept", "alpha")?.input[0]?.id, "msg_resp_kept");
  again.close();
  await Deno.remove(dir, { recursive: true });
});

Deno.test("a response store file from a newer Edge is refused with its version named", async () => {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/responses.db`;
  const db = new DatabaseSync(path);
  db.exec("PRAGMA user_version = 7");
  db.close();
  assert.throws(() => openResponseStore(path, () => limits()), (err: unknown) => {
    assert.ok(err instanceof IopError);
    assert.match(err.message, /response store .* schema version 7 is newer than this Edge's 2/);
    return true;
  });
  await Deno.remove(dir, { recursive: true });
});

Deno.test("storing an id twice fails and leaves the first response and the count as they were", () => {
  const store = openResponseStore(":memory:", () => limits(), clock);
  store.put(response("resp_a", "alpha", 1000, "first"));
  assert.throws(() => store.put(response("resp_a", "beta", 2000, "second")));
  assert.equal(store.count(), 1);
  const kept = store.get("resp_a", "alpha")?.input[0] as { content: { text: string }[] };
  assert.equal(kept.content[0]?.text, "first");
  store.close();
});

Deno.test("a version-1 file migrates to 2 with each row's size computed, and its bounds then hold", async () => {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/responses.db`;
  const old = new DatabaseSync(path);
  old.exec(`CREATE TABLE responses (
     id TEXT PRIMARY KEY, owner TEXT NOT NULL, model TEXT NOT NULL, status TEXT NOT NULL,
     previous_response_id TEXT, created_at_ms INTEGER NOT NULL,
     input TEXT NOT NULL, response TEXT NOT NULL);
   CREATE INDEX responses_by_age ON responses (created_at_ms);
   PRAGMA user_version = 1;`);
  const insert = old.prepare(
    "INSERT INTO responses VALUES (?, ?, 'demo', 'completed', NULL, ?, ?, ?)",
  );
  for (const [id, at] of [["resp_old", 1000], ["resp_new", 2000]] as const) {
    const r = response(id, "alpha", at, "€".repeat(100));
    insert.run(id, "alpha", at, JSON.stringify(r.input), JSON.stringify(r.response));
  }
  old.close();

  const one = new TextEncoder().encode(
    JSON.stringify(response("resp_x", "alpha", 0, "€".repeat(100)).input) +
      JSON.stringify(response("resp_x", "alpha", 0).response),
  ).byteLength;
  const bounds = limits();
  const store = openResponseStore(path, () => bounds, clock);
  assert.equal(store.count(), 2);
  const db = new DatabaseSync(path);
  const sizes = db.prepare("SELECT id, bytes FROM responses ORDER BY id").all();
  db.close();
  assert.deepEqual(sizes.map((r) => r.id), ["resp_new", "resp_old"]);
  for (const row of sizes) {
    assert.ok(Math.abs(Number(row.bytes) - one) < 16, `${row.id}: ${row.bytes}`);
  }
  bounds.maxTotalBytes = Math.floor(one * 2.5);
  store.put(response("resp_3", "alpha", 3000, "€".repeat(100)));
  assert.equal(store.get("resp_old", "alpha"), undefined);
  assert.ok(store.get("resp_new", "alpha"));
  store.close();
  await Deno.remove(dir, { recursive: true });
});
