import assert from "node:assert/strict";
import { Hono } from "hono";
import { IopError } from "../../../shared/errors.ts";
import { parseEdgeConfig } from "../config.ts";
import type { NodeCommand, NodeCommandResult } from "../ports.ts";
import { RUN_OUTPUT_PATH, type RunOutputGateway, runOutputRoute } from "./run_output.ts";

function appWith(
  answer: (node: string, command: NodeCommand) => NodeCommandResult,
  apiKeys: string[] = [],
) {
  const config = parseEdgeConfig({ edge: { id: "e" }, http: { api_keys: apiKeys } }, "edge.yaml");
  const service = {
    config,
    nodeCommand: (node: string, command: NodeCommand) => {
      try {
        return Promise.resolve(answer(node, command));
      } catch (err) {
        return Promise.reject(err);
      }
    },
  } as unknown as RunOutputGateway;
  const app = new Hono();
  app.get(RUN_OUTPUT_PATH, ...runOutputRoute(service));
  return app;
}

const stored = (output: string, found = true): NodeCommandResult => ({
  type: "run_output",
  runId: "r1",
  found,
  output,
  truncated: output.endsWith("bytes]\n"),
});

Deno.test("the run output route answers the stored text, 404 for an unknown run, 503 for an absent node", async () => {
  const app = appWith((node, command) => {
    if (node === "away") throw new IopError("UNAVAILABLE", "Cannot reach node 'away'");
    assert.equal(command.type, "run_output");
    return command.type === "run_output" && command.runId === "r1"
      ? stored("a\n[output truncated at 2 bytes]\n")
      : stored("", false);
  });
  const ok = await app.request("/api/iop/nodes/n1/runs/r1/output");
  assert.equal(ok.status, 200);
  assert.equal(ok.headers.get("x-iop-output-truncated"), "true");
  assert.equal(await ok.text(), "a\n[output truncated at 2 bytes]\n");
  const missing = await app.request("/api/iop/nodes/n1/runs/r2/output");
  assert.equal(missing.status, 404);
  assert.equal(await missing.text(), "Cannot find run 'r2' in the history of node 'n1'\n");
  const away = await app.request("/api/iop/nodes/away/runs/r1/output");
  assert.equal(away.status, 503);
  assert.equal(await away.text(), "UNAVAILABLE: Cannot reach node 'away'\n");
});

Deno.test("the run output route needs an API key when the edge lists keys", async () => {
  const app = appWith(() => stored("secret log\n"), ["k1"]);
  const anonymous = await app.request("/api/iop/nodes/n1/runs/r1/output");
  assert.equal(anonymous.status, 401);
  const keyed = await app.request("/api/iop/nodes/n1/runs/r1/output", {
    headers: { authorization: "Bearer k1" },
  });
  assert.equal(keyed.status, 200);
  assert.equal(await keyed.text(), "secret log\n");
});
