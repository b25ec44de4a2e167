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
import { adapterKind } from "../../../shared/adapter_kinds/catalog.ts";
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
  });
}

function toAdapterConfig(a: NodeAdapterRecord): AdapterConfig {
  const { name, kind, enabled, ...settings } = a;
  const config = adapterKind(kind)!.toConfig(settings);
  return create(AdapterConfigSchema, { name, kind, enabled, settingsJson: JSON.stringify(config) });
}
