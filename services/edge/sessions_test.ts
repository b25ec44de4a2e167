import assert from "node:assert/strict";
import { IopError } from "../../shared/errors.ts";
import { runInput } from "../../shared/run.ts";
import type { RunSubmission } from "./ports.ts";
import {
  checkSessionId,
  type HolderState,
  planSession,
  SESSION_STATE_KEY,
  SessionAffinity,
} from "./sessions.ts";

const cli = (sessionId = "", extra: Partial<RunSubmission> = {}): RunSubmission =>
  runInput({ adapter: "cli", target: "agent", sessionId, ...extra });

function facts(stateful: boolean, states: Record<string, HolderState> = {}) {
  return { stateful, holderState: (id: string) => states[id] ?? "gone" };
}

Deno.test("SessionAffinity evicts the least recently used session beyond its bound", () => {
  const affinity = new SessionAffinity({ maxSessions: 2 });
  affinity.remember("a", "n1");
  affinity.remember("b", "n2");
  assert.equal(affinity.holder("a"), "n1", "touching a makes b the oldest");
  affinity.remember("c", "n3");
  assert.equal(affinity.size, 2);
  assert.equal(affinity.holder("b"), undefined);
  assert.deepEqual([affinity.holder("a"), affinity.holder("c")], ["n1", "n3"]);
});

Deno.test("SessionAffinity forgets a session idle longer than idleMs, and use keeps it alive", () => {
  let now = 0;
  const affinity = new SessionAffinity({ idleMs: 100, now: () => now });
  affinity.remember("a", "n1");
  affinity.remember("b", "n1");
  now = 90;
  assert.equal(affinity.holder("a"), "n1");
  now = 150;
  assert.equal(affinity.holder("a"), "n1", "used at 90, so idle for 60 only");
  assert.equal(affinity.holder("b"), undefined, "idle for 150");
  affinity.remember("old", "n1", 0);
  assert.equal(affinity.holder("old"), undefined, "remembered as already idle too long");
});

Deno.test("SessionAffinity rejects a non-positive bound with RangeError", () => {
  assert.throws(() => new SessionAffinity({ maxSessions: 0 }), RangeError);
});

Deno.test("checkSessionId refuses a leading '-', spaces and overlong ids with INVALID_ARGUMENT", () => {
  checkSessionId("3f2a-ok_1.x:y");
  for (const bad of ["-rf", "--resume", "a b", "", "x".repeat(129), "é"]) {
    assert.throws(() => checkSessionId(bad), (err: unknown) => {
      assert.ok(err instanceof IopError);
      assert.equal(err.code, "INVALID_ARGUMENT");
      assert.match(err.message, /^Cannot use session id/);
      return true;
    }, bad);
  }
});

Deno.test("planSession gives a CLI run without a session a new one, marked new", () => {
  const plan = planSession(new SessionAffinity(), cli(), facts(true));
  assert.match(plan.submission.sessionId, /^[0-9a-f-]{36}$/);
  assert.equal(plan.submission.metadata[SESSION_STATE_KEY], "new");
  assert.equal(plan.pin, undefined);
});

Deno.test("planSession starts an unknown client-chosen CLI session under its id, and pins a known one", () => {
  const affinity = new SessionAffinity();
  const first = planSession(
    affinity,
    cli("s1", { metadata: { [SESSION_STATE_KEY]: "resume" } }),
    facts(true),
  );
  assert.equal(first.submission.sessionId, "s1");
  assert.equal(first.submission.metadata[SESSION_STATE_KEY], "new", "a client cannot force resume");
  affinity.remember("s1", "n2");
  const next = planSession(affinity, cli("s1"), facts(true, { n2: "connected" }));
  assert.equal(next.pin, "n2");
  assert.equal(next.submission.metadata[SESSION_STATE_KEY], "resume");
});

Deno.test("planSession fails a CLI follow-up whose node is gone or draining with UNAVAILABLE naming it", () => {
  const affinity = new SessionAffinity();
  affinity.remember("s1", "n2");
  for (const [state, what] of [["gone", "not connected"], ["draining", "draining"]] as const) {
    assert.throws(() => planSession(affinity, cli("s1"), facts(true, { n2: state })), (err) => {
      assert.ok(err instanceof IopError);
      assert.equal(err.code, "UNAVAILABLE");
      assert.equal(err.retryable, true);
      assert.equal(
        err.message,
        `Cannot continue session 's1' as it lives on node 'n2', which is ${what}`,
      );
      return true;
    });
  }
});

Deno.test("planSession starts a lost CLI session anew when the submission says start_new", () => {
  const affinity = new SessionAffinity();
  affinity.remember("s1", "n2");
  const plan = planSession(affinity, cli("s1", { onSessionLost: "start_new" }), facts(true));
  assert.equal(plan.pin, undefined);
  assert.equal(plan.submission.sessionId, "s1");
  assert.equal(plan.submission.metadata[SESSION_STATE_KEY], "new");
  assert.equal(affinity.holder("s1"), undefined);
});

Deno.test("planSession refuses a CLI follow-up pinned to another node than its session's", () => {
  const affinity = new SessionAffinity();
  affinity.remember("s1", "n2");
  assert.throws(
    () => planSession(affinity, cli("s1", { node: "n1" }), facts(true, { n2: "connected" })),
    { name: "IopError", code: "INVALID_ARGUMENT" },
  );
});

Deno.test("planSession only prefers a model run's node, never pins or assigns, even when it is gone", () => {
  const affinity = new SessionAffinity();
  assert.equal(planSession(affinity, cli(""), facts(false)).submission.sessionId, "");
  affinity.remember("m1", "n2");
  const plan = planSession(affinity, cli("m1"), facts(false));
  assert.deepEqual([plan.prefer, plan.pin], ["n2", undefined]);
  assert.equal(plan.submission.metadata[SESSION_STATE_KEY], undefined);
  assert.throws(() => planSession(affinity, cli("-x"), facts(false)), { code: "INVALID_ARGUMENT" });
});
