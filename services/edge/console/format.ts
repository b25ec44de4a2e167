/**
 * Plain-text tables for the ops console.
 * @module
 */
import type { AgentView } from "../agents/domain_agents.ts";
import type { ResourceStatus, RunRecordView, StatusSnapshot } from "../ports.ts";

function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i]!)).join("  ").trimEnd();
  return [line(header), ...rows.map(line)].join("\n") + "\n";
}

function ago(ms: number, now = Date.now()): string {
  if (!ms) return "-";
  const s = Math.round((now - ms) / 1000);
  return s < 120 ? `${s}s ago` : `${Math.round(s / 60)}m ago`;
}

/**
 * The config version a node runs, e.g. `v3`; `v2 (wants v3)` while the Edge's newer one is not
 * yet acknowledged, `?` for a node that does not report versions, `-` offline.
 */
function configVersionOf(n: StatusSnapshot["nodes"][number]): string {
  if (!n.connected) return "-";
  const runs = n.configVersion === 0 ? "?" : `v${n.configVersion}`;
  return n.configVersion === n.wantedConfigVersion
    ? runs
    : `${runs} (wants v${n.wantedConfigVersion})`;
}

/** The `/nodes` table. */
export function formatNodes(status: StatusSnapshot): string {
  if (status.nodes.length === 0) return "no nodes configured\n";
  return table(
    ["NODE", "ALIAS", "STATE", "VERSION", "CONFIG", "HOST", "IN-FLIGHT", "SEEN"],
    status.nodes.map((n) => [
      n.id,
      n.alias || "-",
      n.connected ? (n.stopping ? "stopping" : n.draining ? "draining" : "connected") : "offline",
      n.version || "-",
      configVersionOf(n),
      n.hostname || "-",
      String(n.inFlight),
      n.connected ? ago(n.lastSeenMs) : "-",
    ]),
  );
}

/**
 * A resource's state: refused by its node, unhealthy (see the notes under the table for both),
 * disabled, or ok.
 */
function resourceState(r: ResourceStatus): string {
  if (r.refused !== "") return "refused";
  if (!r.enabled) return "disabled";
  return r.healthy === false ? "unhealthy" : "ok";
}

/** The `/status` view: the snapshot, resource-first, then why each refused resource is. */
export function formatStatus(status: StatusSnapshot): string {
  const head =
    `edge ${status.edgeId} v${status.version}, up since ${
      new Date(status.startedAtMs).toISOString()
    }, ` +
    `${status.runsInFlight} runs in flight\n`;
  const rows = status.nodes.flatMap((n) =>
    n.resources.map((r) => [
      n.id,
      n.connected ? "up" : "down",
      r.kind,
      r.id,
      `${r.adapter}(${r.adapterKind})`,
      r.target || "-",
      r.modelGroup || "-",
      // Providers and CLI profiles have a limit; other adapters only a count.
      r.kind === "adapter" ? String(r.inFlight) : `${r.inFlight}/${r.maxConcurrency}`,
      r.kind === "provider" ? String(r.queued) : "-",
      resourceState(r),
    ])
  );
  const refusals = status.nodes.flatMap((n) =>
    n.resources.filter((r) => r.refused !== "").map((r) =>
      `refused on ${n.id}: ${r.kind} ${r.id}` +
      (r.kind === "provider" ? ` (adapter ${r.adapter})` : "") +
      `: ${r.refused.replace(/\s+/g, " ")}\n`
    )
  );
  const sick = status.nodes.flatMap((n) =>
    n.resources.filter((r) => r.refused === "" && r.enabled && r.healthy === false).map((r) =>
      `unhealthy on ${n.id}: ${r.kind} ${r.id}` +
      (r.kind === "provider" ? ` (adapter ${r.adapter})` : "") +
      `: ${(r.healthDetail ?? "").replace(/\s+/g, " ")}\n`
    )
  );
  return head + table(
    ["NODE", "LINK", "KIND", "RESOURCE", "ADAPTER", "TARGET", "MODEL", "BUSY", "QUEUED", "STATE"],
    rows,
  ) + refusals.join("") + sick.join("");
}

/** The `/history` table. */
export function formatHistory(node: string, runs: RunRecordView[]): string {
  if (runs.length === 0) return `no runs recorded on ${node}\n`;
  return table(
    ["RUN", "ADAPTER", "TARGET", "STATUS", "STARTED", "MS", "TOKENS", "ERROR / OUTPUT", "TRACE"],
    runs.map((r) => [
      r.runId,
      r.adapter,
      r.target,
      r.status,
      new Date(r.startedAtMs).toISOString().slice(11, 19),
      r.finishedAtMs ? String(r.finishedAtMs - r.startedAtMs) : "-",
      `${r.usage.inputTokens}/${r.usage.outputTokens}`,
      (r.errorCode ? `${r.errorCode}: ${r.errorMessage}` : r.outputSummary).replace(/\s+/g, " ")
        .slice(0, 50),
      r.traceId ?? "-",
    ]),
  );
}

/** The `/agents` table: each domain agent, its state and commands, and its last command. */
export function formatAgents(agents: AgentView[]): string {
  if (agents.length === 0) return "no domain agents configured\n";
  return table(
    ["AGENT", "STATE", "COMMANDS", "LAST", "DETAIL"],
    agents.map((a) => [
      a.id,
      a.state,
      a.commands.join(",") || "-",
      a.lastCommand ? `${a.lastCommand} ${a.lastStatus} ${ago(a.lastFinishedAtMs)}` : "-",
      a.detail || "-",
    ]),
  );
}
