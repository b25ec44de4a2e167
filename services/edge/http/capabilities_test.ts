import assert from "node:assert/strict";
import { parseEdgeConfig } from "../config.ts";
import {
  checkDeclared,
  checkFeatures,
  type FeatureFields,
  kindsOf,
  modelFeatures,
} from "./capabilities.ts";
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
    {
      name: "embedder",
      route: "direct",
      adapter: "oa",
      target: "emb",
      capabilities: ["embeddings"],
    },
    {
      name: "seer",
      route: "direct",
      adapter: "ollama",
      target: "llava",
      capabilities: ["chat", "vision"],
    },
    {
      name: "shell-seer",
      route: "direct",
      adapter: "sh",
      target: "echo",
      capabilities: ["chat", "vision", "embeddings"],
    },
  ],
}, "edge.yaml");

const FIELDS: FeatureFields = {
  output_format: "response_format",
  tool_choice: "tool_choice",
  parallel_tool_calls: "parallel_tool_calls",
  tool_result: (i) => `messages[${i}].tool_call_id`,
  image: (i, j) => `messages[${i}].content[${j}]`,
  embed: "input",
  tools: "tools",
  truncate: "truncate",
  sampling: "options",
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

const PNG_URL = "data:image/png;base64,iVBORw0KGgo=";
const withImage = (url: string) => ({
  messages: [
    { role: "system" as const, content: "s" },
    {
      role: "user" as const,
      content: "look",
      parts: [{ type: "text" as const, text: "look" }, { type: "image" as const, url }],
    },
  ],
});

function undeclared(name: string, run: Parameters<typeof checkDeclared>[1], param: string) {
  assert.throws(() => checkDeclared(model(name), run, FIELDS), (err: unknown) => {
    assert.ok(err instanceof FieldError);
    assert.equal(err.code, "INVALID_ARGUMENT");
    assert.equal(err.param, param);
    return true;
  });
}

Deno.test("checkDeclared refuses what the model does not declare: chat, embeddings or images", () => {
  undeclared("embedder", { messages: [{ role: "user", content: "hi" }] }, "model");
  assert.throws(
    () => checkDeclared(model("embedder"), { messages: [] }, FIELDS),
    (err: unknown) =>
      err instanceof Error && err.message ===
        "model: cannot chat with model 'embedder' as it does not declare chat " +
          "(its models[].capabilities: embeddings)",
  );
  undeclared("cloud", { messages: [], embed: { inputs: ["x"] } }, "model");
  undeclared("cloud", withImage(PNG_URL), "messages[1].content[1]");
  checkDeclared(model("embedder"), { messages: [], embed: { inputs: ["x"] } }, FIELDS);
  checkDeclared(model("seer"), withImage(PNG_URL), FIELDS);
  checkDeclared(model("cloud"), { messages: [{ role: "user", content: "hi" }] }, FIELDS);
});

Deno.test("checkFeatures refuses an image link to Ollama, any image or embedding to a CLI", () => {
  refused(
    "seer",
    withImage("https://img.example/cat.png"),
    "messages[1].content[1]",
    "messages[1].content[1]: model 'seer' is served by an ollama adapter, which takes images as " +
      "data: URLs (base64) only, not as links",
  );
  checkFeatures(config, model("seer"), withImage(PNG_URL), FIELDS);
  refused(
    "shell-seer",
    withImage(PNG_URL),
    "messages[1].content[1]",
    "messages[1].content[1]: model 'shell-seer' is served by a cli adapter, which cannot take images",
  );
  refused(
    "shell-seer",
    { messages: [], embed: { inputs: ["x"] } },
    "input",
    "input: model 'shell-seer' is served by a cli adapter, which cannot embed",
  );
});

Deno.test("modelFeatures lists only the declared capabilities every kind serving the model has", () => {
  assert.deepEqual(modelFeatures(config, model("embedder")).capabilities, ["embeddings"]);
  assert.deepEqual(modelFeatures(config, model("seer")).capabilities, ["chat", "vision"]);
  assert.deepEqual(modelFeatures(config, model("shell-seer")).capabilities, ["chat"]);
});
