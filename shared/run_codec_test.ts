import assert from "node:assert/strict";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  RunEventSchema,
  RunRequestSchema,
  ToolChoiceMode,
  ToolChoiceSchema,
} from "../proto/gen/iop/v1/node_pb.ts";
import { type RunInput, runInput } from "./run.ts";
import { fromRunRequest, fromWireRunEvent, toRunRequest, toWireRunEvent } from "./run_codec.ts";

/** Encodes `input` to bytes and back, as the Edge→Node link does. */
function roundTrip(input: RunInput): RunInput {
  const bytes = toBinary(RunRequestSchema, toRunRequest("run-1", input));
  return fromRunRequest(fromBinary(RunRequestSchema, bytes));
}

const base = runInput({ adapter: "openai", target: "m" });

Deno.test("output format, tool choice and parallel_tool_calls survive the wire unchanged", () => {
  const schema = { type: "object", properties: { a: { type: "string" } }, required: ["a"] };
  const cases: Partial<RunInput>[] = [
    { outputFormat: { type: "json_object" } },
    { outputFormat: { type: "json_schema", name: "answer", schema, strict: true } },
    { outputFormat: { type: "json_schema", name: "n", description: "d", strict: false } },
    { outputFormat: { type: "json_schema", name: "bare" } },
    { toolChoice: "auto" },
    { toolChoice: "none" },
    { toolChoice: "required", parallelToolCalls: false },
    { toolChoice: { function: "get_weather" }, parallelToolCalls: true },
  ];
  for (const fields of cases) {
    assert.deepEqual(roundTrip({ ...base, ...fields }), { ...base, ...fields });
  }
});

Deno.test("a run without them decodes without them (absent is not false or text)", () => {
  const back = roundTrip(base);
  assert.ok(!("outputFormat" in back));
  assert.ok(!("toolChoice" in back));
  assert.ok(!("parallelToolCalls" in back));
});

Deno.test("fromRunRequest refuses a tool choice or output format it cannot read instead of dropping it", () => {
  const unknownMode = toRunRequest("r", base);
  unknownMode.toolChoice = create(ToolChoiceSchema, {
    choice: { case: "mode", value: 7 as ToolChoiceMode },
  });
  assert.throws(() => fromRunRequest(unknownMode), {
    name: "IopError",
    code: "INVALID_ARGUMENT",
    message: "Cannot run as the tool choice has no known value",
  });
  const emptyFormat = toRunRequest("r", { ...base, outputFormat: { type: "json_object" } });
  emptyFormat.outputFormat!.format = { case: undefined };
  assert.throws(() => fromRunRequest(emptyFormat), {
    code: "INVALID_ARGUMENT",
    message: "Cannot run as the output format has no known kind",
  });
  const badSchema = toRunRequest("r", {
    ...base,
    outputFormat: { type: "json_schema", name: "x", schema: {} },
  });
  const f = badSchema.outputFormat!.format;
  if (f.case === "jsonSchema") f.value.schemaJson = "[1]";
  assert.throws(() => fromRunRequest(badSchema), {
    message: "Cannot parse output format schema as a JSON object",
  });
});

Deno.test("trace_parent and trace_state survive the wire; a run without them has none", () => {
  const traced = {
    ...base,
    traceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    traceState: "vendor=abc",
  };
  assert.deepEqual(roundTrip(traced), traced);
  const back = roundTrip(base);
  assert.ok(!("traceParent" in back));
  assert.ok(!("traceState" in back));
});

Deno.test("fromRunRequest drops a malformed trace_parent together with its trace_state", () => {
  const req = toRunRequest("r", base);
  req.traceParent = "00-00000000000000000000000000000000-b7ad6b7169203331-01";
  req.traceState = "vendor=abc";
  const back = fromRunRequest(req);
  assert.ok(!("traceParent" in back));
  assert.ok(!("traceState" in back));
});

Deno.test("an output delta goes to the wire as the message protobuf-es builds, and back", () => {
  const event = { runId: "run-1", seq: 7, timestampMs: 1_700_000_000_123, type: "output" as const };
  for (const text of ["", "hello", "naïve 😀 text"]) {
    const wire = toWireRunEvent({ ...event, text });
    const built = create(RunEventSchema, {
      runId: "run-1",
      seq: 7n,
      timestampMs: 1_700_000_000_123n,
      event: { case: "output", value: { text } },
    });
    assert.deepEqual(wire, built);
    assert.deepEqual(toBinary(RunEventSchema, wire), toBinary(RunEventSchema, built));
    assert.deepEqual(fromWireRunEvent(fromBinary(RunEventSchema, toBinary(RunEventSchema, wire))), {
      ...event,
      text,
    });
  }
});
