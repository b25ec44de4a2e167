import assert from "node:assert/strict";
import { ConfigReader } from "../config.ts";
import { httpModelKind } from "./http_model.ts";

const parse = (raw: Record<string, unknown>) =>
  httpModelKind.parse(new ConfigReader("edge.yaml", raw, "nodes[0].adapters[1]"));

Deno.test("a literal api_key is a config error naming the key and api_key_env, never the key", () => {
  // The exact message: it names the key path and the way out, and quotes nothing of the key.
  assert.throws(() => parse({ base_url: "https://api.example", api_key: "sk-live-123456" }), {
    name: "ConfigError",
    message: "edge.yaml: nodes[0].adapters[1].api_key: a literal key would be sent to the node " +
      "with its configuration: set api_key_env to the name of a variable on the node that " +
      "holds the key instead (or send_api_key: true to send this key anyway)",
  });
});

Deno.test("send_api_key: true admits a literal key, and the pushed form keeps the opt-in", () => {
  const settings = parse({ base_url: "https://api.example", api_key: "k1", send_api_key: true });
  assert.equal(settings.apiKey, "k1");
  const pushed = httpModelKind.toConfig(settings);
  assert.equal(pushed.send_api_key, true);
  // The Node reads the pushed form with the same rule.
  assert.equal(httpModelKind.parse(new ConfigReader("pushed config", pushed)).apiKey, "k1");
  assert.ok(!("send_api_key" in httpModelKind.toConfig(parse({ base_url: "http://h" }))));
});

Deno.test("api_key and api_key_env together are refused", () => {
  assert.throws(
    () => parse({ base_url: "http://h", api_key: "k", api_key_env: "K", send_api_key: true }),
    {
      message: "edge.yaml: nodes[0].adapters[1].api_key: must not be set together with " +
        "api_key_env: set one of them",
    },
  );
});

Deno.test("a base_url with a user name, password or query is refused, shown redacted", () => {
  assert.throws(() => parse({ base_url: "http://admin:hunter2@ollama:11434/" }), {
    name: "ConfigError",
    message: "edge.yaml: nodes[0].adapters[1].base_url: must not contain a user name or " +
      "password: current value is 'http://***:***@ollama:11434/' (give the backend's key " +
      "with api_key_env instead)",
  });
  assert.throws(() => parse({ base_url: "https://sk-abc@api.example/v1" }), {
    message: /current value is 'https:\/\/\*\*\*@api\.example\/v1'/,
  });
  assert.throws(() => parse({ base_url: "https://api.example/v1?key=AIza-secret" }), {
    message: "edge.yaml: nodes[0].adapters[1].base_url: must not have a query or fragment: " +
      "current value is 'https://api.example/v1?***' (give the backend's key with api_key_env " +
      "instead)",
  });
  assert.equal(parse({ base_url: "http://ollama:11434" }).baseUrl, "http://ollama:11434");
});
