// The fleet dashboard: speaks ClientEnvelope messages in proto3 JSON over the /client WebSocket
// (hello → subscribe → status), renders charts of the Control Plane's series (GET /series, every
// sample interval), edges side by side (click a node for its detail), live events, fleet
// commands with their per-edge results (unknown when the Control Plane cannot know, "completed
// late" when the edge's answer came after that), a run view and the filtered audit. ES modules,
// no build step; all text goes in via textContent.
//
// Access: the operator pastes a Control Plane access token (read or operate); it is kept in
// sessionStorage (gone with the tab), sent as the socket's first message (the hello's credential:
// browsers cannot set headers on a WebSocket) and as `Authorization: Bearer` on every fetch. A
// read token shows the fleet with the command form disabled; a refused token says so and the
// page waits for another one instead of reconnecting.
import { $, api, el, showAccess, tokenInput } from "./dashboard_common.js";
import { buildCharts, drawCharts } from "./dashboard_charts.js";
import {
  badgeOf,
  commandUpdated,
  initViews,
  loadAudit,
  loadNodeRuns,
  openCommandRun,
  openNode,
  renderNode,
} from "./dashboard_views.js";

const state = {
  edges: new Map(),
  commands: new Map(),
  nextId: 1,
  pending: new Map(),
  ws: null,
  series: { edges: {}, sampleIntervalMs: 5000 },
  seriesTimer: null,
};
const TOKEN_KEY = "iop-cp-token";
// Tokens were once kept in localStorage; drop any left there.
localStorage.removeItem("iop-admin-token");
tokenInput.value = sessionStorage.getItem(TOKEN_KEY) || "";

/** Close code of a socket the Control Plane refused for its token (see client_socket.ts). */
const CLOSE_UNAUTHENTICATED = 4401;

/** Enables the command form for an operate token; otherwise disables it with a hint. */
function setCanCommand(can) {
  for (const input of $("#command-form").querySelectorAll("input, select, button")) {
    input.disabled = !can;
  }
  $("#command-hint").textContent = can
    ? ""
    : "Read-only: this token has role read. Commands need a token with role operate.";
}

function request(msg) {
  const id = String(state.nextId++);
  return new Promise((resolve, reject) => {
    state.pending.set(id, { resolve, reject });
    state.ws.send(JSON.stringify({ correlationId: id, ...msg }));
  });
}

function connect() {
  setCanCommand(false);
  if (tokenInput.value.trim() === "") {
    $("#link").textContent = "not connected";
    showAccess("Paste a Control Plane access token (read or operate) to see the fleet.", "denied");
    return;
  }
  const ws = new WebSocket(
    `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/client`,
  );
  state.ws = ws;
  ws.onopen = async () => {
    let ack;
    try {
      // The token goes in the first message: a browser cannot put it in a WebSocket header.
      ack = await request({
        hello: { clientName: "dashboard", credential: tokenInput.value.trim() },
      });
    } catch {
      return; // refused: the close handler says why
    }
    const canCommand = Boolean(ack.helloAck.canCommand);
    $("#link").textContent = `control plane ${ack.helloAck.controlPlaneId}` +
      (canCommand ? " · commands enabled" : " · read-only");
    showAccess(canCommand ? "Token accepted: operate." : "Token accepted: read-only.");
    setCanCommand(canCommand);
    ws.send(JSON.stringify({ subscribe: {} }));
    await refreshStatus();
    await loadAudit().catch(() => {});
    await loadSeries().catch(() => {});
  };
  ws.onmessage = (e) => receive(JSON.parse(e.data));
  ws.onclose = (e) => {
    for (const p of state.pending.values()) p.reject(new Error("socket closed"));
    state.pending.clear();
    if (state.ws !== ws) return; // replaced by a socket with another token
    setCanCommand(false);
    if (e.code === CLOSE_UNAUTHENTICATED) {
      // Retrying with the same token cannot help: wait for another one.
      state.ws = null;
      state.edges.clear();
      renderEdges();
      $("#link").textContent = "not connected";
      showAccess(
        `Token refused: ${e.reason || "not valid"}. Paste a valid access token.`,
        "denied",
      );
      return;
    }
    // A reason (e.g. a socket closed for reading too slowly) says why it dropped.
    $("#link").textContent = e.reason
      ? `disconnected (${e.reason}), retrying…`
      : "disconnected, retrying…";
    setTimeout(connect, 1000);
  };
}

async function refreshStatus() {
  const res = await request({ statusRequest: { refresh: false } });
  state.edges = new Map((res.status.edges || []).map((e) => [e.edgeId, e]));
  renderEdges();
}

function receive(env) {
  const id = env.correlationId && env.correlationId !== "0" ? env.correlationId : null;
  if (id && state.pending.has(id)) {
    const p = state.pending.get(id);
    state.pending.delete(id);
    if (env.error) p.reject(new Error(env.error.message));
    else p.resolve(env);
    return;
  }
  if (env.event) onFleetEvent(env.event);
  else if (env.commandUpdate) onCommandUpdate(env.commandUpdate);
}

let statusTimer = null;
let historyTimer = null;
function onFleetEvent(ev) {
  const edge = state.edges.get(ev.edgeId);
  if (ev.status && edge) {
    edge.status = ev.status;
    renderEdges();
    renderNode();
  } else if (ev.link) {
    // A new or returning edge: fetch the whole view once things settle.
    clearTimeout(statusTimer);
    statusTimer = setTimeout(refreshStatus, 100);
  }
  if (ev.relayed) addEvent(ev.edgeId, ev.relayed);
  if (ev.relayed && ev.relayed.run && ev.relayed.run.status !== "started") {
    // A run of the open node ended: its history has a new row.
    const panel = $("#node-detail");
    if (!panel.hidden && panel.dataset.nodeId === ev.relayed.run.nodeId) {
      clearTimeout(historyTimer);
      historyTimer = setTimeout(loadNodeRuns, 300);
    }
  } else if (ev.link) addEvent(ev.edgeId, { atMs: String(Date.now()), link: ev.link });
}

function addEvent(edgeId, r) {
  const time = new Date(Number(r.atMs || Date.now())).toLocaleTimeString();
  let text;
  if (r.node) text = `node ${r.node.nodeId} ${r.node.kind} ${r.node.detail}`;
  else if (r.run) {
    text = `run ${r.run.runId} ${r.run.status} ${r.run.adapter}/${r.run.target} on ${r.run.nodeId}`;
  } else if (r.agent) text = `agent ${r.agent.agentId} ${r.agent.state} ${r.agent.detail}`;
  else if (r.reload) text = `reload ${r.reload.ok ? "ok" : "failed"}: ${r.reload.detail}`;
  else if (r.link) text = `edge ${r.link}`;
  else return;
  const box = $("#events");
  box.prepend(el("div", { class: "event" }, `${time} [${edgeId}] ${text}`));
  while (box.childNodes.length > 200) box.lastChild.remove();
}

function renderEdges() {
  const box = $("#edges");
  box.replaceChildren();
  if (state.edges.size === 0) box.append(el("p", { class: "muted" }, "No edges attached yet."));
  for (const e of state.edges.values()) {
    const s = e.status || {};
    const card = el(
      "div",
      { class: "edge", "data-edge-id": e.edgeId },
      el(
        "h2",
        {},
        e.edgeId,
        el(
          "span",
          { class: `badge ${e.connected ? "up" : "down"}` },
          e.connected ? "connected" : "disconnected",
        ),
      ),
      el(
        "div",
        { class: "muted" },
        `v${e.version} · ${Object.entries(e.labels || {}).map(([k, v]) => `${k}=${v}`).join(" ")}` +
          ` · runs in flight ${s.edge ? s.edge.runsInFlight : 0}`,
      ),
    );
    const nodes = el(
      "table",
      { class: "nodes" },
      el(
        "tr",
        {},
        el("th", {}, "node"),
        el("th", {}, "state"),
        el("th", {}, "resource"),
        el("th", {}, "in-flight"),
        el("th", {}, "queued"),
        el("th", {}, "health"),
      ),
    );
    for (const n of s.nodes || []) {
      const nodeState = !n.connected ? "down" : n.draining ? "draining" : "up";
      const resources = n.resources && n.resources.length ? n.resources : [null];
      resources.forEach((r, i) =>
        nodes.append(
          el(
            "tr",
            { class: "node", "data-node-id": n.id },
            el(
              "td",
              {},
              i === 0
                ? el("button", {
                  class: "link node-link",
                  type: "button",
                  title: "node detail",
                  onclick: () => openNode(e.edgeId, n.id),
                }, n.id)
                : "",
            ),
            el("td", {}, i === 0 ? nodeState : ""),
            el("td", {}, r ? `${r.kind} ${r.id}${r.target ? ` → ${r.target}` : ""}` : "-"),
            el("td", {}, r ? r.inFlight : n.inFlight),
            el("td", {}, r ? r.queued : 0),
            // `unhealthy` is left out of the JSON while false (proto3 default).
            el(
              "td",
              { class: r && r.unhealthy ? "unhealthy" : "" },
              !r ? "-" : r.unhealthy ? `unhealthy: ${r.healthDetail || "no detail"}` : "ok",
            ),
          ),
        )
      );
    }
    card.append(nodes);
    if ((s.agents || []).length) {
      const agents = el(
        "table",
        { class: "agents" },
        el(
          "tr",
          {},
          el("th", {}, "agent"),
          el("th", {}, "state"),
          el("th", {}, "commands"),
          el("th", {}, "detail"),
        ),
      );
      for (const a of s.agents) {
        agents.append(
          el(
            "tr",
            { class: "agent", "data-agent-id": a.id },
            el("td", {}, a.name || a.id),
            el("td", {}, el("span", { class: `badge ${a.state}` }, a.state)),
            el("td", {}, (a.commands || []).join(", ")),
            el("td", {}, a.detail || a.lastStatus || ""),
          ),
        );
      }
      card.append(agents);
    }
    box.append(card);
  }
}

function selector(text) {
  const t = text.trim();
  if (t === "" || t === "all") return { all: true };
  if (t.includes("=")) {
    const labels = {};
    for (const part of t.split(",")) {
      const [k, v] = part.split("=");
      labels[k.trim()] = (v || "").trim();
    }
    return { labels };
  }
  return { edgeIds: t.split(",").map((s) => s.trim()).filter(Boolean) };
}

function commandOf(f) {
  const a = f.a.value.trim(), b = f.b.value.trim(), c = f.c.value;
  switch (f.kind.value) {
    case "run":
      return { run: { adapter: a, target: b, prompt: c, node: f.node.value.trim() } };
    case "cancel":
      return { cancel: { runId: b } };
    case "drain":
      return { drain: { node: b, draining: true } };
    case "undrain":
      return { drain: { node: b, draining: false } };
    case "reload":
      return { reload: {} };
    case "agent":
      return { agent: { agentId: a, command: b, input: c } };
  }
}

$("#command-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const f = e.target;
  $("#command-error").textContent = "";
  try {
    const res = await request({
      submitCommand: { edges: selector(f.edges.value), command: commandOf(f) },
    });
    const acc = res.commandAccepted;
    const cmd = {
      id: acc.commandId,
      label: `${f.kind.value} ${f.a.value} ${f.b.value}`,
      edges: new Map(),
    };
    for (const id of acc.edgeIds) {
      cmd.edges.set(id, { status: "running", progress: [], summary: "" });
    }
    state.commands.set(cmd.id, cmd);
    renderCommand(cmd);
  } catch (err) {
    $("#command-error").textContent = err.message;
  }
});

tokenInput.addEventListener("change", () => {
  const token = tokenInput.value.trim();
  // A second change event for the same value (e.g. on blur) keeps the session.
  if (token === sessionStorage.getItem(TOKEN_KEY) && state.ws) return;
  sessionStorage.setItem(TOKEN_KEY, token);
  const old = state.ws;
  state.ws = null;
  if (old) old.close();
  connect();
});

function onCommandUpdate(u) {
  commandUpdated(u.commandId);
  // A result changes its row; a command first seen here (any source) needs one.
  const known = document.querySelector(`.audit-row[data-command-id="${CSS.escape(u.commandId)}"]`);
  if (u.result || !known) scheduleAudit();
  const cmd = state.commands.get(u.commandId);
  if (!cmd) return;
  const share = cmd.edges.get(u.edgeId) || { status: "running", progress: [], summary: "" };
  cmd.edges.set(u.edgeId, share);
  if (u.progress) share.progress.push(u.progress.message);
  // The run the command started: the run view shows its output (through the Control Plane).
  const started = u.result && u.result.runId ? u.result : u.progress;
  if (started && started.runId && started.nodeId) {
    share.runId = started.runId;
    share.nodeId = started.nodeId;
  }
  if (u.result) {
    // The Control Plane's view of the share: unknown when it cannot know, replaced (late) when
    // the edge's real answer arrives after the deadline or a lost link.
    share.status = u.shareStatus || u.result.status;
    share.late = Boolean(u.late);
    share.summary = u.result.summary || "";
  }
  renderCommand(cmd);
}

function renderCommand(cmd) {
  let box = document.querySelector(`.command[data-command-id="${cmd.id}"]`);
  if (!box) {
    box = el("div", { class: "command", "data-command-id": cmd.id });
    $("#commands").prepend(box);
  }
  box.replaceChildren(
    el(
      "div",
      {},
      el("button", {
        class: "link",
        type: "button",
        onclick: () => openCommandRun(cmd.id),
      }, cmd.id),
      ` ${cmd.label}`,
    ),
  );
  for (const [edgeId, share] of cmd.edges) {
    box.append(
      el(
        "div",
        { class: "edge-result", "data-edge-id": edgeId },
        `${edgeId}: `,
        el("span", { class: `status badge ${badgeOf(share.status)}` }, share.status),
        share.late ? el("span", { class: "late" }, " completed late") : "",
        share.status === "unknown" ? el("span", { class: "late" }, " (not retryable)") : "",
        " ",
        el("span", { class: "summary" }, share.summary.split("\n").slice(-3).join(" ⏎ ")),
        share.runId
          ? el("button", {
            class: "link view-run",
            type: "button",
            onclick: () => openCommandRun(cmd.id),
          }, "view run")
          : "",
        el("div", { class: "progress" }, share.progress.slice(-5).join("\n")),
      ),
    );
  }
}

/** Any command's result (from this page or not) may change the audit: reload it soon. */
let auditTimer = null;
function scheduleAudit() {
  clearTimeout(auditTimer);
  auditTimer = setTimeout(() => loadAudit().catch(() => {}), 300);
}

// ---- charts ---------------------------------------------------------------------------------

/** Fetches every edge's samples, redraws, and comes back after one sample interval. */
async function loadSeries() {
  clearTimeout(state.seriesTimer);
  if (!state.ws) return;
  try {
    state.series = await api("/series");
    renderSeriesControls();
    renderCharts();
  } finally {
    const every = Math.max(1000, state.series.sampleIntervalMs || 5000);
    if (state.ws) state.seriesTimer = setTimeout(() => loadSeries().catch(() => {}), every);
  }
}

/** The edge and pool choices of the charts, from the edges that have samples. */
function renderSeriesControls() {
  const edgeSelect = $("#chart-edge");
  const ids = Object.keys(state.series.edges || {}).sort();
  const chosen = edgeSelect.value || ids[0] || "";
  const options = (select, values, keep) => {
    const now = [...select.options].map((o) => o.value).join("\n");
    if (now === values.map((v) => v[0]).join("\n")) return;
    select.replaceChildren(...values.map(([v, label]) => el("option", { value: v }, label)));
    select.value = values.some((v) => v[0] === keep) ? keep : values[0] ? values[0][0] : "";
  };
  options(edgeSelect, ids.map((id) => [id, id]), chosen);
  const samples = state.series.edges[edgeSelect.value] || [];
  const pools = [...new Set(samples.flatMap((s) => Object.keys(s.pools)))].sort();
  const poolSelect = $("#chart-pool");
  options(
    poolSelect,
    [["total", "whole edge"], ["each", "each pool"], ...pools.map((p) => [p, `pool ${p}`])],
    poolSelect.value || "total",
  );
}

function renderCharts() {
  const edgeId = $("#chart-edge").value;
  const samples = (state.series.edges || {})[edgeId] || [];
  const box = $("#charts");
  box.dataset.edgeId = edgeId;
  box.dataset.samples = String(samples.length);
  drawCharts(box, samples, $("#chart-pool").value || "total", Date.now());
  $("#charts-note").textContent = samples.length
    ? `${samples.length} samples, one per ${state.series.sampleIntervalMs / 1000} s, last ` +
      `${Math.round(state.series.windowMs / 60000)} min`
    : "No samples yet: the Control Plane asks each edge every " +
      `${(state.series.sampleIntervalMs || 5000) / 1000} s.`;
}

$("#chart-edge").addEventListener("change", () => {
  renderSeriesControls();
  renderCharts();
});
$("#chart-pool").addEventListener("change", renderCharts);

buildCharts($("#charts"));
initViews({ edgeOf: (id) => state.edges.get(id) });
connect();
