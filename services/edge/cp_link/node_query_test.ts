import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { NodeQuerySchema } from "../../../proto/gen/iop/v1/control_pb.ts";
import { IopError } from "../../../shared/errors.ts";
import type { NodeCommand, NodeCommandResult, OpsGateway } from "../ports.ts";
import { answerNodeQuery, MAX_OUTPUT_CHARS } from "./node_query.ts";

function gateway(answer: (node: string, command: NodeCommand) => NodeCommandResult) {
  const asked: [string, NodeCommand][] = [];
  const service: Pick<OpsGateway, "nodeCommand"> = {
    nodeCommand: (node, command) => {
      asked.push([node, command]);
      return Promise.resolve().then(() => answer(node, command));
    },
  };
  return { service, asked };
}

const record = {
  runId: "r1",
  adapter: "mock",
  target: "demo",
  status: "completed",
  startedAtMs: 10,
  firstOutputAtMs: 12,
  finishedAtMs: 20,
  usage: { inputTokens: 2, outputTokens: 3 },
  errorCode: "",
  errorMessage: "",
  outputSummary: "hi",
  exitCode: 0,
};

Deno.test("answerNodeQuery() answers a history query with the node's runs, at most the limit asked", async () => {
  const { service, asked } = gateway(() => ({
    type: "history",
    runs: [record, { ...record, runId: "r0" }],
  }));
  const answer = await answerNodeQuery(
    service,
    create(NodeQuerySchema, { node: "n1", query: { case: "history", value: { limit: 1 } } }),
  );
  assert.deepEqual(asked, [["n1", { type: "history", limit: 1 }]]);
  assert.ok(answer.answer.case === "history");
  assert.deepEqual(answer.answer.value.runs.map((r) => [r.runId, r.tokensOut, r.firstOutputAtMs]), [
    ["r1", 3n, 12n],
  ]);
});

Deno.test("answerNodeQuery() answers a run output query, keeping only the tail of a huge output", async () => {
  const huge = "x".repeat(MAX_OUTPUT_CHARS) + "END";
  const { service } = gateway((_node, command) => ({
    type: "run_output",
    runId: command.type === "run_output" ? command.runId : "",
    found: true,
    output: command.type === "run_output" && command.runId === "big" ? huge : "small",
    truncated: false,
  }));
  const ask = (runId: string) =>
    answerNodeQuery(
      service,
      create(NodeQuerySchema, { node: "n1", query: { case: "runOutput", value: { runId } } }),
    );
  const small = await ask("r1");
  assert.ok(small.answer.case === "runOutput");
  assert.deepEqual([small.answer.value.output, small.answer.value.truncated], ["small", false]);
  const big = await ask("big");
  assert.ok(big.answer.case === "runOutput");
  assert.equal(big.answer.value.output.length, MAX_OUTPUT_CHARS);
  assert.ok(big.answer.value.output.endsWith("END"));
  assert.equal(big.answer.value.truncated, true);
});

Deno.test("answerNodeQuery() turns a node's failure and an empty query into an error answer", async () => {
  const { service } = gateway(() => {
    throw new IopError("NOT_FOUND", "Cannot find node 'n9'");
  });
  const failed = await answerNodeQuery(
    service,
    create(NodeQuerySchema, { node: "n9", query: { case: "history", value: {} } }),
  );
  assert.ok(failed.answer.case === "error");
  assert.deepEqual([failed.answer.value.code, failed.answer.value.message], [
    "NOT_FOUND",
    "Cannot find node 'n9'",
  ]);
  const empty = await answerNodeQuery(service, create(NodeQuerySchema, { node: "n1" }));
  assert.ok(empty.answer.case === "error");
  assert.equal(empty.answer.value.code, "INVALID_ARGUMENT");
});
