/**
 * Converts the NodeConfigPayload pushed by the Edge into the Node's domain adapter configs.
 * @module
 */
import type { NodeConfigPayload } from "../../../proto/gen/iop/v1/node_pb.ts";
import type { AdapterConfig } from "../ports.ts";

/** The domain view of a config payload. */
export interface NodeSettings {
  adapters: AdapterConfig[];
  heartbeatIntervalMs: number;
  maxConcurrentRuns: number;
}

/** Wire payload → domain settings; adapters with no settings for their kind are skipped. */
export function fromConfigPayload(payload: NodeConfigPayload): NodeSettings {
  const adapters: AdapterConfig[] = [];
  for (const a of payload.adapters) {
    const base = { name: a.name, enabled: a.enabled };
    const s = a.settings;
    if (a.kind === "mock" && s.case === "mock") {
      adapters.push({
        ...base,
        kind: "mock",
        settings: {
          tokens: s.value.tokens,
          tokenDelayMs: s.value.tokenDelayMs,
          startDelayMs: s.value.startDelayMs,
          failWith: s.value.failWith,
          failRetryable: s.value.failRetryable,
        },
      });
    } else if (a.kind === "cli" && s.case === "cli") {
      adapters.push({
        ...base,
        kind: "cli",
        settings: {
          profiles: s.value.profiles.map((p) => ({
            name: p.name,
            command: p.command,
            args: [...p.args],
            resumeArgs: [...p.resumeArgs],
            env: { ...p.env },
            cwd: p.cwd,
            timeoutMs: p.timeoutMs,
            description: p.description,
          })),
        },
      });
    } else if (
      (a.kind === "ollama" || a.kind === "vllm" || a.kind === "openai_compat") && s.case === "http"
    ) {
      adapters.push({
        ...base,
        kind: a.kind,
        settings: {
          baseUrl: s.value.baseUrl,
          apiKey: s.value.apiKey,
          apiKeyEnv: s.value.apiKeyEnv,
          connectTimeoutMs: s.value.connectTimeoutMs,
          firstTokenTimeoutMs: s.value.firstTokenTimeoutMs,
          idleTimeoutMs: s.value.idleTimeoutMs,
          models: [...s.value.models],
        },
      });
    } else {
      // Unknown kinds still reach the registry so that it can report them as rejected.
      adapters.push({ ...base, kind: a.kind, settings: {} } as unknown as AdapterConfig);
    }
  }
  return {
    adapters,
    heartbeatIntervalMs: payload.heartbeatIntervalMs || 2000,
    maxConcurrentRuns: payload.maxConcurrentRuns,
  };
}
