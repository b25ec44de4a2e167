/**
 * The one place a node record becomes the NodeConfigPayload a Node builds its adapters from.
 * @module
 */
import { create } from "@bufbuild/protobuf";
import {
  type AdapterConfig,
  AdapterConfigSchema,
  type NodeConfigPayload,
  NodeConfigPayloadSchema,
} from "../../../proto/gen/iop/v1/node_pb.ts";
import type { NodeAdapterRecord, NodeRecord } from "../config.ts";

/** Link settings the Edge adds to every payload. */
export interface PayloadSettings {
  heartbeatIntervalMs: number;
}

/** Builds the config payload sent to a registering node. */
export function buildNodeConfigPayload(
  record: NodeRecord,
  settings: PayloadSettings,
): NodeConfigPayload {
  return create(NodeConfigPayloadSchema, {
    nodeId: record.id,
    alias: record.alias,
    adapters: record.adapters.map(toAdapterConfig),
    providers: record.providers.map((p) => ({
      id: p.id,
      adapter: p.adapter,
      target: p.target,
      maxConcurrency: p.maxConcurrency,
      modelGroup: p.modelGroup,
    })),
    heartbeatIntervalMs: settings.heartbeatIntervalMs,
    maxConcurrentRuns: record.maxConcurrentRuns,
  });
}

function toAdapterConfig(a: NodeAdapterRecord): AdapterConfig {
  const base = { name: a.name, kind: a.kind, enabled: a.enabled };
  switch (a.kind) {
    case "mock":
      return create(AdapterConfigSchema, {
        ...base,
        settings: {
          case: "mock",
          value: {
            tokens: a.tokens,
            tokenDelayMs: a.tokenDelayMs,
            startDelayMs: a.startDelayMs,
            failWith: a.failWith,
            failRetryable: a.failRetryable,
          },
        },
      });
    case "cli":
      return create(AdapterConfigSchema, {
        ...base,
        settings: { case: "cli", value: { profiles: a.profiles } },
      });
    case "ollama":
    case "vllm":
    case "openai_compat":
      return create(AdapterConfigSchema, {
        ...base,
        settings: {
          case: "http",
          value: {
            baseUrl: a.baseUrl,
            apiKey: a.apiKey,
            apiKeyEnv: a.apiKeyEnv,
            connectTimeoutMs: a.connectTimeoutMs,
            firstTokenTimeoutMs: a.firstTokenTimeoutMs,
            idleTimeoutMs: a.idleTimeoutMs,
            models: a.models,
          },
        },
      });
  }
}
