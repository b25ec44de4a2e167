// The dashboard's detail views: a node (its resources with health and in-flight/limit, and its
// recent runs, asked of its edge through GET /edges/{edge}/nodes/{node}/runs), a run (a
// command's live progress per edge while it runs, then each run's stored output through
// GET /edges/{edge}/nodes/{node}/runs/{run}/output), and the audit with its filters.
import { $, api, ApiError, clock, duration, el } from "./dashboard_common.js";

const view = {
  edgeOf: () => undefined,
  node: null,
  run: null,
  runTimer: null,
  outputs: new Map(),
};

/** Wires the views to the fleet state: `edgeOf(id)` is an edge's view with its last status. */
export function initViews(options) {
  view.edgeOf = options.edgeOf;
  $("#node-close").addEventListener("click", () => closePanel("node"));
  $("#run-close").addEventListener("click", () => closePanel("run"));
  $("#node-refresh").addEventListener("click", () => loadNodeRuns());
  $("#audit-filters").addEventListener("submit", (e) => {
    e.preventDefault();
    loadAudit().catch(() => {});
  });
  $("#audit-filters").addEventListener("change", () => loadAudit().catch(() => {}));
}

function closePanel(which) {
  if (which === "node") {
    view.node = null;
    $("#node-detail").hidden = true;
  } else {
    view.run = null;
    clearTimeout(view.runTimer);
    $("#run-view").hidden = true;
  }
}

// ---- node detail ----------------------------------------------------------------------------

/** Opens the detail of one node of an edge. */
export function openNode(edgeId, nodeId) {
  view.node = { edgeId, nodeId };
  const panel = $("#node-detail");
  panel.hidden = false;
  panel.dataset.edgeId = edgeId;
  panel.dataset.nodeId = nodeId;
  renderNode();
  $("#node-runs").replaceChildren(el("p", { class: "muted" }, "Asking the edge for recent runs…"));
  loadNodeRuns();
  panel.scrollIntoView({ block: "start" });
}

/** Redraws the open node's status part (after a status report). */
export function renderNode() {
  if (!view.node) return;
  const { edgeId, nodeId } = view.node;
  const edge = view.edgeOf(edgeId);
  const node = ((edge && edge.status && edge.status.nodes) || []).find((n) => n.id === nodeId);
  $("#node-title").textContent = `node ${nodeId} · edge ${edgeId}`;
  const summary = $("#node-summary");
  if (!node) {
    summary.textContent = "This edge does not report the node any more.";
    $("#node-resources").replaceChildren();
    return;
  }
  const state = !node.connected ? "disconnected" : node.draining ? "draining" : "connected";
  summary.replaceChildren(
    el("span", { class: `badge ${node.connected ? "up" : "down"}` }, state),
    ` version ${node.version || "–"} · runs in flight ${node.inFlight || 0}` +
      ` · connected since ${clock(node.connectedAtMs)} · last seen ${clock(node.lastSeenMs)}`,
  );
  const rows = (node.resources || []).map((r) =>
    el(
      "tr",
      { class: "resource", "data-resource-id": r.id },
      el(
        "td",
        {},
        `${r.kind} ${r.id}`,
        el("div", { class: "muted" }, `${r.adapterKind || ""} ${r.target ? `→ ${r.target}` : ""}`),
      ),
      el("td", {}, `${r.inFlight || 0}/${r.maxConcurrency ? r.maxConcurrency : "∞"}`),
      el("td", {}, r.queued || 0),
      el(
        "td",
        { class: r.unhealthy ? "unhealthy" : "healthy" },
        !r.enabled
          ? "disabled"
          : r.unhealthy
          ? `unhealthy: ${r.healthDetail || "no detail"}`
          : "ok",
      ),
    )
  );
  $("#node-resources").replaceChildren(
    el(
      "table",
      {},
      el(
        "tr",
        {},
        el("th", {}, "adapter / resource"),
        el("th", {}, "in flight/limit"),
        el("th", {}, "queued"),
        el("th", {}, "health"),
      ),
      ...rows,
    ),
  );
}

/** Asks the node's edge for its recent runs. */
export async function loadNodeRuns() {
  if (!view.node) return;
  const { edgeId, nodeId } = view.node;
  const box = $("#node-runs");
  try {
    const body = await api(
      `/edges/${encodeURIComponent(edgeId)}/nodes/${encodeURIComponent(nodeId)}/runs?limit=20`,
    );
    if (!view.node || view.node.nodeId !== nodeId) return;
    const runs = body.runs || [];
    if (runs.length === 0) {
      box.replaceChildren(el("p", { class: "muted" }, "No runs in this node's history yet."));
      return;
    }
    box.replaceChildren(
      el(
        "table",
        {},
        el(
          "tr",
          {},
          el("th", {}, "run"),
          el("th", {}, "status"),
          el("th", {}, "took"),
          el("th", {}, "first output"),
          el("th", {}, "tokens out"),
        ),
        ...runs.map((r) =>
          el(
            "tr",
            { class: "node-run", "data-run-id": r.runId },
            el(
              "td",
              {},
              el("button", {
                class: "link",
                type: "button",
                onclick: () => openRunOutput(edgeId, nodeId, r.runId),
              }, r.runId.slice(0, 16)),
              el("div", { class: "muted" }, `${r.adapter}/${r.target} · ${clock(r.startedAtMs)}`),
            ),
            el("td", {}, el("span", { class: `badge ${badgeOf(r.status)}` }, r.status)),
            el("td", {}, runTook(r)),
            el(
              "td",
              {},
              Number(r.firstOutputAtMs) > 0 ? duration(r.firstOutputAtMs - r.startedAtMs) : "–",
            ),
            el("td", {}, r.tokensOut || 0),
          )
        ),
      ),
    );
  } catch (err) {
    box.replaceChildren(
      el("p", { class: "denied" }, `Cannot read the node's runs: ${err.message}`),
    );
  }
}

function runTook(r) {
  return Number(r.finishedAtMs) > 0 ? duration(r.finishedAtMs - r.startedAtMs) : "running";
}

/** Badge class of a run or share status. */
export function badgeOf(status) {
  if (status === "succeeded" || status === "completed") return "up";
  if (status === "running" || status === "started") return "busy";
  if (status === "unknown" || status === "partial") return "unknown";
  return "down";
}

// ---- run view -------------------------------------------------------------------------------

/** Opens the run view of one run of a node's history: its stored output. */
export function openRunOutput(edgeId, nodeId, runId) {
  clearTimeout(view.runTimer);
  view.run = { runId };
  showRunPanel(`run ${runId}`, `edge ${edgeId} · node ${nodeId}`);
  const box = $("#run-shares");
  box.replaceChildren(shareBox(edgeId, { status: "", progress: [] }, { edgeId, nodeId, runId }));
  fetchOutput(edgeId, nodeId, runId, true);
}

/**
 * Opens the run view of a fleet command: per edge, its status and live progress while it runs,
 * then the stored output of the run it started. `record` (an audit row) stands in when the
 * Control Plane no longer keeps the command in memory.
 */
export function openCommandRun(commandId, record) {
  clearTimeout(view.runTimer);
  view.run = { commandId, record };
  showRunPanel(`command ${commandId}`, record ? `${record.actor} · ${record.detail}` : "");
  $("#run-shares").replaceChildren(el("p", { class: "muted" }, "Loading…"));
  loadCommandRun();
}

/** Reloads the open command's run view now (a live update for it arrived). */
export function commandUpdated(commandId) {
  if (!view.run || view.run.commandId !== commandId) return;
  clearTimeout(view.runTimer);
  view.runTimer = setTimeout(loadCommandRun, 50);
}

function showRunPanel(title, subtitle) {
  const panel = $("#run-view");
  panel.hidden = false;
  $("#run-title").textContent = title;
  $("#run-subtitle").textContent = subtitle;
  panel.scrollIntoView({ block: "start" });
}

async function loadCommandRun() {
  const current = view.run;
  if (!current || !current.commandId) return;
  let command;
  try {
    command = await api(`/commands/${encodeURIComponent(current.commandId)}`);
  } catch (err) {
    if (view.run !== current) return;
    if (err instanceof ApiError && err.status === 404 && current.record) {
      renderAuditOnly(current.record);
      return;
    }
    $("#run-shares").replaceChildren(el("p", { class: "denied" }, err.message));
    return;
  }
  if (view.run !== current) return;
  $("#run-view").dataset.outcome = command.outcome;
  $("#run-subtitle").textContent = `${command.actor} via ${command.via} · ${command.detail} · ` +
    `${command.outcome}`;
  const boxes = Object.entries(command.edges).map(([edgeId, share]) => {
    const run = share.runId && share.nodeId
      ? { edgeId, nodeId: share.nodeId, runId: share.runId }
      : null;
    const box = shareBox(edgeId, share, run);
    if (run && share.status !== "running") fetchOutput(edgeId, run.nodeId, run.runId, false, box);
    return box;
  });
  $("#run-shares").replaceChildren(...boxes);
  if (command.outcome === "running") view.runTimer = setTimeout(loadCommandRun, 1000);
}

function shareBox(edgeId, share, run) {
  const progress = (share.progress || []).map((p) => p.message).join("\n");
  const key = run ? `${edgeId}/${run.nodeId}/${run.runId}` : "";
  const stored = key ? view.outputs.get(key) : undefined;
  const summary = share.result && share.result.summary ? share.result.summary : "";
  return el(
    "div",
    { class: "share", "data-edge-id": edgeId, "data-status": share.status || "" },
    el(
      "div",
      {},
      el("strong", {}, edgeId),
      share.status ? " " : "",
      share.status ? el("span", { class: `badge ${badgeOf(share.status)}` }, share.status) : "",
      share.late ? el("span", { class: "late" }, " completed late") : "",
      run ? el("span", { class: "muted" }, ` · run ${run.runId} on ${run.nodeId}`) : "",
    ),
    progress && !stored ? el("pre", { class: "run-progress" }, progress) : "",
    !run && summary ? el("pre", { class: "run-progress" }, summary) : "",
    el(
      "pre",
      { class: "run-output", "data-run-id": run ? run.runId : "", hidden: !stored },
      stored ? stored.text : "",
    ),
    stored && stored.truncated ? el("div", { class: "muted" }, "(output truncated)") : "",
  );
}

async function fetchOutput(edgeId, nodeId, runId, render, box) {
  const key = `${edgeId}/${nodeId}/${runId}`;
  const fill = (entry) => {
    const target = box || $("#run-shares .share");
    const pre = target && target.querySelector(".run-output");
    if (!pre) return;
    pre.textContent = entry.text;
    pre.hidden = false;
    const progress = target.querySelector(".run-progress");
    if (progress) progress.remove();
  };
  const cached = view.outputs.get(key);
  if (cached) return fill(cached);
  try {
    const res = await api(
      `/edges/${encodeURIComponent(edgeId)}/nodes/${encodeURIComponent(nodeId)}/runs/` +
        `${encodeURIComponent(runId)}/output`,
      { text: true },
    );
    const entry = {
      text: res.text || "(no output)",
      truncated: res.headers.get("x-iop-output-truncated") === "true",
    };
    view.outputs.set(key, entry);
    if (view.outputs.size > 50) view.outputs.delete(view.outputs.keys().next().value);
    fill(entry);
  } catch (err) {
    if (render || box) fill({ text: `Cannot read the run's output: ${err.message}` });
  }
}

function renderAuditOnly(record) {
  $("#run-view").dataset.outcome = record.outcome;
  $("#run-subtitle").textContent = `${record.actor} via ${record.via} · ${record.detail} · ` +
    `${record.outcome} (from the audit: the command left memory)`;
  $("#run-shares").replaceChildren(
    ...Object.entries(record.results).map(([edgeId, r]) =>
      shareBox(edgeId, { status: r.status, progress: [], result: { summary: r.summary } }, null)
    ),
  );
}

// ---- audit ----------------------------------------------------------------------------------

/** Loads the audit rows matching the filters: commands of every source, newest first. */
export async function loadAudit() {
  const form = $("#audit-filters");
  const params = new URLSearchParams();
  for (const name of ["actor", "edge", "status", "kind"]) {
    const value = form.elements[name].value.trim();
    if (value) params.set(name, value);
  }
  params.set("limit", form.elements.limit.value || "20");
  const body = await api(`/audit?${params}`);
  const box = $("#audit");
  box.replaceChildren();
  const records = body.records || [];
  if (records.length === 0) box.append(el("p", { class: "muted" }, "No audited command matches."));
  for (const r of records) {
    box.append(
      el(
        "div",
        {
          class: "audit-row",
          "data-command-id": r.commandId,
          "data-outcome": r.outcome,
          role: "button",
          tabindex: "0",
          onclick: () => openCommandRun(r.commandId, r),
        },
        el("span", { class: "muted" }, clock(r.createdAtMs)),
        " ",
        el("span", { class: "actor" }, r.actor),
        " ",
        el("span", { class: "kind" }, r.kind),
        " ",
        el("span", { class: "detail" }, r.detail),
        " → ",
        el("span", { class: `badge ${badgeOf(r.outcome)}` }, r.outcome),
        " ",
        el("span", { class: "muted" }, `${r.via} · ${r.edges.join(", ")}`),
      ),
    );
  }
}
