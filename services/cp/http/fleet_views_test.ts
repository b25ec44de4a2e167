import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { Registry } from "prom-client";
import {
  type EdgeStatusRequest,
  EdgeStatusResponseSchema,
} from "../../../proto/gen/iop/v1/control_pb.ts";
import { createLogger } from "../../../shared/log.ts";
import { CommandCenter } from "../commands.ts";
import { parseCpConfig } from "../config.ts";
import { EdgeRegistry } from "../registry.ts";
import { SeriesStore } from "../series.ts";
import { openAuditStore } from "../store/audit_store.ts";
import { createCpHttp } from "./app.ts";

const READ = { authorization: "Bearer read-s3cret" };

/** An app with edge e1 attached through a fake link that answers node queries as a node would. */
function fixture() {
  const config = parseCpConfig({
    access: { tokens: [{ name: "viewer", token: "read-s3cret", role: "read" }] },
    series: { sample_interval_ms: 1000, window_ms: 60_000 },
  }, "cp.yaml");
  const logger = createLogger("cp.test", { level: "error" });
  const registry = new EdgeRegistry({ eventsPerEdge: 5 });
  const audit = openAuditStore(":memory:");
  const commands = new CommandCenter({
    registry,
    audit,
    logger,
    defaultTimeoutMs: 1000,
    resultGraceMs: 0,
    retained: 5,
  });
  const series = new SeriesStore(config.series);
  const asked: EdgeStatusRequest[] = [];
  registry.attach({ edgeId: "e1", version: "1", capabilities: [], labels: {} }, {
    requestStatus: (_timeoutMs, request) => {
      if (request) asked.push(request);
      const q = request?.nodeQuery;
      if (!q) return Promise.resolve(create(EdgeStatusResponseSchema, { edge: { edgeId: "e1" } }));
      if (q.node === "gone") {
        return Promise.resolve(create(EdgeStatusResponseSchema, {
          nodeAnswer: {
            answer: {
              case: "error",
              value: { code: "NOT_FOUND", message: "Cannot find node 'gone'" },
            },
          },
        }));
      }
      if (q.node === "old") return Promise.resolve(create(EdgeStatusResponseSchema, {}));
      const answer = q.query.case === "history"
        ? { case: "history" as const, value: { runs: [{ runId: "r1", status: "completed" }] } }
        : {
          case: "runOutput" as const,
          value: {
            runId: q.query.value?.runId ?? "",
            found: q.query.value?.runId === "r1",
            output: "<b>line 1</b>\nline 2\n",
            truncated: true,
          },
        };
      return Promise.resolve(create(EdgeStatusResponseSchema, { nodeAnswer: { answer } }));
    },
    sendCommand: () => Promise.resolve(),
    close: () => {},
  });
  const app = createCpHttp({
    config,
    registry,
    commands,
    audit,
    series,
    metrics: new Registry(),
    logger,
  });
  return { app, series, asked, audit };
}

Deno.test("GET /edges/{id}/nodes/{node}/runs asks the edge for the node's history and lists it", async () => {
  const { app, asked } = fixture();
  const res = await app.request("/edges/e1/nodes/n1/runs?limit=7", { headers: READ });
  assert.equal(res.status, 200);
  const body = await res.json();
  assert.deepEqual([body.edgeId, body.node, body.runs[0].runId, body.runs[0].status], [
    "e1",
    "n1",
    "r1",
    "completed",
  ]);
  assert.equal(asked[0]?.nodeQuery?.query.case, "history");
  assert.equal(asked[0]?.nodeQuery?.query.value?.limit, 7);
});

Deno.test("GET …/runs/{run}/output serves the edge's stored output as plain text, 404 when the node has no such run", async () => {
  const { app } = fixture();
  const res = await app.request("/edges/e1/nodes/n1/runs/r1/output", { headers: READ });
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type") ?? "", /^text\/plain/);
  assert.equal(res.headers.get("x-iop-output-truncated"), "true");
  assert.equal(res.headers.get("x-content-type-options"), "nosniff");
  assert.equal(await res.text(), "<b>line 1</b>\nline 2\n");
  const missing = await app.request("/edges/e1/nodes/n1/runs/r2/output", { headers: READ });
  assert.equal(missing.status, 404);
  assert.match(
    (await missing.json()).error.message,
    /Cannot find run 'r2' in the history of node 'n1'/,
  );
});

Deno.test("node queries pass the edge's error on, and say so for an unknown edge or one too old to answer", async () => {
  const { app } = fixture();
  const gone = await app.request("/edges/e1/nodes/gone/runs", { headers: READ });
  assert.equal(gone.status, 404);
  assert.equal((await gone.json()).error.message, "Cannot find node 'gone'");
  const unknown = await app.request("/edges/nope/nodes/n1/runs", { headers: READ });
  assert.equal(unknown.status, 404);
  assert.equal((await unknown.json()).error.message, "Cannot find edge 'nope'");
  const old = await app.request("/edges/e1/nodes/old/runs/r1/output", { headers: READ });
  assert.equal(old.status, 503);
  assert.match((await old.json()).error.message, /does not answer node queries/);
});

Deno.test("GET /series and /edges/{id}/series serve the ring's samples with the interval and window", async () => {
  const { app, series } = fixture();
  const status = (finished: number) =>
    create(EdgeStatusResponseSchema, {
      edge: { edgeId: "e1" },
      bucketBoundsMs: [10],
      pools: [{
        pool: "p",
        runsFinished: BigInt(finished),
        latencyBuckets: [BigInt(finished), 0n],
      }],
    });
  series.record("e1", status(0), 1_000);
  series.record("e1", status(4), 3_000);
  series.record("e1", status(6), 4_000);
  const one = await (await app.request("/edges/e1/series", { headers: READ })).json();
  assert.deepEqual([one.edgeId, one.sampleIntervalMs, one.windowMs], ["e1", 1000, 60_000]);
  assert.deepEqual(
    one.samples.map((s: { edge: { requestsPerS: number } }) => s.edge.requestsPerS),
    [2, 2],
  );
  assert.equal(one.samples[0].pools.p.latencyP50Ms, 5);
  const since = await (await app.request("/edges/e1/series?since=3000", { headers: READ })).json();
  assert.equal(since.samples.length, 1);
  const all = await (await app.request("/series?edge=e1", { headers: READ })).json();
  assert.equal(all.edges.e1.length, 2);
  const everyEdge = await (await app.request("/series", { headers: READ })).json();
  assert.deepEqual(Object.keys(everyEdge.edges), ["e1"]);
  const missing = await app.request("/series?edge=nope", { headers: READ });
  assert.equal(missing.status, 404);
  await missing.body?.cancel();
  const missingOne = await app.request("/edges/nope/series", { headers: READ });
  assert.equal(missingOne.status, 404);
  await missingOne.body?.cancel();
});

Deno.test("GET /audit filters by actor, edge, status and kind, and takes a limit", async () => {
  const { app, audit } = fixture();
  const base = {
    via: "http",
    detail: "",
    finishedAtMs: 0,
    outcome: "running" as const,
    results: {},
  };
  audit.begin({
    ...base,
    commandId: "c1",
    actor: "ops",
    kind: "run",
    edges: ["e1"],
    createdAtMs: 1,
  });
  audit.begin({
    ...base,
    commandId: "c2",
    actor: "bob",
    kind: "agent",
    edges: ["e2"],
    createdAtMs: 2,
  });
  audit.finish("c2", "failed", 3, {});
  const ids = async (query: string) =>
    ((await (await app.request(`/audit${query}`, { headers: READ })).json()).records as {
      commandId: string;
    }[]).map((r) => r.commandId);
  assert.deepEqual(await ids(""), ["c2", "c1"]);
  assert.deepEqual(await ids("?actor=ops"), ["c1"]);
  assert.deepEqual(await ids("?edge=e2"), ["c2"]);
  assert.deepEqual(await ids("?status=failed"), ["c2"]);
  assert.deepEqual(await ids("?status=running&actor=ops&edge=e1&kind=run"), ["c1"]);
  assert.deepEqual(await ids("?kind=reload"), []);
  assert.deepEqual(await ids("?limit=1"), ["c2"]);
  assert.deepEqual(await ids("?limit=bad"), ["c2", "c1"]);
});
