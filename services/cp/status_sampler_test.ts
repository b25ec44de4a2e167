import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { type EdgeView, EdgeViewSchema } from "../../proto/gen/iop/v1/control_pb.ts";
import { startStatusSampler } from "./status_sampler.ts";

Deno.test("the sampler asks each connected edge once per tick, never twice at once, and stops", async () => {
  const views: EdgeView[] = [
    create(EdgeViewSchema, { edgeId: "a", connected: true }),
    create(EdgeViewSchema, { edgeId: "b", connected: false }),
    create(EdgeViewSchema, { edgeId: "c", connected: true }),
  ];
  const asked: string[] = [];
  const answers = new Map<string, () => void>();
  let tick: (() => void) | undefined;
  let stopped = false;
  const stop = startStatusSampler({
    registry: {
      list: () => views,
      refresh: (edgeId: string, timeoutMs: number) => {
        asked.push(`${edgeId}:${timeoutMs}`);
        return new Promise((resolve, reject) => {
          answers.set(
            edgeId,
            () => (edgeId === "c" ? reject(new Error("no answer")) : resolve(views[0]!)),
          );
        });
      },
    },
    intervalMs: 5_000,
    timeoutMs: 700,
    setRepeating: (fire, ms) => {
      assert.equal(ms, 5_000);
      tick = fire;
      return () => stopped = true;
    },
  });
  tick!();
  assert.deepEqual(asked, ["a:700", "c:700"]);
  tick!(); // both still answering: not asked again
  assert.deepEqual(asked, ["a:700", "c:700"]);
  answers.get("a")!();
  answers.get("c")!(); // a failure is not the sampler's to report
  await new Promise((resolve) => setTimeout(resolve, 0));
  tick!();
  assert.deepEqual(asked, ["a:700", "c:700", "a:700", "c:700"]);
  stop();
  assert.equal(stopped, true);
});
