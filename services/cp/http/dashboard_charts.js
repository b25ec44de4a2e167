// The dashboard's charts: plain SVG line charts of the Control Plane's series (GET /series), one
// per metric, for one edge as a whole, one of its pools, or each pool side by side. No library:
// each chart is an <svg> redrawn from the samples, with `data-points` counting the points it
// drew (for tests) and `data-last` its newest value.

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 320;
const HEIGHT = 120;
const PAD = { left: 38, right: 8, top: 8, bottom: 18 };
const COLORS = ["#2f6fdf", "#e0692a", "#2a9d5b", "#b03aa8", "#c9a227", "#3aa9b0", "#7a5bd6"];

/** The charts, each with its lines: a field of a series point, or several for percentiles. */
export const CHARTS = [
  {
    id: "requests",
    title: "requests/s",
    lines: [{ field: "requestsPerS", name: "req/s" }, {
      field: "failedPerS",
      name: "failed/s",
      color: "#d33",
    }],
  },
  { id: "tokens", title: "tokens/s", lines: [{ field: "tokensPerS", name: "tokens/s" }] },
  { id: "queue", title: "queue depth", lines: [{ field: "queueDepth", name: "queued" }] },
  {
    id: "inflight",
    title: "runs in flight",
    lines: [{ field: "runsInFlight", name: "in flight" }],
  },
  {
    id: "latency",
    title: "latency (ms)",
    lines: [{ field: "latencyP50Ms", name: "p50" }, { field: "latencyP95Ms", name: "p95" }],
  },
  {
    id: "ttft",
    title: "time to first token (ms)",
    lines: [{ field: "ttftP50Ms", name: "p50" }, { field: "ttftP95Ms", name: "p95" }],
  },
];

function svgEl(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
}

/** Builds the empty chart cards into `box`. */
export function buildCharts(box) {
  box.replaceChildren();
  for (const chart of CHARTS) {
    const fig = document.createElement("figure");
    fig.className = "chart";
    fig.dataset.metric = chart.id;
    const caption = document.createElement("figcaption");
    const title = document.createElement("span");
    title.textContent = chart.title;
    const value = document.createElement("span");
    value.className = "chart-value";
    caption.append(title, value);
    const svg = svgEl("svg", {
      viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
      role: "img",
      "aria-label": chart.title,
      "data-points": 0,
    });
    const legend = document.createElement("div");
    legend.className = "legend";
    fig.append(caption, svg, legend);
    box.append(fig);
  }
}

/**
 * The lines to draw for a chart: `scope` is "total" (the edge), "each" (one line per pool: the
 * chart's first field, p95 for percentiles) or a pool name.
 */
function linesOf(chart, samples, scope) {
  const pick = (sample, pool) => pool === undefined ? sample.edge : sample.pools[pool];
  if (scope === "each") {
    const pools = [...new Set(samples.flatMap((s) => Object.keys(s.pools)))].sort();
    const line = chart.lines[chart.lines.length - 1];
    const percentile = chart.lines.length > 1 && chart.id !== "requests";
    const field = percentile ? line.field : chart.lines[0].field;
    return pools.map((pool, i) => ({
      name: percentile ? `${pool} ${line.name}` : pool,
      color: COLORS[i % COLORS.length],
      points: samples.map((s) => [s.atMs, pick(s, pool)?.[field] ?? null]),
    }));
  }
  const pool = scope === "total" ? undefined : scope;
  return chart.lines.map((line, i) => ({
    name: line.name,
    color: line.color || COLORS[i % COLORS.length],
    dash: i > 0 && !line.color,
    points: samples.map((s) => [s.atMs, pick(s, pool)?.[line.field] ?? null]),
  }));
}

/** A round upper bound for the y axis. */
function niceMax(max) {
  if (!(max > 0)) return 1;
  const step = 10 ** Math.floor(Math.log10(max));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * step >= max) return m * step;
  return 10 * step;
}

function fmt(v) {
  if (v === null || v === undefined) return "–";
  if (v >= 1000) return `${(v / 1000).toFixed(v >= 10_000 ? 0 : 1)}k`;
  return v >= 10 ? v.toFixed(0) : v >= 1 ? v.toFixed(1) : v.toFixed(2).replace(/\.?0+$/, "") || "0";
}

function timeLabel(ms) {
  return new Date(ms).toLocaleTimeString([], {
    hour: "2-digit",
    minute: "2-digit",
    second: "2-digit",
  });
}

/** Redraws every chart in `box` from an edge's samples (oldest first). */
export function drawCharts(box, samples, scope, nowMs) {
  for (const chart of CHARTS) {
    const fig = box.querySelector(`.chart[data-metric="${chart.id}"]`);
    if (fig) drawChart(fig, linesOf(chart, samples, scope), nowMs);
  }
}

function drawChart(fig, lines, nowMs) {
  const svg = fig.querySelector("svg");
  svg.replaceChildren();
  const times = lines.flatMap((l) => l.points.map((p) => p[0]));
  const t1 = Math.max(nowMs, ...times);
  const t0 = times.length ? Math.min(...times) : t1 - 60_000;
  const span = Math.max(t1 - t0, 1);
  const values = lines.flatMap((l) => l.points.map((p) => p[1]).filter((v) => v !== null));
  const yMax = niceMax(Math.max(0, ...values));
  const w = WIDTH - PAD.left - PAD.right;
  const h = HEIGHT - PAD.top - PAD.bottom;
  const x = (t) => PAD.left + ((t - t0) / span) * w;
  const y = (v) => PAD.top + h - (v / yMax) * h;
  for (const frac of [0, 0.5, 1]) {
    const gy = PAD.top + h - frac * h;
    svg.append(
      svgEl("line", { x1: PAD.left, x2: WIDTH - PAD.right, y1: gy, y2: gy, class: "grid" }),
    );
    const label = svgEl("text", {
      x: PAD.left - 4,
      y: gy + 3,
      class: "axis",
      "text-anchor": "end",
    });
    label.textContent = fmt(yMax * frac);
    svg.append(label);
  }
  for (const [t, anchor] of [[t0, "start"], [t1, "end"]]) {
    const label = svgEl("text", { x: x(t), y: HEIGHT - 4, class: "axis", "text-anchor": anchor });
    label.textContent = times.length ? timeLabel(t) : "";
    svg.append(label);
  }
  let drawn = 0;
  for (const line of lines) {
    // A null (no run ended in that interval) breaks the line instead of faking a zero.
    let d = "";
    let open = false;
    for (const [t, v] of line.points) {
      if (v === null) {
        open = false;
        continue;
      }
      d += `${open ? "L" : "M"}${x(t).toFixed(1)},${y(v).toFixed(1)}`;
      open = true;
      drawn++;
    }
    const single = line.points.filter((p) => p[1] !== null);
    if (single.length === 1) {
      svg.append(
        svgEl("circle", { cx: x(single[0][0]), cy: y(single[0][1]), r: 2, fill: line.color }),
      );
    }
    if (d) {
      svg.append(svgEl("path", {
        d,
        fill: "none",
        stroke: line.color,
        "stroke-width": 1.6,
        "vector-effect": "non-scaling-stroke",
        ...(line.dash ? { "stroke-dasharray": "4 3" } : {}),
        "data-series": line.name,
      }));
    }
  }
  svg.setAttribute("data-points", String(drawn));
  const last = lines[lines.length - 1]?.points.findLast((p) => p[1] !== null);
  fig.dataset.last = last ? String(last[1]) : "";
  fig.querySelector(".chart-value").textContent = lines
    .map((l) => `${l.name} ${fmt(l.points.findLast((p) => p[1] !== null)?.[1] ?? null)}`)
    .join(" · ");
  const legend = fig.querySelector(".legend");
  legend.replaceChildren();
  for (const line of lines) {
    const item = document.createElement("span");
    item.style.setProperty("--c", line.color);
    item.textContent = line.name;
    legend.append(item);
  }
  if (lines.length === 0 || drawn === 0) {
    const empty = svgEl("text", {
      x: WIDTH / 2,
      y: HEIGHT / 2,
      class: "axis",
      "text-anchor": "middle",
    });
    empty.textContent = "no data yet";
    svg.append(empty);
  }
}
