/**
 * The fleet dashboard in a real headless Chromium: it asks for a token and shows nothing
 * without one, refuses a wrong one clearly, shows two attached edges side by side with their
 * nodes and agents for a read token (command form disabled), and with an operate token a fleet
 * command issued from its form comes back with a result per edge, audited under the token's name.
 */
import assert from "node:assert/strict";
import { chromium } from "playwright-core";
import { startControlPlane } from "../services/cp/control_plane.ts";
import {
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

    await page.locator('select[name="kind"]').selectOption("agent");
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
