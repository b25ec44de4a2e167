/**
 * The fleet dashboard in a real headless Chromium: it asks for a token and shows nothing
 * without one, refuses a wrong one clearly, shows two attached edges side by side with their
 * nodes and agents for a read token (command form disabled), and with an operate token a fleet
 * command issued from its form comes back with a result per edge, audited under the token's name.
 * After traffic, with a read token: the charts hold points per edge and per pool, a node's
 * detail lists its resources and recent runs, the audit filters commands of every source, and
 * the run view shows a running command's progress live and its stored output once it ends; the
 * main views fit a 390 px phone. A screenshot is kept in the test's temp dir, and written to
 * docs/dashboard.png when IOP_UPDATE_SCREENSHOT=1.
 */
import assert from "node:assert/strict";
import { chromium, type Page } from "playwright-core";
import { runInput } from "../shared/run.ts";
import { runToOutcome } from "../services/edge/agents/run_outcome.ts";
import type { EdgeService } from "../services/edge/service.ts";
import { startControlPlane } from "../services/cp/control_plane.ts";
import {
  authHeaders,
  startCpEdge,
  TEST_OPERATE_TOKEN,
  TEST_OPERATOR,
  TEST_READ_TOKEN,
  testCpConfig,
} from "./cp_harness.ts";
import { until } from "./util.ts";
import { quiet } from "./stack.ts";

const CHROMIUM_ARGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

Deno.test("the dashboard wants a token, is read-only with a read token, and shows a fleet command's per-edge results with an operate token", async () => {
  await using cp = await startControlPlane(await testCpConfig(":memory:"), { logger: quiet("cp") });
  await using _a = await startCpEdge({ edgeId: "edge-a", cpAddress: cp.wireAddress });
  await using _b = await startCpEdge({ edgeId: "edge-b", cpAddress: cp.wireAddress });
  await until(
    "both edges reported status",
    () =>
      cp.registry.list().filter((v) => v.status?.nodes[0]?.connected).length === 2
        ? true
        : undefined,
  );

  const profile = await Deno.makeTempDir({ prefix: "iop-chromium-" });
  const browser = await chromium.launchPersistentContext(profile, {
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: CHROMIUM_ARGS,
  });
  try {
    const page = browser.pages()[0] ?? await browser.newPage();
    await page.goto(cp.httpUrl + "/");
    const token = page.locator("#token");
    const useToken = async (value: string) => {
      await token.fill(value);
      await token.dispatchEvent("change");
    };
    await page.locator("#access", { hasText: "Paste a Control Plane access token" }).waitFor();
    assert.equal(await page.locator("#edges .edge").count(), 0, "no fleet data without a token");

    await useToken("not-a-token");
    await page.locator("#access", { hasText: "Token refused" }).waitFor();
    assert.match(await page.locator("#access").innerText(), /token is not valid/);
    assert.equal(await page.locator("#edges .edge").count(), 0);

    await useToken(TEST_READ_TOKEN);
    const cards = page.locator("#edges .edge");
    await cards.nth(1).waitFor({ timeout: 10_000 });
    assert.deepEqual(
      await cards.evaluateAll((els) => els.map((e) => e.getAttribute("data-edge-id"))),
      [
        "edge-a",
        "edge-b",
      ],
    );
    const cardA = page.locator('.edge[data-edge-id="edge-a"]');
    await cardA.locator('.node[data-node-id="edge-a-node"]').first().waitFor();
    assert.match(await cardA.innerText(), /provider edge-a-node-demo → demo/);
    assert.match(await cardA.locator('.agent[data-agent-id="deployer"]').innerText(), /ready/);

    // A read token: read-only, the form disabled with a hint.
    await page.locator("#link").filter({ hasText: "read-only" }).waitFor();
    assert.equal(await page.locator("#submit-command").isDisabled(), true);
    assert.match(await page.locator("#command-hint").innerText(), /role operate/);
    // The token survives a reload of the tab (sessionStorage), not just the socket.
    await page.reload();
    await page.locator("#link").filter({ hasText: "read-only" }).waitFor();

    await useToken(TEST_OPERATE_TOKEN);
    await page.locator("#link").filter({ hasText: "commands enabled" }).waitFor();
    assert.equal(await page.locator("#submit-command").isDisabled(), false);

    await page.locator('#command-form select[name="kind"]').selectOption("agent");
    await page.locator('input[name="a"]').fill("deployer");
    await page.locator('input[name="b"]').fill("build");
    await page.locator('input[name="c"]').fill("v7");
    await page.locator("#submit-command").click();
    const results = page.locator("#commands .command .edge-result");
    for (const edgeId of ["edge-a", "edge-b"]) {
      await results.locator(`xpath=self::*[@data-edge-id="${edgeId}"]`).locator(".status", {
        hasText: "succeeded",
      }).waitFor({ timeout: 15_000 });
    }
    assert.equal(await results.count(), 2);
    assert.match(await results.first().innerText(), /building v7/);
    await page.locator("#events .event", { hasText: "agent deployer busy" }).first().waitFor();
    const audited = page.locator("#audit .audit-row", { hasText: "succeeded" }).first();
    await audited.waitFor({ timeout: 10_000 });
    assert.match(await audited.innerText(), new RegExp(`${TEST_OPERATOR} agent`));
  } finally {
    await browser.close();
    await Deno.remove(profile, { recursive: true });
  }
});

/** Runs `count` pooled mock runs on `service`, `parallel` at a time. */
async function traffic(service: EdgeService, count: number, parallel: number): Promise<void> {
  let left = count;
  await Promise.all(Array.from({ length: parallel }, async () => {
    while (left-- > 0) {
      const outcome = await runToOutcome(service, {
        ...runInput({ adapter: "mock", target: "demo", prompt: "chart traffic" }),
        modelGroup: "demo",
      });
      assert.equal(outcome.status, "succeeded", outcome.summary);
    }
  }));
}

/** Submits a fleet command over HTTP (not from the page) and returns its id. */
async function submit(cpUrl: string, command: unknown): Promise<string> {
  const res = await fetch(`${cpUrl}/commands`, {
    method: "POST",
    headers: authHeaders(),
    body: JSON.stringify({ edges: { edgeIds: ["edge-a"] }, command }),
  });
  assert.equal(res.status, 202, await res.clone().text());
  return (await res.json()).commandId;
}

async function commandState(cpUrl: string, id: string): Promise<Record<string, unknown>> {
  return await (await fetch(`${cpUrl}/commands/${id}`, { headers: authHeaders() })).json();
}

/** Points the chart of `metric` drew (its data-points attribute). */
async function chartPoints(page: Page, metric: string): Promise<number> {
  return Number(
    await page.locator(`.chart[data-metric="${metric}"] svg`).getAttribute("data-points"),
  );
}

Deno.test("after traffic the dashboard charts each pool, opens a node's detail, filters the audit and streams a run, on a laptop and a phone", async () => {
  const config = await testCpConfig(":memory:", { series: { sample_interval_ms: 250 } });
  await using cp = await startControlPlane(config, { logger: quiet("cp") });
  await using edge = await startCpEdge({ edgeId: "edge-a", cpAddress: cp.wireAddress });
  await until("the edge reported status", () => cp.registry.get("edge-a")?.status?.edge);
  const longer = Deno.env.get("IOP_UPDATE_SCREENSHOT") === "1";
  for (let round = 0; round < (longer ? 30 : 4); round++) {
    await traffic(edge.service, 4 + (round % 3) * 3, 3);
    await new Promise((resolve) => setTimeout(resolve, longer ? 400 : 150));
  }
  const build = await submit(cp.httpUrl, {
    agent: { agentId: "deployer", command: "build", input: "v9" },
  });
  await until(
    "the build finished",
    async () => (await commandState(cp.httpUrl, build)).outcome === "succeeded",
  );
  await until(
    "a sample saw runs of both pools",
    () => {
      const samples = cp.series.samples("edge-a") ?? [];
      return samples.some((s) => (s.pools["demo"]?.requestsPerS ?? 0) > 0) &&
        samples.some((s) => (s.pools["cli/build"]?.requestsPerS ?? 0) > 0);
    },
  );

  const dir = await Deno.makeTempDir({ prefix: "iop-dashboard-" });
  const browser = await chromium.launchPersistentContext(`${dir}/profile`, {
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: CHROMIUM_ARGS,
    viewport: { width: 1280, height: 900 },
  });
  try {
    const page = browser.pages()[0] ?? await browser.newPage();
    await page.goto(cp.httpUrl + "/");
    await page.locator("#token").fill(TEST_READ_TOKEN);
    await page.locator("#token").dispatchEvent("change");
    await page.locator("#link").filter({ hasText: "read-only" }).waitFor();

    // Charts: the whole edge, then each pool as its own line.
    await until(
      "the requests chart has points",
      async () => await chartPoints(page, "requests") > 0,
    );
    for (const metric of ["requests", "tokens", "queue", "inflight", "latency", "ttft"]) {
      assert.ok(await chartPoints(page, metric) > 0, `chart ${metric} has points`);
    }
    assert.ok(
      await page.locator('.chart[data-metric="requests"] svg path').count() >= 1,
      "the requests chart draws a line",
    );
    const lastTokens = await page.locator('.chart[data-metric="tokens"]').getAttribute(
      "data-last",
    );
    assert.ok(
      lastTokens !== null && Number.isFinite(Number(lastTokens)),
      `data-last ${lastTokens}`,
    );
    await page.locator("#chart-pool").selectOption("each");
    const poolLines = page.locator('.chart[data-metric="requests"] svg path');
    await until("one requests line per pool", async () => await poolLines.count() >= 2);
    assert.deepEqual(
      (await poolLines.evaluateAll((els) => els.map((e) => e.getAttribute("data-series")))).sort(),
      ["cli/build", "demo"],
    );
    await page.locator("#chart-pool").selectOption("demo");
    await until("the demo pool's latency", async () => await chartPoints(page, "latency") > 0);

    // Node detail: resources with health and in flight/limit, recent runs from the node.
    await page.locator(`.node-link`, { hasText: edge.nodeId }).click();
    const detail = page.locator("#node-detail");
    await detail.waitFor();
    assert.match(await detail.locator("#node-summary").innerText(), /connected/);
    const provider = detail.locator(`.resource[data-resource-id="${edge.nodeId}-demo"]`);
    assert.match(await provider.innerText(), /0\/2/);
    assert.match(await provider.innerText(), /ok/);
    assert.match(
      await detail.locator('.resource[data-resource-id="cli/build"]').innerText(),
      /profile cli\/build/,
    );
    const nodeRuns = detail.locator(".node-run");
    await nodeRuns.first().waitFor({ timeout: 10_000 });
    assert.ok(await nodeRuns.count() >= 5, "recent runs listed");
    await nodeRuns.filter({ hasText: "mock/demo" }).first().locator("button").click();
    await page.locator("#run-view .run-output", { hasText: "chart traffic" }).waitFor();

    // Audit: commands from any source, filtered.
    const audit = page.locator("#audit .audit-row");
    await audit.first().waitFor();
    const filters = page.locator("#audit-filters");
    await filters.locator('select[name="status"]').selectOption("failed");
    await page.locator("#audit", { hasText: "No audited command matches" }).waitFor();
    await filters.locator('select[name="status"]').selectOption("succeeded");
    await filters.locator('input[name="actor"]').fill(TEST_OPERATOR);
    await filters.locator('input[name="edge"]').fill("edge-a");
    await page.locator("#audit-apply").click();
    await audit.first().waitFor();
    assert.equal(await audit.count(), 1);
    assert.match(
      await audit.first().innerText(),
      new RegExp(`${TEST_OPERATOR} agent agent deployer build input="v9" → succeeded`),
    );
    await filters.locator('input[name="actor"]').fill("someone-else");
    await page.locator("#audit-apply").click();
    await page.locator("#audit", { hasText: "No audited command matches" }).waitFor();
    await filters.locator('input[name="actor"]').fill("");
    await filters.locator('select[name="status"]').selectOption("");
    await page.locator("#audit-apply").click();

    // Run view: a running command's progress live, then its stored output once it ends.
    const slow = await submit(cp.httpUrl, {
      agent: { agentId: "deployer", command: "slow", input: "x" },
    });
    const slowRow = page.locator(`.audit-row[data-command-id="${slow}"]`);
    await slowRow.waitFor({ timeout: 10_000 });
    await slowRow.click();
    const runView = page.locator("#run-view");
    await runView.locator(".run-progress", { hasText: "started" }).waitFor({ timeout: 10_000 });
    assert.equal(await runView.getAttribute("data-outcome"), "running");
    assert.equal(await runView.locator(".run-output").isVisible(), false);
    const runId = await until("the slow run's id", async () => {
      const edges = (await commandState(cp.httpUrl, slow)).edges as Record<
        string,
        { runId: string }
      >;
      return edges["edge-a"]?.runId || undefined;
    });
    await submit(cp.httpUrl, { cancel: { runId, reason: "dashboard test" } });
    await until(
      "the run view saw the command end",
      async () => await runView.getAttribute("data-outcome") !== "running",
    );
    await runView.locator(`.run-output[data-run-id="${runId}"]`, { hasText: "started" }).waitFor({
      timeout: 10_000,
    });
    await page.locator("#run-view .share .badge", { hasText: "cancelled" }).waitFor();

    await page.locator("#node-close").click();
    await page.locator(`.node-link`, { hasText: edge.nodeId }).click();
    await page.locator("#chart-pool").selectOption("total");
    await page.locator("#charts-section").scrollIntoViewIfNeeded();
    const laptop = `${dir}/dashboard.png`;
    await page.screenshot({ path: laptop, fullPage: true });

    // A phone: no horizontal scrolling, charts and panels still there.
    await page.setViewportSize({ width: 390, height: 844 });
    await page.waitForTimeout(100);
    const widths = await page.evaluate(`({
      scroll: document.documentElement.scrollWidth,
      inner: window.innerWidth,
      chart: document.querySelector(".chart svg")?.getBoundingClientRect().width ?? 0,
    })`) as { scroll: number; inner: number; chart: number };
    assert.ok(
      widths.scroll <= widths.inner,
      `no horizontal scroll at 390 px: ${JSON.stringify(widths)}`,
    );
    assert.ok(widths.chart > 200 && widths.chart <= 390, `a chart fits the phone: ${widths.chart}`);
    await page.screenshot({ path: `${dir}/dashboard-phone.png`, fullPage: true });

    assert.ok((await Deno.stat(laptop)).size > 10_000, "the screenshot was written");
    if (Deno.env.get("IOP_UPDATE_SCREENSHOT") === "1") {
      await Deno.copyFile(laptop, new URL("../docs/dashboard.png", import.meta.url));
    }
    console.log(`dashboard screenshots: ${dir}`);
  } finally {
    await browser.close();
  }
});
