/**
 * What the tracing suite (and other tests of real `main.ts` processes) needs: an OTLP/HTTP receiver (JSON, `POST /v1/traces`) that keeps
 * every span with its service name, and an Edge plus a Node as real `main.ts` subprocesses in
 * front of a fake OpenAI-compatible backend, on free ports with their own directory.
 * @module
 */
import { startFakeOpenAI } from "../shared/testing/fake_openai.ts";
import type { FakeOpenAI, FakeOpenAIOptions } from "../shared/testing/fake_openai.ts";
import { freePort, TextLog, until } from "./util.ts";

const root = new URL("..", import.meta.url).pathname;

/** One exported span, flattened from OTLP JSON. */
export interface ReceivedSpan {
  service: string;
  resource: Record<string, unknown>;
  traceId: string;
  spanId: string;
  parentSpanId: string;
  traceState: string;
  name: string;
  kind: number;
  attributes: Record<string, unknown>;
  events: string[];
}

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  boolValue?: boolean;
  doubleValue?: number;
}

interface OtlpKeyValue {
  key: string;
  value: OtlpValue;
}

function plain(list: OtlpKeyValue[] | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const { key, value } of list ?? []) {
    out[key] = value.stringValue ??
      (value.intValue !== undefined
        ? Number(value.intValue)
        : value.boolValue ?? value.doubleValue);
  }
  return out;
}

/** An OTLP/HTTP JSON receiver on a free port. */
export interface OtlpReceiver extends AsyncDisposable {
  url: string;
  spans: ReceivedSpan[];
  /** POSTs received, spans or not, with their content type. */
  posts: string[];
}

/** Starts an OTLP/HTTP receiver that accepts JSON trace exports at `/v1/traces`. */
export function startOtlpReceiver(): OtlpReceiver {
  const spans: ReceivedSpan[] = [];
  const posts: string[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const type = req.headers.get("content-type") ?? "";
    posts.push(`${req.method} ${new URL(req.url).pathname} ${type}`);
    if (req.method !== "POST" || new URL(req.url).pathname !== "/v1/traces") {
      return new Response("not found", { status: 404 });
    }
    const body = await req.json();
    for (const rs of body.resourceSpans ?? []) {
      const resource = plain(rs.resource?.attributes);
      for (const ss of rs.scopeSpans ?? []) {
        for (const s of ss.spans ?? []) {
          spans.push({
            service: String(resource["service.name"]),
            resource,
            traceId: s.traceId,
            spanId: s.spanId,
            parentSpanId: s.parentSpanId ?? "",
            traceState: s.traceState ?? "",
            name: s.name,
            kind: s.kind,
            attributes: plain(s.attributes),
            events: (s.events ?? []).map((e: { name: string }) => e.name),
          });
        }
      }
    }
    return Response.json({});
  });
  return {
    url: `http://127.0.0.1:${server.addr.port}`,
    spans,
    posts,
    [Symbol.asyncDispose]: () => server.shutdown(),
  };
}

/** A running Edge + Node pair in front of a fake OpenAI backend. */
export interface TracedStack extends AsyncDisposable {
  edgeUrl: string;
  backend: FakeOpenAI;
  /** The Node's history file. */
  historyPath: string;
  edgeLog: TextLog;
  nodeLog: TextLog;
  /** The Edge's process (to signal it alone). */
  edgeProcess: Deno.ChildProcess;
  /** SIGTERM to both (a graceful stop, which flushes their spans); resolves once both exited. */
  stop(): Promise<void>;
}

/** The model the Edge serves, through the pool `chat`, on the backend's `test-model`. */
export const MODEL = "chat";

/** Environment of a child: this process's, less every `OTEL_*` variable, plus `env`. */
function childEnv(env: Record<string, string>): Record<string, string> {
  const base = Object.fromEntries(
    Object.entries(Deno.env.toObject()).filter(([k]) => !k.startsWith("OTEL_")),
  );
  return { ...base, IOP_LOG_LEVEL: "info", ...env };
}

/** Starts the stack; `edgeEnv` and `nodeEnv` are added to each process's environment. */
export async function startTracedStack(
  edgeEnv: Record<string, string>,
  nodeEnv: Record<string, string>,
  backendOptions: FakeOpenAIOptions = {},
): Promise<TracedStack> {
  const dir = await Deno.makeTempDir({ prefix: "iop_tracing_" });
  const backend = startFakeOpenAI({ models: ["test-model"], ...backendOptions });
  const backendHost = new URL(backend.url).host;
  const httpPort = freePort();
  const wirePort = freePort();
  await Deno.writeTextFile(
    `${dir}/edge.yaml`,
    `edge: { id: edge-trace }
http: { host: 127.0.0.1, port: ${httpPort} }
wire: { host: 127.0.0.1, port: ${wirePort}, insecure_plaintext: true }
control_plane: { address: "" }
nodes:
  - id: node-trace
    token: node-trace-token
    adapters:
      - { name: openai, kind: openai_compat, base_url: "${backend.url}/v1", connect_timeout_ms: 2000 }
    providers:
      - { id: p1, adapter: openai, target: test-model, model_group: ${MODEL}, max_concurrency: 2 }
models:
  - { name: ${MODEL}, route: pool, queue: { max_length: 4, max_wait_ms: 5000 } }
`,
  );
  await Deno.writeTextFile(
    `${dir}/node.yaml`,
    `node: { id: node-trace, token: node-trace-token }
edge: { address: "127.0.0.1:${wirePort}", insecure_plaintext: true }
http: { host: 127.0.0.1, port: ${freePort()} }
history: { path: ${dir}/history.db }
policy: { adapter_kinds: [openai_compat], backend_hosts: ["${backendHost}"] }
`,
  );
  const spawn = (svc: string, env: Record<string, string>, log: TextLog) => {
    const child = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", `${root}services/${svc}/main.ts`, "--config", `${dir}/${svc}.yaml`],
      cwd: dir,
      clearEnv: true,
      env: childEnv(env),
      stdin: "null",
      stdout: "null",
      stderr: "piped",
    }).spawn();
    const reading = log.readFrom(child.stderr);
    return { child, reading };
  };
  const edgeLog = new TextLog();
  const nodeLog = new TextLog();
  const edge = spawn("edge", edgeEnv, edgeLog);
  const node = spawn("node", nodeEnv, nodeLog);
  let stopped: Promise<void> | undefined;
  const stop = () =>
    stopped ??= (async () => {
      for (const p of [node, edge]) {
        try {
          p.child.kill("SIGTERM");
        } catch {
          // Already exited.
        }
      }
      await Promise.all([node.child.status, edge.child.status, node.reading, edge.reading]);
    })();
  const edgeUrl = `http://127.0.0.1:${httpPort}`;
  const dispose = async () => {
    await stop();
    await backend.close();
    await Deno.remove(dir, { recursive: true });
  };
  try {
    await until(
      "the edge to serve its model",
      async () => {
        const res = await fetch(`${edgeUrl}/readyz`);
        await res.body?.cancel();
        return res.status === 200;
      },
      60_000,
      100,
    );
  } catch (err) {
    await dispose();
    throw new Error(`stack did not come up:\n${edgeLog.text}\n${nodeLog.text}`, { cause: err });
  }
  return {
    edgeUrl,
    backend,
    historyPath: `${dir}/history.db`,
    edgeLog,
    nodeLog,
    edgeProcess: edge.child,
    stop,
    [Symbol.asyncDispose]: dispose,
  };
}

/** POSTs a non-streaming chat completion for {@linkcode MODEL} with `headers`. */
export async function chat(stack: TracedStack, headers: Record<string, string> = {}) {
  const res = await fetch(`${stack.edgeUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hello there" }] }),
  });
  const body = await res.json();
  return { status: res.status, body };
}
