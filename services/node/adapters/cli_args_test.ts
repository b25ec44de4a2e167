import assert from "node:assert/strict";
import { IopError } from "../../../shared/errors.ts";
import { type ArgValues, fillArgs } from "./cli_args.ts";

const ORIGIN = { profile: "ask", command: "agent", key: "args" };

function fill(template: string[], values: Partial<ArgValues>): string[] {
  return fillArgs(template, { prompt: "", session: "", node_id: "", ...values }, ORIGIN);
}

function refusal(message: string) {
  return (err: unknown) => {
    assert.ok(err instanceof IopError);
    assert.equal(err.code, "INVALID_ARGUMENT");
    assert.equal(err.message, message);
    return true;
  };
}

Deno.test("fillArgs() replaces every placeholder in one pass", () => {
  assert.deepEqual(
    fill(["-p", "{prompt}", "--resume={session}", "{node_id}"], {
      prompt: "say {session}",
      session: "s1",
      node_id: "n1",
    }),
    ["-p", "say {session}", "--resume=s1", "n1"],
  );
});

Deno.test("fillArgs() refuses a prompt that would be a whole option argument", () => {
  for (const prompt of ["--version", "-rf", "-", "--"]) {
    assert.throws(
      () => fill(["-p", "{prompt}"], { prompt }),
      refusal(
        "Cannot run CLI profile 'ask' as the prompt starts with '-', which 'agent' would read " +
          "as an option (args[1] is '{prompt}' with no '--' before it)",
      ),
      prompt,
    );
  }
});

Deno.test("fillArgs() refuses a prompt at the head of an argument, past empty values before it", () => {
  assert.throws(
    () => fill(["{node_id}{prompt}.md"], { prompt: "-rf" }),
    refusal(
      "Cannot run CLI profile 'ask' as the prompt starts with '-', which 'agent' would read " +
        "as an option (args[0] is '{node_id}{prompt}.md' with no '--' before it)",
    ),
  );
  assert.throws(
    () =>
      fillArgs(["{session}"], { prompt: "", session: "-x", node_id: "" }, {
        ...ORIGIN,
        key: "resume_args",
      }),
    refusal(
      "Cannot run CLI profile 'ask' as the session id starts with '-', which 'agent' would " +
        "read as an option (resume_args[0] is '{session}' with no '--' before it)",
    ),
  );
});

Deno.test("fillArgs() passes a leading '-' through after a '--' of the template", () => {
  assert.deepEqual(fill(["--", "{prompt}"], { prompt: "--version" }), ["--", "--version"]);
  assert.deepEqual(fill(["-q", "--", "a", "{prompt}"], { prompt: "-rf" }), [
    "-q",
    "--",
    "a",
    "-rf",
  ]);
  // A '--' after the argument does not protect it.
  assert.throws(() => fill(["{prompt}", "--"], { prompt: "-rf" }), IopError);
});

Deno.test("fillArgs() passes values inside a larger argument, and the node's own id, as they are", () => {
  assert.deepEqual(fill(["--message={prompt}", "p:{prompt}"], { prompt: "--version" }), [
    "--message=--version",
    "p:--version",
  ]);
  assert.deepEqual(fill(["{node_id}"], { node_id: "-node" }), ["-node"]);
  assert.deepEqual(fill(["{prompt}"], { prompt: "hello -rf" }), ["hello -rf"]);
  // A '-' the template itself writes is the operator's option, whatever follows it.
  assert.deepEqual(fill(["-{prompt}"], { prompt: "-x" }), ["--x"]);
});
