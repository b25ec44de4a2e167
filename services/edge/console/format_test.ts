import assert from "node:assert/strict";
import type { ResourceStatus, StatusSnapshot } from "../ports.ts";
import { formatStatus } from "./format.ts";

const WHY =
  "profiles[0].command: 'bash' is not allowed on this node (policy.cli.commands allows: sh)";

const resource = (id: string, extra: Partial<ResourceStatus> = {}): ResourceStatus => ({
  kind: "adapter",
  id,
  adapter: id,
  adapterKind: id,
  target: "",
  modelGroup: "",
  maxConcurrency: 0,
  inFlight: 0,
  queued: 0,
  enabled: true,
  refused: "",
  ...extra,
});

const status: StatusSnapshot = {
  edgeId: "e1",
  version: "1",
  startedAtMs: 0,
  runsInFlight: 0,
  nodes: [{
    id: "n1",
    alias: "",
    connected: true,
    draining: false,
    version: "1",
    hostname: "h",
    connectedAtMs: 0,
    lastSeenMs: 0,
    inFlight: 0,
    configVersion: 2,
    wantedConfigVersion: 2,
    resources: [
      resource("mock"),
      resource("cli", { refused: WHY }),
      resource("off", { enabled: false }),
    ],
  }],
};

Deno.test("/status marks each resource ok, refused or disabled, then says why each refused one is", () => {
  const text = formatStatus(status);
  assert.match(text, /^NODE\s+LINK\s+KIND\s+RESOURCE\s+ADAPTER.*\s+QUEUED\s+STATE$/m);
  assert.match(text, /^n1\s+up\s+adapter\s+mock\s+mock\(mock\)\s.*\sok$/m);
  assert.match(text, /^n1\s+up\s+adapter\s+cli\s+cli\(cli\)\s.*\srefused$/m);
  assert.match(text, /^n1\s+up\s+adapter\s+off\s+off\(off\)\s.*\sdisabled$/m);
  assert.ok(text.endsWith(`refused on n1: adapter cli: ${WHY}\n`), text);
});
