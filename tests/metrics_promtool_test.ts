/**
 * Every tier's `/metrics`, as the real services serve it after a little traffic, passes
 * `promtool check metrics` (Prometheus' own parser and linter) with no error and no lint warning.
 * The stack is `deno task up` (Control Plane, Edge and Node as child processes), so the process
 * metrics each `main.ts` registers are checked too. promtool comes from Debian's `prometheus`
 * package; `.ci/run` installs it, and this test fails (never skips) without it.
 * @module
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { startUp } from "./up_stack.ts";
import { until } from "./util.ts";

/** Runs `promtool check metrics` on `text`; returns its exit code and everything it printed. */
async function promtoolCheck(text: string): Promise<{ code: number; printed: string }> {
  let child;
  try {
    child = new Deno.Command("promtool", {
      args: ["check", "metrics"],
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      throw new Error(
        "Cannot check the metrics as promtool is not installed: run `apt-get install -y " +
          "prometheus` (Debian's package; .ci/run installs it)",
        { cause: err },
      );
    }
    throw err;
  }
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(text));
  await writer.close();
  const out = await child.output();
  const decode = (b: Uint8Array) => new TextDecoder().decode(b);
  return { code: out.code, printed: (decode(out.stdout) + decode(out.stderr)).trim() };
}

async function scrape(url: string): Promise<string> {
  const res = await fetch(url);
  assert.equal(res.status, 200, `GET ${url}`);
  assert.match(res.headers.get("content-type") ?? "", /^text\/plain; version=0\.0\.4/);
  return await res.text();
}

Deno.test("every tier's /metrics passes promtool check metrics after traffic", async () => {
  const stack = await startUp("iop_promtool_");
  let exitCode: number | undefined;
  try {
    const { edgeUrl } = stack;
    const client = new OpenAI({ apiKey: "unused", baseURL: `${edgeUrl}/v1`, maxRetries: 0 });
    const messages = [{ role: "user" as const, content: "hello metrics" }];
    await client.chat.completions.create({ model: "demo", messages });
    const stream = await client.chat.completions.create({ model: "demo", messages, stream: true });
    for await (const _chunk of stream) { /* drain */ }
    const ollama = await fetch(`${edgeUrl}/api/chat`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "demo", messages, stream: false }),
    });
    assert.equal(ollama.status, 200);
    await ollama.body?.cancel();
    await assert.rejects(client.chat.completions.create({ model: "no-such-model", messages }));

    const tiers = {
      cp: `${stack.cpUrl}/metrics`,
      edge: `${edgeUrl}/metrics`,
      node: `${stack.nodeUrl}/metrics`,
    };
    // The Control Plane counts the edge once its link is up; wait for it so the gauge is live.
    await until(
      "the edge counted by the Control Plane",
      async () => /^iop_cp_edges_connected 1$/m.test(await scrape(tiers.cp)),
      15_000,
    );
    for (const [tier, url] of Object.entries(tiers)) {
      const text = await scrape(url);
      const { code, printed } = await promtoolCheck(text);
      assert.ok(
        code === 0 && printed === "",
        `promtool check metrics failed on the ${tier} (exit ${code}):\n${printed}`,
      );
      for (
        const name of [
          "process_cpu_user_seconds_total",
          "process_cpu_system_seconds_total",
          "process_resident_memory_bytes",
          "process_start_time_seconds",
          "process_open_fds",
          "nodejs_heap_size_used_bytes",
          "nodejs_heap_size_total_bytes",
          "nodejs_external_memory_bytes",
          "nodejs_eventloop_lag_seconds",
        ]
      ) {
        assert.match(text, new RegExp(`^${name} \\d`, "m"), `${name} missing on the ${tier}`);
      }
      if (tier === "edge") {
        assert.match(
          text,
          /^iop_edge_http_output_tokens_per_second_count\{model="demo"\} 3$/m,
          "one tokens-per-second observation per finished answer",
        );
        assert.match(
          text,
          /^iop_edge_http_time_to_first_token_seconds_count\{route="\/v1\/chat\/completions",model="demo"\} 2$/m,
        );
        assert.doesNotMatch(text, /no-such-model/, "a client's unknown model name became a label");
      }
    }
  } finally {
    exitCode = await stack.stop();
  }
  assert.equal(exitCode, 0, stack.banner());
});
