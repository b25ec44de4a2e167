import assert from "node:assert/strict";
import { ConfigReader } from "../../shared/config.ts";
import { createLogger } from "../../shared/log.ts";
import {
  applyNodePolicy,
  DEFAULT_NODE_POLICY,
  logNodePolicy,
  type NodePolicy,
  policyRefusal,
  readNodePolicy,
} from "./policy.ts";
import type { AdapterConfig, CliProfile, HttpModelSettings } from "./ports.ts";

const read = (raw: unknown) => readNodePolicy(new ConfigReader("node.yaml", raw));

const policy = (partial: Partial<NodePolicy> = {}): NodePolicy => ({
  adapterKinds: ["mock", "cli", "ollama", "vllm", "openai_compat"],
  cli: { commands: ["sh"], cwd: ["/srv/work"] },
  apiKeyEnv: ["OPENAI_API_KEY"],
  backendHosts: ["127.0.0.1:11434", "ollama"],
  isDefault: false,
  ...partial,
});

const cli = (profiles: Partial<CliProfile>[], name = "cli"): AdapterConfig => ({
  name,
  kind: "cli",
  enabled: true,
  settings: {
    profiles: profiles.map((p, i) => ({
      name: `p${i}`,
      command: "sh",
      args: [],
      resumeArgs: [],
      env: {},
      cwd: "/srv/work",
      timeoutMs: 0,
      description: "",
      ...p,
    })),
  },
});

const model = (settings: Partial<HttpModelSettings>, name = "llm"): AdapterConfig => ({
  name,
  kind: "openai_compat",
  enabled: true,
  settings: {
    baseUrl: "http://127.0.0.1:11434",
    apiKey: "",
    apiKeyEnv: "",
    connectTimeoutMs: 0,
    firstTokenTimeoutMs: 0,
    idleTimeoutMs: 0,
    models: [],
    ...settings,
  },
});

const mock = (name = "mock"): AdapterConfig => ({
  name,
  kind: "mock",
  enabled: true,
  settings: {
    tokens: 1,
    tokenDelayMs: 0,
    startDelayMs: 0,
    failWith: "",
    failRetryable: false,
    embeddingDimensions: 8,
  },
});

const refusal = (config: AdapterConfig, p: NodePolicy = policy()) =>
  policyRefusal(p, config, "/home/node");

Deno.test("a node config without a policy section allows only the mock kind", () => {
  assert.equal(read({}), DEFAULT_NODE_POLICY);
  assert.equal(read({ policy: null }), DEFAULT_NODE_POLICY);
  assert.deepEqual(DEFAULT_NODE_POLICY, {
    adapterKinds: ["mock"],
    cli: { commands: [], cwd: [] },
    apiKeyEnv: [],
    backendHosts: [],
    isDefault: true,
  });
});

Deno.test("a policy section is read with each list's default, hosts lowercased", () => {
  assert.deepEqual(
    read({
      policy: {
        adapter_kinds: ["mock", "cli", "ollama"],
        cli: { commands: ["sh", "/usr/local/bin/claude"], cwd: ["/srv/work"] },
        api_key_env: ["OPENAI_API_KEY"],
        backend_hosts: ["127.0.0.1:11434", "Ollama:11434", "[::1]:8000", "gpu-box"],
      },
    }),
    {
      adapterKinds: ["mock", "cli", "ollama"],
      cli: { commands: ["sh", "/usr/local/bin/claude"], cwd: ["/srv/work"] },
      apiKeyEnv: ["OPENAI_API_KEY"],
      backendHosts: ["127.0.0.1:11434", "ollama:11434", "[::1]:8000", "gpu-box"],
      isDefault: false,
    },
  );
  assert.deepEqual(read({ policy: {} }), { ...DEFAULT_NODE_POLICY, isDefault: false });
  assert.deepEqual(read({ policy: { adapter_kinds: [] } }).adapterKinds, []);
});

Deno.test("an invalid policy is refused naming the key, the problem and the value", () => {
  const cases: [unknown, string][] = [
    [[], "node.yaml: policy: must be a mapping: current value is a list"],
    [
      { adapter_kind: ["cli"] },
      "node.yaml: policy.adapter_kind: unknown key (known: adapter_kinds, cli, api_key_env, " +
      "backend_hosts, max_active_runs)",
    ],
    [
      { cli: { command: ["sh"] } },
      "node.yaml: policy.cli.command: unknown key (known: commands, cwd)",
    ],
    [
      { adapter_kinds: ["mock", "olama"] },
      "node.yaml: policy.adapter_kinds[1]: must be one of mock, cli, ollama, vllm, " +
      "openai_compat: current value is 'olama'",
    ],
    [
      { adapter_kinds: "cli" },
      "node.yaml: policy.adapter_kinds: must be a list: current value is 'cli'",
    ],
    [{ cli: { commands: ["sh", " "] } }, "node.yaml: policy.cli.commands[1]: must not be empty"],
    [
      { api_key_env: ["OPENAI-KEY"] },
      "node.yaml: policy.api_key_env[0]: must be an environment variable name: current value " +
      "is 'OPENAI-KEY'",
    ],
    [
      { api_key_env: ["IOP_NODE_TOKEN"] },
      "node.yaml: policy.api_key_env[0]: must not name an IOP_ variable: those configure the " +
      "node itself",
    ],
    [
      { backend_hosts: ["http://ollama:11434"] },
      "node.yaml: policy.backend_hosts[0]: must be host:port or host: current value is " +
      "'http://ollama:11434'",
    ],
    [
      { backend_hosts: ["ollama:0"] },
      "node.yaml: policy.backend_hosts[0]: must be host:port or host: current value is 'ollama:0'",
    ],
  ];
  for (const [section, message] of cases) {
    assert.throws(() => read({ policy: section }), { name: "ConfigError", message });
  }
});

Deno.test("a kind outside adapter_kinds is refused naming both keys; without a section, saying so", () => {
  assert.equal(
    refusal(cli([{}]), policy({ adapterKinds: ["mock"] })),
    "kind: 'cli' is not allowed on this node (policy.adapter_kinds allows: mock)",
  );
  assert.equal(
    refusal(cli([{}]), DEFAULT_NODE_POLICY),
    "kind: 'cli' is not allowed on this node " +
      "(policy.adapter_kinds allows: mock; node.yaml has no policy section)",
  );
  assert.equal(refusal(mock(), DEFAULT_NODE_POLICY), undefined);
  assert.equal(
    refusal(mock(), policy({ adapterKinds: [] })),
    "kind: 'mock' is not allowed on this node (policy.adapter_kinds allows none)",
  );
});

Deno.test("a CLI command must match policy.cli.commands exactly", () => {
  assert.equal(refusal(cli([{ command: "sh" }])), undefined);
  assert.equal(
    refusal(cli([{ command: "sh" }, { command: "sh" }, { command: "bash" }])),
    "profiles[2].command: 'bash' is not allowed on this node (policy.cli.commands allows: sh)",
  );
  for (const command of ["/bin/sh", "sh ", "./sh", "SH"]) {
    assert.match(refusal(cli([{ command }])) ?? "", /^profiles\[0\]\.command: /, command);
  }
  assert.equal(
    refusal(cli([{}]), policy({ cli: { commands: [], cwd: ["/"] } })),
    "profiles[0].command: 'sh' is not allowed on this node (policy.cli.commands allows none)",
  );
});

Deno.test("a CLI cwd must be an allowed directory or inside one, after . and .. are resolved", () => {
  for (const cwd of ["/srv/work", "/srv/work/", "/srv/work/a/b", "/srv/work/a/../b"]) {
    assert.equal(refusal(cli([{ cwd }])), undefined, cwd);
  }
  for (const cwd of ["/srv", "/srv/work-evil", "/srv/work/../other", "/etc", "work"]) {
    assert.equal(
      refusal(cli([{ cwd }])),
      `profiles[0].cwd: '${cwd}' is not inside a directory allowed on this node ` +
        "(policy.cli.cwd allows: /srv/work)",
      cwd,
    );
  }
  assert.equal(
    refusal(cli([{ cwd: "" }])),
    "profiles[0].cwd: not set, so the profile would run in the node's working directory, which " +
      'is not allowed on this node (policy.cli.cwd allows: /srv/work; list "." to allow it)',
  );
  // "." is the node's working directory (here /home/node); relative dirs resolve against it.
  const dot = policy({ cli: { commands: ["sh"], cwd: ["."] } });
  for (const cwd of ["", ".", "jobs", "/home/node/jobs"]) {
    assert.equal(refusal(cli([{ cwd }]), dot), undefined, cwd);
  }
  assert.match(refusal(cli([{ cwd: ".." }]), dot) ?? "", /^profiles\[0\]\.cwd: '\.\.' is not/);
  const root = policy({ cli: { commands: ["sh"], cwd: ["/"] } });
  assert.equal(refusal(cli([{ cwd: "/anything/at/all" }]), root), undefined);
});

Deno.test("a CLI profile may not set dynamic-loader variables", () => {
  assert.equal(refusal(cli([{ env: { FOO: "1" } }])), undefined);
  assert.equal(
    refusal(cli([{ env: { FOO: "1", LD_PRELOAD: "/srv/work/evil.so" } }])),
    "profiles[0].env.LD_PRELOAD: dynamic-loader variables are never allowed on a node",
  );
  assert.match(refusal(cli([{ env: { DYLD_INSERT_LIBRARIES: "x" } }])) ?? "", /DYLD_INSERT/);
});

Deno.test("a base_url must point at a listed host:port, or a host listed without a port", () => {
  for (
    const baseUrl of [
      "http://127.0.0.1:11434",
      "http://127.0.0.1:11434/v1",
      "http://ollama:1",
      "https://OLLAMA/v1",
    ]
  ) {
    assert.equal(refusal(model({ baseUrl })), undefined, baseUrl);
  }
  const cases: [string, string][] = [
    ["http://127.0.0.1:11435", "127.0.0.1:11435"],
    ["http://127.0.0.1", "127.0.0.1:80"],
    ["https://127.0.0.1", "127.0.0.1:443"],
    ["http://169.254.169.254/latest/meta-data", "169.254.169.254:80"],
    ["http://ollama.evil.example:11434", "ollama.evil.example:11434"],
    ["http://[::1]:11434", "[::1]:11434"],
  ];
  for (const [baseUrl, hostPort] of cases) {
    assert.equal(
      refusal(model({ baseUrl })),
      `base_url: host '${hostPort}' is not allowed on this node ` +
        "(policy.backend_hosts allows: 127.0.0.1:11434, ollama)",
      baseUrl,
    );
  }
  assert.equal(
    refusal(model({ baseUrl: "http://[::1]:8000" }), policy({ backendHosts: ["[::1]:8000"] })),
    undefined,
  );
  assert.equal(refusal(model({ baseUrl: "not a url" })), "base_url: is not a URL");
});

Deno.test("an api_key_env must be listed in policy.api_key_env", () => {
  assert.equal(refusal(model({ apiKeyEnv: "OPENAI_API_KEY" })), undefined);
  assert.equal(
    refusal(model({ apiKeyEnv: "IOP_NODE_TOKEN" })),
    "api_key_env: 'IOP_NODE_TOKEN' is not allowed on this node " +
      "(policy.api_key_env allows: OPENAI_API_KEY)",
  );
  assert.equal(
    refusal(model({ apiKeyEnv: "AWS_SECRET_ACCESS_KEY" }), policy({ apiKeyEnv: [] })),
    "api_key_env: 'AWS_SECRET_ACCESS_KEY' is not allowed on this node " +
      "(policy.api_key_env allows none)",
  );
});

Deno.test("applyNodePolicy refuses by name and passes what it allows, disabled and unknown kinds", () => {
  const unknown = {
    name: "q",
    kind: "quantum",
    enabled: true,
    settings: {},
  } as unknown as AdapterConfig;
  const disabled = { ...cli([{ command: "bash" }], "off"), enabled: false };
  const twice = [cli([{ command: "bash" }], "dup"), { ...mock("dup") }];
  const { allowed, refused } = applyNodePolicy(
    policy(),
    [mock(), cli([{ command: "bash" }]), disabled, unknown, model({}), ...twice],
    "/home/node",
  );
  assert.deepEqual(allowed.map((c) => c.name), ["mock", "off", "q", "llm"]);
  assert.deepEqual(Object.keys(refused), ["cli", "dup"]);
});

Deno.test("the start log says what the policy allows, and warns how to allow more without one", () => {
  const lines: Record<string, unknown>[] = [];
  const logger = createLogger("test", { writer: (line) => lines.push(JSON.parse(line)) });
  logNodePolicy(logger, DEFAULT_NODE_POLICY);
  logNodePolicy(logger, policy());
  const [fallback, explicit] = lines;
  assert.equal(fallback?.level, "warn");
  assert.match(String(fallback?.msg), /no policy section.*only mock.*policy\.cli\.commands/);
  assert.deepEqual(fallback?.adapter_kinds, ["mock"]);
  assert.equal(explicit?.level, "info");
  assert.deepEqual(explicit?.cli_commands, ["sh"]);
  assert.deepEqual(explicit?.backend_hosts, ["127.0.0.1:11434", "ollama"]);
});
