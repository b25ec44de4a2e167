/**
 * The dashboard's read routes beside the fleet view: the series of edge samples for the charts
 * (`GET /series`, `GET /edges/{id}/series`), a node's recent runs and one run's stored output,
 * asked of its edge over the edge wire as read-only node queries (nothing is kept here), and
 * the audit with filters. All need a read token (the app's access guard).
 * @module
 */
import { fromWireError } from "../../../shared/run_codec.ts";
import type { Context, Hono } from "hono";
import { create } from "@bufbuild/protobuf";
import {
  type NodeAnswer,
  NodeQuerySchema,
  RunRecordSummarySchema,
} from "../../../proto/gen/iop/v1/control_pb.ts";
import { IopError } from "../../../shared/errors.ts";
import type { CpConfig } from "../config.ts";
import type { AuditFilter, AuditLog } from "../ports.ts";
import type { EdgeRegistry } from "../registry.ts";
import type { SeriesSample, SeriesStore } from "../series.ts";
import type { CpEnv } from "./access.ts";
import { messageJson } from "./json.ts";

/** What the routes read from. */
export interface FleetViewDeps {
  config: CpConfig;
  registry: EdgeRegistry;
  audit: AuditLog;
  series: SeriesStore;
}

/** Most audit rows one request lists. */
const AUDIT_MAX = 1_000;

/** Registers the routes on `app`. */
export function registerFleetViews(app: Hono<CpEnv>, deps: FleetViewDeps): void {
  const { registry, series, audit } = deps;
  const timeoutMs = deps.config.registry.statusTimeoutMs;
  const seriesMeta = () => ({
    sampleIntervalMs: series.options.sampleIntervalMs,
    windowMs: series.options.windowMs,
  });

  app.get("/series", (c) => {
    const wanted = (c.req.query("edge") ?? "").split(",").map((s) => s.trim()).filter(Boolean);
    const since = sinceOf(c);
    const ids = wanted.length > 0 ? wanted : registry.list().map((v) => v.edgeId);
    const edges: Record<string, SeriesSample[]> = {};
    for (const id of ids) {
      if (!registry.get(id)) throw new IopError("NOT_FOUND", `Cannot find edge '${id}'`);
      edges[id] = series.samples(id, since) ?? [];
    }
    return c.json({ ...seriesMeta(), edges });
  });
  app.get("/edges/:id/series", (c) => {
    const id = c.req.param("id");
    if (!registry.get(id)) throw new IopError("NOT_FOUND", `Cannot find edge '${id}'`);
    return c.json({ edgeId: id, ...seriesMeta(), samples: series.samples(id, sinceOf(c)) ?? [] });
  });

  app.get("/edges/:id/nodes/:node/runs", async (c) => {
    const { id, node } = c.req.param();
    const limit = positive(c.req.query("limit"), 20);
    const answer = await registry.queryNode(
      id,
      create(NodeQuerySchema, { node, query: { case: "history", value: { limit } } }),
      timeoutMs,
    );
    const a = answerOf(answer);
    if (a.case !== "history") throw new IopError("INTERNAL", "Cannot read the edge's answer");
    return c.json({
      edgeId: id,
      node,
      runs: a.value.runs.map((r) => messageJson(RunRecordSummarySchema, r)),
    });
  });
  app.get("/edges/:id/nodes/:node/runs/:runId/output", async (c) => {
    const { id, node, runId } = c.req.param();
    const answer = await registry.queryNode(
      id,
      create(NodeQuerySchema, { node, query: { case: "runOutput", value: { runId } } }),
      timeoutMs,
    );
    const a = answerOf(answer);
    if (a.case !== "runOutput") throw new IopError("INTERNAL", "Cannot read the edge's answer");
    if (!a.value.found) {
      throw new IopError(
        "NOT_FOUND",
        `Cannot find run '${runId}' in the history of node '${node}'`,
      );
    }
    return c.text(a.value.output, 200, {
      "X-IOP-Output-Truncated": String(a.value.truncated),
      // Output is the run's text, never markup: a browser must not sniff it into a page.
      "X-Content-Type-Options": "nosniff",
    });
  });

  app.get("/audit", (c) => {
    const filter: AuditFilter = {};
    const text = (name: string) => (c.req.query(name) ?? "").trim();
    if (text("actor")) filter.actor = text("actor");
    if (text("edge")) filter.edge = text("edge");
    // `status` is the command's outcome; `outcome` is accepted as its other name.
    const outcome = text("status") || text("outcome");
    if (outcome) filter.outcome = outcome;
    if (text("kind")) filter.kind = text("kind");
    const before = Number(text("before"));
    if (text("before") && Number.isFinite(before)) filter.beforeMs = before;
    const limit = Math.min(positive(c.req.query("limit"), 100), AUDIT_MAX);
    return c.json({ records: audit.recent(limit, filter) });
  });
}

/** The answer, or its error thrown with the edge's code. */
function answerOf(answer: NodeAnswer): NodeAnswer["answer"] {
  const a = answer.answer;
  if (a.case === "error") throw fromWireError(a.value);
  return a;
}

function sinceOf(c: Context<CpEnv>): number {
  const since = Number(c.req.query("since") ?? 0);
  return Number.isFinite(since) && since > 0 ? since : 0;
}

function positive(value: string | undefined, fallback: number): number {
  const n = Number(value ?? fallback);
  return Number.isInteger(n) && n > 0 ? n : fallback;
}
