/**
 * Plain-text tables for the ops console.
 * @module
 */
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

/** The `/nodes` table. */
export function formatNodes(status: StatusSnapshot): string {
  if (status.nodes.length === 0) return "no nodes configured\n";
  return table(
    ["NODE", "ALIAS", "STATE", "VERSION", "HOST", "IN-FLIGHT", "SEEN"],
    status.nodes.map((n) => [
      n.id,
      n.alias || "-",
      n.connected ? (n.draining ? "draining" : "connected") : "offline",
      n.version || "-",
      n.hostname || "-",
      String(n.inFlight),
      n.connected ? ago(n.lastSeenMs) : "-",
    ]),
  );
}

/** A resource's state: refused by its node (see the notes under the table), disabled, or ok. */
function resourceState(r: ResourceStatus): string {
  if (r.refused !== "") return "refused";
  return r.enabled ? "ok" : "disabled";
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
      r.kind === "provider" ? `${r.inFlight}/${r.maxConcurrency}` : "-",
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
  return head + table(
    ["NODE", "LINK", "KIND", "RESOURCE", "ADAPTER", "TARGET", "MODEL", "BUSY", "QUEUED", "STATE"],
    rows,
  ) + refusals.join("");
}

/** The `/history` table. */
export function formatHistory(node: string, runs: RunRecordView[]): string {
  if (runs.length === 0) return `no runs recorded on ${node}\n`;
  return table(
    ["RUN", "ADAPTER", "TARGET", "STATUS", "STARTED", "MS", "TOKENS", "ERROR / OUTPUT"],
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
    ]),
  );
}
