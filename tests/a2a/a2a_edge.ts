/**
 * The A2A suites' Edge: agents on a mock adapter and on CLI profiles (echo, a counter that writes
 * its pid, a failing one, one that resumes sessions) served through the A2A surface, with one
 * Node; built on the shared fixture in tests/stack.ts.
 * @module
 */
import type { A2aTaskStore } from "../../services/edge/a2a/task_store.ts";
import { type RawConfig, startStack, type TestEdge } from "../stack.ts";

/** CLI profiles the tests use; `count` writes its pid to `${dir}/count.pid`. */
function profiles(dir: string) {
  return [
    {
      name: "echo",
      command: "sh",
      args: ["-c", 'for w in $1; do echo "$w"; done', "echo", "{prompt}"],
    },
    {
      name: "count",
      command: "sh",
      args: [
        "-c",
        `echo $$ > ${dir}/count.pid; i=1; while true; do echo "step $i"; i=$((i+1)); sleep 0.2; done`,
      ],
    },
    {
      name: "fail",
      command: "sh",
      args: [
        "-c",
        'echo "thinking hard" >&2; echo partial; sleep 0.1; echo "disk full" >&2; exit 3',
      ],
    },
    {
      name: "session",
      command: "sh",
      args: ["-c", 'printf "new:%s" "$1"', "sh", "{prompt}"],
      resume_args: ["-c", 'printf "resume:%s:%s" "$1" "$2"', "sh", "{session}", "{prompt}"],
    },
  ];
}

/** The Edge config of the A2A suites, with CLI profiles writing into `dir`. */
function a2aConfig(dir: string, apiKeys: string[] = []): RawConfig {
  return {
    edge: { id: "edge-test" },
    http: { api_keys: apiKeys },
    wire: { heartbeat_interval_ms: 1000 },
    control_plane: { address: "" },
    a2a: { task_retention_ms: 60_000, store_path: ":memory:" },
    nodes: [{
      id: "node-1",
      token: "tok-1",
      adapters: [
        { name: "mock", kind: "mock", tokens: 6, token_delay_ms: 5 },
        { name: "cli", kind: "cli", profiles: profiles(dir) },
      ],
    }],
    agents: [
      { id: "echo", name: "Echo", kind: "a2a", adapter: "cli", target: "echo" },
      { id: "demo", name: "Demo", kind: "a2a", adapter: "mock", target: "demo" },
      { id: "count", name: "Counter", kind: "a2a", adapter: "cli", target: "count" },
      { id: "fail", name: "Failer", kind: "a2a", adapter: "cli", target: "fail" },
      { id: "session", name: "Sessions", kind: "a2a", adapter: "cli", target: "session" },
      { id: "nowhere", name: "Unserved", kind: "a2a", adapter: "cli", target: "missing" },
    ],
  };
}

/** Starts the A2A suites' Edge over `store` with its Node registered; the Edge closes `store`. */
export function startA2aEdge(store: A2aTaskStore, apiKeys: string[] = []): Promise<TestEdge> {
  return startStack({ config: (dir) => a2aConfig(dir, apiKeys), a2a: store });
}
