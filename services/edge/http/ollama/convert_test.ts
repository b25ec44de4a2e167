import assert from "node:assert/strict";
import { FieldError, JsonFields } from "../json_fields.ts";
import { parseOllamaChat } from "./convert.ts";

const chat = (options: Record<string, unknown>) =>
  parseOllamaChat(
    new JsonFields({ model: "m", messages: [{ role: "user", content: "x" }], options }),
  );

function refused(options: Record<string, unknown>, param: string, problem: RegExp): void {
  assert.throws(() => chat(options), (err: unknown) => {
    assert.ok(err instanceof FieldError);
    assert.equal(err.code, "INVALID_ARGUMENT");
    assert.equal(err.param, param);
    assert.match(err.message, problem);
    return true;
  });
}

Deno.test("parseOllamaChat maps sampling options and passes known extras under their own names", () => {
  const req = chat({
    temperature: 0.5,
    top_p: 0.9,
    num_predict: 64,
    stop: ["\n"],
    seed: 7,
    top_k: 40,
    repeat_penalty: 1.1,
    num_ctx: 4096,
  });
  assert.deepEqual(req.input.sampling, {
    temperature: 0.5,
    topP: 0.9,
    maxTokens: 64,
    stop: ["\n"],
    seed: 7,
    extra: { top_k: 40, repeat_penalty: 1.1, num_ctx: 4096 },
  });
  assert.deepEqual(req.droppedOptions, []);
});

Deno.test("parseOllamaChat refuses options that would override the Edge's own fields", () => {
  for (const key of ["model", "messages", "stream", "n", "max_tokens", "prompt", "tools"]) {
    refused({ [key]: 1 }, `options.${key}`, /is not an option this Edge accepts/);
  }
});

Deno.test("parseOllamaChat drops Ollama runner options and reports them", () => {
  const req = chat({ num_gpu: 99, num_thread: 8, use_mmap: false, temperature: 0 });
  assert.deepEqual(req.droppedOptions, ["num_gpu", "num_thread", "use_mmap"]);
  assert.deepEqual(req.input.sampling, { temperature: 0 });
});

Deno.test("parseOllamaChat refuses numbers the wire or backend cannot carry, naming them", () => {
  refused({ num_predict: 2 ** 32 }, "options.num_predict", /at most 4294967295/);
  refused({ num_ctx: 2 ** 31 }, "options.num_ctx", /at most 2147483647/);
  refused({ seed: 2 ** 60 }, "options.seed", /at most 9007199254740991/);
  refused({ top_p: 1.5 }, "options.top_p", /at most 1/);
  refused({ temperature: -1 }, "options.temperature", /at least 0/);
  refused({ top_k: 1.5 }, "options.top_k", /must be an integer/);
  refused({ presence_penalty: 3 }, "options.presence_penalty", /at most 2/);
});
