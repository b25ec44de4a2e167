/**
 * Chaos and soak suite on the container fleet (compose/fleet.yaml, see chaos_harness.ts): mixed
 * load from real clients (the `openai` client streaming and not, the `ollama` client streaming
 * and not, A2A JSON-RPC `message/send` and `message/stream`, CLI profiles through the OpenAI
 * surface, fleet commands through the Control Plane) while nodes and edges are killed (kill
 * -9), paused (SIGSTOP), cut off their networks and the Control Plane restarts. About 100 s of
 * soak in CI; `IOP_CHAOS_MINUTES=N` soaks N minutes, repeating the fault cycle.
 *
 * Before the soak, a 5-second cut of edge-a's nodes off their network during a streaming
 * request and a running CLI deploy must lose neither: every token once, the deploy complete.
 *
 * After the soak: every request ended before its timeout in success or a clean error (an HTTP
 * error status with a JSON error body, an error event in the stream, a failed A2A task) and only
 * a request to an edge being killed or paused may end without an answer; every run a client saw
 * has a terminal row in its node's history; every accepted command has its audit row; no
 * container log tells of an uncaught or unhandled failure; each IOP service's resident memory
 * stays within 20 % of its warm level (a restarted container from its restart). The figures
 * are printed at the end. Needs Docker like the fleet suite; IOP_SKIP_FLEET=1 skips both.
 * @module
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { Ollama } from "ollama";
import {
  A2A_AGENT,
  type ChaosFleet,
  crashLines,
  DEPLOY_MODEL,
  deployReply,
  type Fault,
  faultName,
  type FaultWindow,
  HistoryBook,
  injectFault,
  mockReply,
  rssTable,
  RssTracker,
  sampleRss,
  startChaosFleet,
  table,
  TERMINAL_STATUSES,
  untilFleetWhole,
} from "./chaos_harness.ts";
import { docker, dockerProblem, ensureImages, getJson, run } from "./fleet_harness.ts";
import { until } from "./util.ts";

const skip = Deno.env.get("IOP_SKIP_FLEET") === "1";
if (skip) console.log("chaos suite ignored: IOP_SKIP_FLEET=1 was set explicitly");

const minutes = Number(Deno.env.get("IOP_CHAOS_MINUTES") ?? "");
if (Deno.env.has("IOP_CHAOS_MINUTES") && !(minutes > 0)) {
  throw new Error("IOP_CHAOS_MINUTES: must be a positive number of minutes");
}
/** How long the load runs. */
const SOAK_MS = minutes > 0 ? minutes * 60_000 : 100_000;
/** Load before the first fault and before a (re)started container's memory counts. */
const WARM_MS = 15_000;
/** A fault starts this often. */
const FAULT_EVERY_MS = 10_000;
/** Every client request's own deadline. */
const REQUEST_TIMEOUT_MS = 45_000;
const WORKERS = 6;
/** Most a process may grow over the soak, once warm. */
const RSS_TOLERANCE = 0.2;

/** The nodes each edge serves; the fleet is whole when all are connected. */
const EDGE_NODES: Record<string, string[]> = {
  "edge-a": ["node-a1", "node-a2"],
  "edge-b": ["node-b1"],
};

/**
 * The fault cycle, restarts first, so their memory is measured after a warm-up too. Edges are
 * cut off their nodes' network only: their published port goes through cp-net (Docker's first
 * network), so an edge cut off cp-net would also cut its clients; the Control Plane is cut off
 * cp-net instead, which cuts every edge's link to it (and its own clients).
 */
const FAULTS: Fault[] = [
  { kind: "kill", service: "node-a1", outageMs: 3_000 },
  { kind: "restart", service: "cp" },
  { kind: "kill", service: "edge-b", outageMs: 3_000 },
  { kind: "pause", service: "node-a2", outageMs: 4_000 },
  {
    kind: "disconnect",
    service: "node-b1",
    network: "group-b",
    outageMs: 5_000,
    cutsClients: false,
  },
  {
    kind: "disconnect",
    service: "edge-b",
    network: "group-b",
    outageMs: 5_000,
    cutsClients: false,
  },
  { kind: "pause", service: "edge-a", outageMs: 3_000 },
  { kind: "disconnect", service: "cp", network: "cp-net", outageMs: 5_000, cutsClients: true },
];

const CP_OPERATE = { authorization: "Bearer fleet-operate-token" };

// ---------------------------------------------------------------------------------------------
// Outcomes

/**
 * How a request ended: ok (the deterministic answer, whole), clean (an error the client was
 * told: HTTP status + JSON error body, an error event, a failed task), dropped (no answer or a
 * cut one), hang (its own deadline passed), wrong (an answer that is not the reply, or a part of
 * one that is not its beginning).
 */
type Result = "ok" | "clean" | "dropped" | "hang" | "wrong";

class Ended extends Error {
  constructor(readonly result: Exclude<Result, "ok">, readonly label: string) {
    super(label);
  }
}

interface Outcome {
  kind: string;
  /** The service the client talked to. */
  target: string;
  tag: string;
  /** Whether the run's output carries the tag (the fake Ollama's does not). */
  tagged: boolean;
  startedAt: number;
  endedAt: number;
  result: Result;
  label: string;
  /** The Control Plane's command id, for commands. */
  commandId?: string;
}

/** Ids, node names and numbers out of an error message, so like errors count as one kind. */
function kindOf(message: string): string {
  return message.replace(/node-[a-z0-9-]+/g, "<node>").replace(/\b(run|cmd)_[0-9a-f]+/g, "<id>")
    .replace(/[0-9a-f]{8}-[0-9a-f-]{27}/g, "<id>").replace(/\d+/g, "N").slice(0, 70);
}

/** A part of an answer must be the reply's beginning: nothing lost, repeated or made up. */
function checkPart(text: string, expected: string): void {
  if (!expected.startsWith(text)) {
    throw new Ended("wrong", `answer is not the reply's beginning: ${JSON.stringify(text)}`);
  }
}

function checkWhole(text: string, expected: string): void {
  if (text !== expected) {
    throw new Ended("wrong", `answer differs from the reply: ${JSON.stringify(text)}`);
  }
}

/** Classifies what a client threw (after its own checks threw `Ended`). */
function classify(err: unknown, signal: AbortSignal): Ended {
  if (signal.aborted) return new Ended("hang", "no end before the request's deadline");
  if (err instanceof Ended) return err;
  if (err instanceof OpenAI.APIUserAbortError || err instanceof OpenAI.APIConnectionTimeoutError) {
    return new Ended("hang", "openai client timeout");
  }
  if (err instanceof OpenAI.APIConnectionError) {
    return new Ended("dropped", "no answer: the connection failed");
  }
  if (err instanceof OpenAI.APIError) {
    const body = err.error as { message?: unknown } | undefined;
    const code = err.code ?? "no code";
    if (err.status === undefined) return new Ended("clean", `error event in the stream: ${code}`);
    return typeof body?.message === "string"
      ? new Ended("clean", `HTTP ${err.status} ${code}`)
      : new Ended("dropped", `HTTP ${err.status} without a JSON error body`);
  }
  if (err instanceof Error && err.name === "ResponseError") {
    const status = (err as Error & { status_code?: number }).status_code;
    return new Ended("clean", `HTTP ${status} ${kindOf(err.message)}`);
  }
  if (err instanceof Error && /Did not receive done/.test(err.message)) {
    return new Ended("dropped", "stream ended without its end (no done, no error)");
  }
  if (err instanceof TypeError) {
    return new Ended("dropped", `connection lost: ${kindOf(err.message)}`);
  }
  if (err instanceof SyntaxError) return new Ended("dropped", "answer cut off (not JSON)");
  return new Ended("wrong", `unexpected ${err instanceof Error ? err.name : typeof err}: ${err}`);
}

// ---------------------------------------------------------------------------------------------
// The load: one function per kind of request

interface LoadContext {
  fleet: ChaosFleet;
  tag: string;
  signal: AbortSignal;
}

interface LoadKind {
  name: string;
  target: "edge-a" | "edge-b";
  tagged: boolean;
  send(ctx: LoadContext): Promise<void>;
}

function openai(fleet: ChaosFleet, edge: "edge-a" | "edge-b"): OpenAI {
  return new OpenAI({
    apiKey: "fleet", // edge-b's tenant fleet-apps; edge-a needs no key
    baseURL: `${edge === "edge-a" ? fleet.edgeAUrl : fleet.edgeBUrl}/v1`,
    maxRetries: 0,
    timeout: REQUEST_TIMEOUT_MS + 10_000, // the request's own signal ends it first
  });
}

/** An Ollama client whose every fetch also ends with `signal`. */
function ollama(fleet: ChaosFleet, edge: "edge-a" | "edge-b", signal: AbortSignal): Ollama {
  return new Ollama({
    host: edge === "edge-a" ? fleet.edgeAUrl : fleet.edgeBUrl,
    headers: { authorization: "Bearer fleet" },
    fetch: (input, init) =>
      fetch(input, {
        ...init,
        signal: init?.signal ? AbortSignal.any([init.signal, signal]) : signal,
      }),
  });
}

/** Streams an OpenAI chat completion; the text must be `expected(text)`, whole. */
async function openaiStream(
  client: OpenAI,
  body: Record<string, unknown>,
  expected: (text: string) => string,
  signal: AbortSignal,
): Promise<string> {
  const stream = await client.chat.completions.create(
    { ...body, stream: true } as OpenAI.ChatCompletionCreateParamsStreaming,
    { signal },
  );
  let text = "";
  let finish: string | null = null;
  try {
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
  } catch (err) {
    checkPart(text, expected(text));
    throw err;
  }
  checkPart(text, expected(text));
  // The client ends a stream quietly when its transport aborts or closes: no finish, no answer.
  if (signal.aborted) throw new Ended("hang", "no end before the request's deadline");
  if (finish === null) throw new Ended("dropped", "stream ended without a finish (cut off)");
  checkWhole(text, expected(text));
  return text;
}

/** The whoami profile's reply: the node's name, then one word a line. */
function whoamiReply(text: string, prompt: string): string {
  const node = text.match(/^served-by (node-[a-z0-9-]+)\n/)?.[1] ?? "node-?";
  return `served-by ${node}\n${prompt.split(" ").map((w) => `${w}\n`).join("")}`;
}

function a2aMessage(text: string) {
  return {
    kind: "message",
    messageId: crypto.randomUUID(),
    role: "user",
    parts: [{ kind: "text", text }],
  };
}

/** POSTs JSON-RPC to the A2A agent; a non-2xx answer must carry a JSON body. */
async function a2aPost(ctx: LoadContext, method: string, prompt: string): Promise<Response> {
  const res = await fetch(`${ctx.fleet.edgeAUrl}/a2a/${A2A_AGENT}`, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: ctx.tag,
      method,
      params: { message: a2aMessage(prompt) },
    }),
    signal: ctx.signal,
  });
  if (!res.ok) {
    const text = await res.text();
    let json = false;
    try {
      JSON.parse(text);
      json = true;
    } catch { /* not JSON */ }
    throw new Ended(json ? "clean" : "dropped", `HTTP ${res.status}${json ? "" : " without JSON"}`);
  }
  return res;
}

const LOAD: LoadKind[] = [
  {
    name: "openai stream (mock pool)",
    target: "edge-a",
    tagged: true,
    async send({ fleet, tag, signal }) {
      const prompt = `${tag} streams forty tokens`;
      await openaiStream(
        openai(fleet, "edge-a"),
        {
          model: "chat",
          messages: [{ role: "user", content: prompt }],
          metadata: { "mock.tokens": "40", "mock.token_delay_ms": "50" },
        },
        () => mockReply(prompt, 40),
        signal,
      );
    },
  },
  {
    name: "openai (mock pool)",
    target: "edge-b",
    tagged: true,
    async send({ fleet, tag, signal }) {
      const prompt = `${tag} answers whole`;
      const answer = await openai(fleet, "edge-b").chat.completions.create({
        model: "chat",
        messages: [{ role: "user", content: prompt }],
      }, { signal });
      checkWhole(answer.choices[0]?.message.content ?? "", mockReply(prompt, 24));
    },
  },
  {
    name: "ollama stream (mock pool)",
    target: "edge-a",
    tagged: true,
    async send({ fleet, tag, signal }) {
      const prompt = `${tag} streams ndjson`;
      const expected = mockReply(prompt, 24);
      const stream = await ollama(fleet, "edge-a", signal).chat({
        model: "chat",
        messages: [{ role: "user", content: prompt }],
        stream: true,
      });
      let text = "";
      try {
        for await (const part of stream) text += part.message.content;
      } catch (err) {
        checkPart(text, expected);
        // The client throws a plain Error for an `{"error": …}` line of the stream.
        if (
          err instanceof Error && err.constructor === Error && !/Did not receive/.test(err.message)
        ) {
          throw new Ended("clean", `error line in the stream: ${kindOf(err.message)}`);
        }
        throw err;
      }
      checkWhole(text, expected);
    },
  },
  {
    name: "ollama (fake Ollama backend)",
    target: "edge-b",
    tagged: false,
    async send({ fleet, signal }) {
      const answer = await ollama(fleet, "edge-b", signal).chat({
        model: "llama3.2",
        messages: [{ role: "user", content: "say something" }],
      });
      checkWhole(answer.message.content, mockReply("", 24));
    },
  },
  {
    name: "a2a message/send",
    target: "edge-a",
    tagged: true,
    async send(ctx) {
      const prompt = `${ctx.tag} asks the agent`;
      const res = await a2aPost(ctx, "message/send", prompt);
      const body = await res.json();
      if (body.error) throw new Ended("clean", `JSON-RPC error ${body.error.code}`);
      const task = body.result;
      if (task?.status?.state !== "completed") {
        throw new Ended("clean", `task ${task?.status?.state ?? "without a state"}`);
      }
      checkWhole(task.artifacts?.[0]?.parts?.[0]?.text ?? "", mockReply(prompt, 24));
    },
  },
  {
    name: "a2a message/stream",
    target: "edge-a",
    tagged: true,
    async send(ctx) {
      const res = await a2aPost(ctx, "message/stream", `${ctx.tag} streams the task`);
      const events = (await res.text()).split("\n\n").filter((b) => b.startsWith("data: "))
        .map((b) => JSON.parse(b.slice(6)));
      const error = events.find((e) => e.error);
      if (error) throw new Ended("clean", `JSON-RPC error event ${error.error.code}`);
      const last = events.at(-1)?.result;
      if (last?.final !== true) throw new Ended("dropped", "task stream ended without final");
      if (last.status?.state !== "completed") {
        throw new Ended("clean", `task ${last.status?.state}`);
      }
    },
  },
  {
    name: "cli stream (whoami)",
    target: "edge-b",
    tagged: true,
    async send({ fleet, tag, signal }) {
      const prompt = `${tag} one two three`;
      await openaiStream(
        openai(fleet, "edge-b"),
        {
          model: "whoami",
          messages: [{ role: "user", content: prompt }],
        },
        (text) => whoamiReply(text, prompt),
        signal,
      );
    },
  },
  {
    name: "cli deploy stream",
    target: "edge-a",
    tagged: true,
    async send({ fleet, tag, signal }) {
      await openaiStream(
        openai(fleet, "edge-a"),
        {
          model: DEPLOY_MODEL,
          messages: [{ role: "user", content: tag }],
        },
        () => deployReply(tag),
        signal,
      );
    },
  },
  {
    name: "cli (whoami)",
    target: "edge-a",
    tagged: true,
    async send({ fleet, tag, signal }) {
      const prompt = `${tag} whole answer`;
      const answer = await openai(fleet, "edge-a").chat.completions.create({
        model: "whoami",
        messages: [{ role: "user", content: prompt }],
      }, { signal });
      const text = answer.choices[0]?.message.content ?? "";
      checkWhole(text, whoamiReply(text, prompt));
    },
  },
];

/** The fleet commands sent through the Control Plane, in turn. */
const COMMANDS: { kind: string; body: (n: number) => unknown }[] = [
  {
    kind: "run",
    body: (n) => ({
      edges: { all: true },
      command: { run: { adapter: "mock", target: "demo", prompt: `cmd${n} fleet run` } },
    }),
  },
  { kind: "reload", body: () => ({ edges: { edgeIds: ["edge-b"] }, command: { reload: {} } }) },
  {
    kind: "drain",
    body: () => ({
      edges: { edgeIds: ["edge-a"] },
      command: { drain: { node: "node-a2", draining: false } },
    }),
  },
];

// ---------------------------------------------------------------------------------------------
// The soak

interface SoakRecord {
  outcomes: Outcome[];
  windows: FaultWindow[];
  faultFailures: string[];
  history: HistoryBook;
  rss: RssTracker;
  durationMs: number;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
}

let tagSeq = 0;

/** Sends one request of `kind`, recording how it ended. */
async function attempt(fleet: ChaosFleet, kind: LoadKind, outcomes: Outcome[]): Promise<void> {
  const tag = `cx${++tagSeq}`;
  const signal = AbortSignal.timeout(REQUEST_TIMEOUT_MS);
  const startedAt = performance.now();
  let result: Result = "ok";
  let label = "ok";
  try {
    await kind.send({ fleet, tag, signal });
  } catch (err) {
    const ended = classify(err, signal);
    result = ended.result;
    label = ended.label;
  }
  outcomes.push({
    kind: kind.name,
    target: kind.target,
    tag,
    tagged: kind.tagged,
    startedAt,
    endedAt: performance.now(),
    result,
    label,
  });
}

/** Sends one fleet command through the Control Plane, recording its id when accepted. */
async function command(fleet: ChaosFleet, n: number, outcomes: Outcome[]): Promise<void> {
  const spec = COMMANDS[n % COMMANDS.length]!;
  const signal = AbortSignal.timeout(REQUEST_TIMEOUT_MS);
  const startedAt = performance.now();
  const outcome: Outcome = {
    kind: `cp command ${spec.kind}`,
    target: "cp",
    tag: `cmd${n}`,
    tagged: false,
    startedAt,
    endedAt: 0,
    result: "ok",
    label: "ok",
  };
  try {
    const res = await fetch(`${fleet.cpUrl}/commands`, {
      method: "POST",
      headers: { ...CP_OPERATE, "content-type": "application/json" },
      body: JSON.stringify(spec.body(n)),
      signal,
    });
    const text = await res.text();
    let body: { commandId?: string; error?: { code?: string } } | undefined;
    try {
      body = JSON.parse(text);
    } catch { /* checked below */ }
    if (res.status === 202 && body?.commandId) {
      outcome.commandId = body.commandId;
    } else {
      const ended = body ? "clean" : "dropped";
      throw new Ended(ended, `HTTP ${res.status} ${body?.error?.code ?? "without a JSON body"}`);
    }
  } catch (err) {
    const ended = classify(err, signal);
    outcome.result = ended.result;
    outcome.label = ended.label;
  }
  outcome.endedAt = performance.now();
  outcomes.push(outcome);
}

/** Waits until an edge or the Control Plane answers its health probe again after a fault. */
async function untilHealthy(fleet: ChaosFleet, service: string): Promise<void> {
  await until(
    `${service} healthy again`,
    async () => {
      const out = await docker([
        "inspect",
        "-f",
        "{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}",
        fleet.containerId(service),
      ]);
      return out === "healthy" || out === "none";
    },
    60_000,
    250,
  );
}

async function soak(fleet: ChaosFleet): Promise<SoakRecord> {
  const outcomes: Outcome[] = [];
  const windows: FaultWindow[] = [];
  const faultFailures: string[] = [];
  const history = new HistoryBook();
  const start = performance.now();
  const rss = new RssTracker(Date.now(), WARM_MS);
  const loadEnd = start + SOAK_MS;
  const running = () => performance.now() < loadEnd;

  const workers = Array.from({ length: WORKERS }, async (_, w) => {
    for (let i = w; running(); i++) {
      await attempt(fleet, LOAD[i % LOAD.length]!, outcomes);
      await sleep(150);
    }
  });
  const commander = (async () => {
    for (let n = 0; running(); n++) {
      await command(fleet, n, outcomes);
      await sleep(5_000);
    }
  })();
  const faults = (async () => {
    for (let i = 0;; i++) {
      const at = start + WARM_MS + i * FAULT_EVERY_MS;
      // The last fault leaves time for its effects to show before the load stops.
      if (at + 15_000 > loadEnd) return;
      await sleep(at - performance.now());
      const fault = FAULTS[i % FAULTS.length]!;
      try {
        const window = await injectFault(fleet, fault);
        windows.push(window);
        // A killed or restarted service is back once it answers its probe, not at `docker start`.
        if (fault.kind === "kill" || fault.kind === "restart") {
          await untilHealthy(fleet, fault.service);
          window.toMs = performance.now();
        }
        const s = ((window.fromMs - start) / 1000).toFixed(0);
        const held = ((window.toMs - window.fromMs) / 1000).toFixed(1);
        console.log(`chaos: t=${s} s ${faultName(fault)} (held ${held} s)`);
      } catch (err) {
        faultFailures.push(`${faultName(fault)}: ${(err as Error).message}`);
      }
    }
  })();
  const watchers = (async () => {
    while (running()) {
      await Promise.all([sampleRss(fleet, rss), history.poll(fleet.cpUrl), sleep(10_000)]);
    }
  })();
  const ticker = setInterval(() => {
    const s = Math.round((performance.now() - start) / 1000);
    const failed = outcomes.filter((o) => o.result !== "ok").length;
    console.log(`chaos: t=${s} s, ${outcomes.length} requests ended (${failed} not ok)`);
  }, 20_000);
  try {
    await Promise.all([...workers, commander, faults, watchers]);
  } finally {
    clearInterval(ticker);
  }
  // The end sample, after the last requests and before the fleet settles.
  await sampleRss(fleet, rss);
  return { outcomes, windows, faultFailures, history, rss, durationMs: performance.now() - start };
}

/**
 * Whether a request overlapped a fault that took its own service away from clients: a kill, a
 * pause or a restart of it, or a cut of the network its port is published through.
 */
function inTargetFault(o: Outcome, windows: FaultWindow[]): boolean {
  const graceMs = 2_000;
  return windows.some((w) =>
    w.fault.service === o.target && (w.fault.kind !== "disconnect" || w.fault.cutsClients) &&
    o.startedAt <= w.toMs + graceMs && o.endedAt >= w.fromMs
  );
}

function count<T>(items: T[], key: (t: T) => string): Map<string, number> {
  const m = new Map<string, number>();
  for (const i of items) m.set(key(i), (m.get(key(i)) ?? 0) + 1);
  return m;
}

function summary(rec: SoakRecord, audited: Map<string, string>): string {
  const { outcomes, windows } = rec;
  const kinds = [...new Set(outcomes.map((o) => o.kind))];
  const results: Result[] = ["ok", "clean", "dropped", "hang", "wrong"];
  const cell = (o: Outcome[]) => {
    const dropped = o.filter((x) => x.result === "dropped");
    const excused = dropped.filter((x) => inTargetFault(x, windows)).length;
    return [
      String(o.length),
      ...results.map((r) =>
        r === "dropped"
          ? `${dropped.length}${excused ? ` (${excused} in a fault of its service)` : ""}`
          : String(o.filter((x) => x.result === r).length)
      ),
    ];
  };
  const byKind = table(
    ["request kind", "requests", ...results],
    [
      ...kinds.map((k) => [k, ...cell(outcomes.filter((o) => o.kind === k))]),
      ["all", ...cell(outcomes)],
    ],
  );
  const faults = table(
    ["fault", "injected"],
    [...count(windows, (w) => faultName(w.fault))].map(([k, n]) => [k, String(n)]),
  );
  const errors = table(
    ["error kind", "count"],
    [...count(outcomes.filter((o) => o.result !== "ok"), (o) => `${o.result}: ${o.label}`)]
      .sort((a, b) => b[1] - a[1]).map(([k, n]) => [k, String(n)]),
  );
  const commands = outcomes.filter((o) => o.commandId);
  const auditOutcomes = [...count(commands, (o) => audited.get(o.commandId!) ?? "no row")]
    .map(([k, n]) => `${k} ${n}`).join(", ");
  return [
    `==== chaos soak figures: ${
      (rec.durationMs / 1000).toFixed(0)
    } s of load, ${outcomes.length} ` +
    `requests, ${windows.length} faults injected${
      rec.faultFailures.length ? ` (${rec.faultFailures.length} failed)` : ""
    }`,
    byKind,
    "",
    faults,
    "",
    errors,
    "",
    `commands accepted ${commands.length}; audit outcomes: ${auditOutcomes || "-"}`,
    `history: ${rec.history.rows.size} runs read in ${rec.history.polls} polls; failed reads: ` +
    ([...rec.history.failures].map(([k, n]) => `${k} (${n})`).join("; ") || "none"),
    "",
    rssTable(rec.rss.tracks.values()),
    "====",
  ].join("\n");
}

function seconds(since: number): string {
  return `${((performance.now() - since) / 1000).toFixed(1)} s`;
}

/** Streams through a 5-second cut of edge-a's nodes off group-a: both must arrive whole. */
async function linkBlip(fleet: ChaosFleet): Promise<void> {
  const client = openai(fleet, "edge-a");
  const prompt = "blip stream survives the cut";
  const tokens = 160; // 8 s at 50 ms: it runs on across the whole cut
  const signal = AbortSignal.timeout(90_000);
  const seen = { stream: "", deploy: "" };
  const read = async (which: "stream" | "deploy", body: Record<string, unknown>) => {
    const stream = await client.chat.completions.create(
      { ...body, stream: true } as OpenAI.ChatCompletionCreateParamsStreaming,
      { signal },
    );
    let finish: string | null = null;
    for await (const chunk of stream) {
      seen[which] += chunk.choices[0]?.delta.content ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    return finish;
  };
  const settle = <T>(p: Promise<T>) =>
    p.then((value) => ({ value, error: undefined }), (error) => ({ value: undefined, error }));
  const streaming = settle(read("stream", {
    model: "chat",
    messages: [{ role: "user", content: prompt }],
    metadata: { "mock.tokens": String(tokens), "mock.token_delay_ms": "50" },
  }));
  const deploying = settle(read("deploy", {
    model: DEPLOY_MODEL,
    messages: [{ role: "user", content: "blip" }],
  }));
  await until("both runs to stream output", () => seen.stream !== "" && seen.deploy !== "", 20_000);
  const nodes = EDGE_NODES["edge-a"]!;
  const net = fleet.network("group-a");
  const cutAt = performance.now();
  const cutSince = new Date().toISOString();
  await Promise.all(nodes.map((n) => docker(["network", "disconnect", net, fleet.containerId(n)])));
  const atCut = { stream: seen.stream.length, deploy: seen.deploy.length };
  await sleep(5_000);
  await Promise.all(
    nodes.map((n) => docker(["network", "connect", "--alias", n, net, fleet.containerId(n)])),
  );
  console.log(`link blip: ${nodes.join(", ")} cut off ${net} for ${seconds(cutAt)}`);
  const [s, d] = await Promise.all([streaming, deploying]);
  // The cut was real: edge-a lost the nodes' links (heartbeats stop within 1.5 s).
  const edgeLogs = await run("docker", ["logs", "--since", cutSince, fleet.containerId("edge-a")]);
  assert.match(
    edgeLogs.stdout + edgeLogs.stderr,
    /"msg":"node (missed heartbeats|disconnected)/,
    "edge-a never saw the nodes' links go during the cut",
  );
  console.log(
    `link blip: stream ${seen.stream.length} chars (${atCut.stream} at the cut), ` +
      `finish ${s.value ?? `error ${s.error}`}; deploy ${seen.deploy.length} chars ` +
      `(${atCut.deploy} at the cut), finish ${d.value ?? `error ${d.error}`}`,
  );
  assert.equal(s.error, undefined, `the stream failed across the cut: ${s.error}`);
  assert.equal(seen.stream, mockReply(prompt, tokens), "the stream has every token exactly once");
  assert.equal(s.value, "stop");
  assert.equal(d.error, undefined, `the deploy failed across the cut: ${d.error}`);
  assert.equal(seen.deploy, deployReply("blip"), "the deploy printed every line exactly once");
  assert.equal(d.value, "stop");
}

Deno.test({
  name: "chaos: mixed load through kills, pauses, network cuts and Control Plane restarts " +
    "ends every request cleanly and loses no run, command or memory",
  ignore: skip,
  fn: async (t) => {
    const problem = await dockerProblem();
    if (problem) {
      throw new Error(
        `The chaos suite needs Docker: ${problem}. Set IOP_SKIP_FLEET=1 only to skip it on purpose.`,
      );
    }
    await ensureImages();
    const started = performance.now();
    const fleet = await startChaosFleet();
    console.log(`chaos: fleet ${fleet.project} up in ${seconds(started)}`);
    const results: boolean[] = [];
    let rec: SoakRecord | undefined;
    const audited = new Map<string, string>();
    try {
      await untilFleetWhole(fleet, EDGE_NODES, 60_000);

      results.push(
        await t.step(
          "a 5-second cut of the nodes' network loses neither a streaming request nor a " +
            "running CLI deploy",
          async () => {
            try {
              await linkBlip(fleet);
            } finally {
              await untilFleetWhole(fleet, EDGE_NODES, 60_000);
            }
          },
        ),
      );

      rec = await soak(fleet);
      const soaked = rec;
      // Every fault is undone: the fleet must come back whole by itself.
      await untilFleetWhole(fleet, EDGE_NODES, 60_000);

      results.push(
        await t.step("every fault of the cycle was injected", () => {
          assert.deepEqual(soaked.faultFailures, []);
          assert.ok(soaked.windows.length >= Math.min(FAULTS.length, 5), "faults injected");
        }),
      );

      results.push(
        await t.step(
          "every request ended before its timeout, in success or a clean error; only a " +
            "request to a service being killed, paused or cut off its clients went unanswered",
          () => {
            const bad = soaked.outcomes.filter((o) =>
              o.result === "hang" || o.result === "wrong" ||
              (o.result === "dropped" && !inTargetFault(o, soaked.windows))
            );
            const show = bad.slice(0, 10).map((o) =>
              `${o.kind} ${o.tag} at t=${
                ((o.startedAt - (soaked.outcomes[0]?.startedAt ?? 0)) / 1000).toFixed(1)
              } s: ${o.result}: ${o.label}`
            );
            assert.equal(
              bad.length,
              0,
              `${bad.length} request(s) ended badly:\n${show.join("\n")}`,
            );
            assert.ok(soaked.outcomes.filter((o) => o.result === "ok").length > 0);
          },
        ),
      );

      results.push(
        await t.step(
          "every run a client saw has a terminal row in its node's history",
          async () => {
            const answered = soaked.outcomes.filter((o) => o.tagged && o.result === "ok");
            let missing: string[] = [];
            let open: string[] = [];
            await until(
              "every answered run in a history and every row terminal",
              async () => {
                await soaked.history.poll(fleet.cpUrl);
                const byTag = soaked.history.byTag();
                missing = answered.filter((o) => !byTag.has(o.tag)).map((o) =>
                  `${o.kind} ${o.tag}`
                );
                open = [...soaked.history.rows.values()].filter((r) =>
                  !TERMINAL_STATUSES.has(r.status)
                )
                  .map((r) => `${r.node} ${r.runId} ${r.adapter}/${r.target} ${r.status}`);
                return missing.length === 0 && open.length === 0;
              },
              60_000,
              2_000,
            ).catch(() => {});
            assert.deepEqual(missing, [], "answered runs with no history row");
            assert.deepEqual(open, [], "history rows left without a terminal status");
            console.log(
              `history: ${answered.length} answered runs all found; ${soaked.history.rows.size} rows, all terminal`,
            );
          },
        ),
      );

      results.push(
        await t.step("every accepted command has its audit row", async () => {
          const ids = soaked.outcomes.filter((o) => o.commandId).map((o) => o.commandId!);
          assert.ok(ids.length > 0, "no command was accepted");
          const { records } = await getJson<{ records: { commandId: string; outcome: string }[] }>(
            `${fleet.cpUrl}/audit?limit=1000`,
            { ...CP_OPERATE },
          );
          for (const r of records) audited.set(r.commandId, r.outcome);
          assert.deepEqual(ids.filter((id) => !audited.has(id)), [], "commands with no audit row");
        }),
      );

      results.push(
        await t.step("no container log tells of an uncaught or unhandled failure", async () => {
          const lines = await crashLines(fleet);
          assert.deepEqual(lines, []);
        }),
      );

      results.push(
        await t.step(
          `each IOP service's resident memory stays within ${RSS_TOLERANCE * 100} % once warm`,
          () => {
            // The tiers; the fake Ollama and Prometheus are the fleet's fixtures, shown only.
            const tiers = [...soaked.rss.tracks.values()].filter((t) =>
              /^(cp|edge|node)/.test(t.service)
            );
            assert.ok(tiers.length >= 6, `memory of ${tiers.length} IOP services measured`);
            // Only a container restarted close to the end may lack a warm sample.
            const unmeasured = tiers.filter((t) => t.baseline === undefined && t.restarts === 0)
              .map((t) => t.service);
            assert.deepEqual(unmeasured, [], "services with no warm sample");
            const grown = tiers.filter((t) =>
              t.baseline !== undefined && t.max! > t.baseline * (1 + RSS_TOLERANCE)
            ).map((t) =>
              `${t.service}: ${(t.baseline! / 2 ** 20).toFixed(1)} → ${
                (t.max! / 2 ** 20).toFixed(1)
              } MiB`
            );
            assert.deepEqual(grown, [], "services whose memory grew past the tolerance");
          },
        ),
      );
    } finally {
      if (rec) console.log(summary(rec, audited));
      if (results.includes(false)) await fleet.dumpLogs();
      const downAt = performance.now();
      await fleet.down();
      console.log(`chaos: fleet removed in ${seconds(downAt)}; whole suite ${seconds(started)}`);
    }
  },
});
