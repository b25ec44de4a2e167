/**
 * Every adapter kind this Node builds, by kind: the one factory table that `main.ts` and the
 * tests share. A new kind is its adapter module plus one line here.
 * @module
 */
import type { Logger } from "../../../shared/log.ts";
import type { AdapterConfig, HttpModelSettings } from "../ports.ts";
import type { AdapterMetrics } from "./adapter_metrics.ts";
import { cliAdapterFactory } from "./cli.ts";
import { mockAdapterFactory } from "./mock.ts";
import { createOllamaAdapter } from "./ollama.ts";
import { createOpenAICompatAdapter } from "./openai_compat.ts";
import type { AdapterFactories } from "./registry.ts";
import { createVllmAdapter } from "./vllm.ts";

/** Options of {@linkcode adapterCatalog}; each absent one means the adapter's own default. */
export interface CatalogOptions {
  /** Where the model adapters record time to first token, tokens and errors. */
  metrics?: AdapterMetrics;
  logger?: Logger;
  /** Where the CLI adapter records the process groups it starts (see `group_reaper.ts`). */
  cliStateDir?: string;
  /** The node's id, for `{node_id}` in CLI profile arguments. */
  nodeId?: string;
}

function httpSettings(c: AdapterConfig): HttpModelSettings {
  if (c.kind !== "ollama" && c.kind !== "vllm" && c.kind !== "openai_compat") {
    throw new TypeError(`adapter '${c.name}' of kind ${c.kind} is not an HTTP adapter`);
  }
  return c.settings;
}

/** The factories of every adapter kind. */
export function adapterCatalog(options: CatalogOptions = {}): AdapterFactories {
  const model = {
    ...(options.metrics ? { metrics: options.metrics } : {}),
    ...(options.logger ? { logger: options.logger } : {}),
  };
  return {
    mock: mockAdapterFactory,
    cli: (c) =>
      cliAdapterFactory(c, {
        ...(options.cliStateDir ? { stateDir: options.cliStateDir } : {}),
        ...(options.nodeId ? { nodeId: options.nodeId } : {}),
      }),
    ollama: (c) => createOllamaAdapter(c.name, httpSettings(c), model),
    vllm: (c) => createVllmAdapter(c.name, httpSettings(c), model),
    openai_compat: (c) => createOpenAICompatAdapter(c.name, httpSettings(c), model),
  };
}
