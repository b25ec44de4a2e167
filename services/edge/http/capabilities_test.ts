import assert from "node:assert/strict";
import { parseEdgeConfig } from "../config.ts";
import { checkFeatures, type FeatureFields, kindsOf, modelFeatures } from "./capabilities.ts";
import { FieldError } from "./json_fields.ts";
import { resolveModel } from "./model_resolver.ts";

const config = parseEdgeConfig({
  wire: { insecure_plaintext: true },
  nodes: [
    {
      id: "n1",
      token: "t1",
      adapters: [
        { name: "mock", kind: "mock" },
        { name: "ollama", kind: "ollama", base_url: "http://o:11434" },
        { name: "oa", kind: "openai_compat", base_url: "http://a/v1" },
        { name: "sh", kind: "cli", profiles: [{ name: "echo", command: "echo" }] },
      ],
      providers: [
        { id: "p1", adapter: "ollama", target: "llama", model_group: "mixed", max_concurrency: 1 },
        { id: "p2", adapter: "oa", target: "gpt", model_group: "mixed", max_concurrency: 1 },
        { id: "p3", adapter: "oa", target: "gpt", model_group: "cloud", max_concurrency: 1 },
      ],
    },
  ],
  models: [
    { name: "mixed", route: "pool" },
    { name: "cloud", route: "pool" },
    { name: "shell", route: "direct", adapter: "sh", target: "echo" },
    { name: "mocked", route: "direct", adapter: "mock", target: "echo" },
  ],
}, "edge.yaml");

const FIELDS: FeatureFields = {
  output_format: "response_format",
  tool_choice: "tool_choice",
  parallel_tool_calls: "parallel_tool_calls",
  tool_result: (i) => `messages[${i}].tool_call_id`,
  image: (i, j) => `messages[${i}].content[${j}]`,
  embed: "input",
};

const model = (name: string) => resolveModel(config, name);

function refused(
  name: string,
  run: Parameters<typeof checkFeatures>[2],
  param: string,
  message: string,
) {
  assert.throws(() => checkFeatures(config, model(name), run, FIELDS), (err: unknown) => {
    assert.ok(err instanceof FieldError);
    assert.equal(err.code, "INVALID_ARGUMENT");
    assert.equal(err.param, param);
    assert.equal(err.message, message);
    return true;
  });
}

Deno.test("kindsOf reads the kinds of a pool's providers and of a direct model's adapter, once", () => {
  assert.deepEqual(kindsOf(config, model("mixed")), ["ollama", "openai_compat"]);
  assert.deepEqual(kindsOf(config, model("cloud")), ["openai_compat"]);
  assert.deepEqual(kindsOf(config, model("shell")), ["cli"]);
  assert.equal(kindsOf(config, model("mixed")), kindsOf(config, model("mixed")));
});

Deno.test("checkFeatures refuses a field some kind serving the model cannot honour, naming field and kind", () => {
  refused(
    "shell",
    { messages: [], outputFormat: { type: "json_object" } },
    "response_format",
    "response_format: model 'shell' is served by a cli adapter, which cannot constrain output to JSON",
  );
  refused(
    "mocked",
    { messages: [], outputFormat: { type: "json_object" } },
    "response_format",
    "response_format: model 'mocked' is served by a mock adapter, which cannot constrain output to JSON",
  );
  // A pool passes only what every provider's kind honours: the route may pick any.
  refused(
    "mixed",
    { messages: [], toolChoice: "required" },
    "tool_choice",
    "tool_choice: model 'mixed' is served by an ollama adapter, which cannot force a tool call",
  );
  refused(
    "mixed",
    { messages: [{ role: "user", content: "q" }, { role: "tool", content: "a" }] },
    "messages[1].tool_call_id",
    "messages[1].tool_call_id: model 'mixed' is served by an openai_compat adapter, which needs " +
      "the id of the tool call each tool result answers, and no earlier assistant tool call " +
      "matches this one",
  );
  checkFeatures(config, model("cloud"), { messages: [], toolChoice: "required" }, FIELDS);
  checkFeatures(
    config,
    model("mixed"),
    { messages: [], outputFormat: { type: "json_object" } },
    FIELDS,
  );
  checkFeatures(config, model("shell"), { messages: [] }, FIELDS);
});

Deno.test("modelFeatures lists what every kind serving a model honours", () => {
  assert.deepEqual(modelFeatures(config, model("mixed")), {
    response_format: ["text", "json_object", "json_schema"],
    tool_choice: ["auto", "none"],
    parallel_tool_calls: false,
    capabilities: ["chat"],
  });
  assert.deepEqual(modelFeatures(config, model("shell")), {
    response_format: ["text"],
    tool_choice: ["auto", "none"],
    parallel_tool_calls: true,
    capabilities: ["chat"],
  });
});
