/**
 * Health probes per adapter kind, each one cheap GET (or a PATH lookup) that says whether the
 * backend can take a run now:
 *
 * - `ollama`: `GET /api/version` answers 200 with `{version}`.
 * - `vllm`: `GET /health` answers 200 (503 means the engine died).
 * - `openai_compat`: `GET /v1/models` answers 200 with `{data: [...]}` (with the API key).
 * - `cli`: each profile's command resolves to an executable file (a bare name on the node's
 *   PATH); the adapter is healthy while at least one profile is, and reports each profile.
 * - `mock`: always healthy.
 *
 * They use `fetch`, as the adapters' health checks and listings do (the HTTP/1.1 client is
 * for the POSTs of runs only). A probe never throws for a dead backend, it reports it; it
 * rejects only with the reason of an aborted `signal`. The caller bounds the time with
 * `signal` (see `health_monitor.ts`).
 * @module
 */
import type { CliProfile, ProbeResult } from "../ports.ts";

/** Options of {@linkcode probeGet}. */
export interface ProbeGetOptions {
  signal: AbortSignal;
  headers?: Record<string, string>;
  /** Checks a 200 body and names what answered; a throw means unhealthy with its message. */
  accept?: (body: string) => string;
}

/** GETs `url`: healthy on a 200 that `accept` takes, unhealthy with the reason otherwise. */
export async function probeGet(url: string, options: ProbeGetOptions): Promise<ProbeResult> {
  const { signal } = options;
  try {
    const res = await fetch(url, { signal, headers: options.headers ?? {} });
    const body = await res.text();
    if (!res.ok) {
      return { healthy: false, detail: `GET ${url} answered ${res.status} ${res.statusText}` };
    }
    return { healthy: true, detail: options.accept ? options.accept(body) : `GET ${url} ok` };
  } catch (err) {
    if (signal.aborted && !isTimeout(signal.reason)) throw signal.reason;
    const why = signal.aborted ? "no answer in time" : message(err);
    return { healthy: false, detail: `GET ${url} failed: ${why}` };
  }
}

/** Probes an Ollama server at `base` (no trailing slash) with `GET /api/version`. */
export function probeOllama(base: string, signal: AbortSignal): Promise<ProbeResult> {
  return probeGet(`${base}/api/version`, {
    signal,
    accept: (body) => {
      const version = (JSON.parse(body) as { version?: unknown }).version;
      if (typeof version !== "string") throw new Error("GET /api/version sent no version");
      return `ollama ${version} at ${base}`;
    },
  });
}

/** Probes a vLLM server at `root` (without `/v1`) with `GET /health`. */
export function probeVllm(root: string, signal: AbortSignal): Promise<ProbeResult> {
  return probeGet(`${root}/health`, { signal, accept: () => `vllm at ${root}` });
}

/** Probes an OpenAI-compatible server at `root` (without `/v1`) with `GET /v1/models`. */
export function probeOpenAICompat(
  root: string,
  options: { signal: AbortSignal; headers?: Record<string, string> },
): Promise<ProbeResult> {
  return probeGet(`${root}/v1/models`, {
    ...options,
    accept: (body) => {
      const data = (JSON.parse(body) as { data?: unknown }).data;
      if (!Array.isArray(data)) throw new Error("GET /v1/models sent no model list");
      return `openai_compat at ${root}: ${data.length} models`;
    },
  });
}

/**
 * Probes CLI profiles: each is healthy when `resolve` finds its command (an executable file);
 * the adapter is healthy while at least one profile is.
 */
export async function probeCliProfiles(
  profiles: readonly CliProfile[],
  resolve: (command: string) => Promise<string | undefined>,
  signal: AbortSignal,
): Promise<ProbeResult> {
  const targets: Record<string, { healthy: boolean; detail: string }> = {};
  const missing: string[] = [];
  for (const p of profiles) {
    signal.throwIfAborted();
    const path = await resolve(p.command);
    if (path !== undefined) {
      targets[p.name] = { healthy: true, detail: `runs ${path}` };
    } else {
      const what = p.command === "" ? "no command" : `command '${p.command}' not found`;
      targets[p.name] = { healthy: false, detail: `${what} (not an executable file on PATH)` };
      missing.push(p.name);
    }
  }
  const runnable = profiles.length - missing.length;
  if (profiles.length === 0) return { healthy: false, detail: "no CLI profiles configured" };
  const detail = `${runnable} of ${profiles.length} profiles runnable` +
    (missing.length === 0 ? "" : `; not runnable: ${missing.join(", ")}`);
  return { healthy: runnable > 0, detail, targets };
}

/** The mock backend is in-process: always healthy. */
export function probeMock(signal: AbortSignal): Promise<ProbeResult> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return Promise.resolve({ healthy: true, detail: "mock adapter" });
}

function isTimeout(reason: unknown): boolean {
  return reason instanceof DOMException && reason.name === "TimeoutError";
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
