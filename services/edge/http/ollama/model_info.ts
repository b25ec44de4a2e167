/**
 * What the Ollama surface says about one public model in `/api/tags`, `/api/show` and `/api/ps`:
 * its `details` (empty: the Edge does not see a backend's weights, so it invents no family, size
 * or quantization), a stable `digest` (of its name), and its Ollama-style `capabilities`, derived
 * from the model's declared `models[].capabilities` and what the adapter kinds serving it can do.
 * @module
 */
import { kindFeatures } from "../../../../shared/adapter_kinds/catalog.ts";
import type { EdgeConfig } from "../../config.ts";
import { kindsOf, modelFeatures } from "../capabilities.ts";
import type { ResolvedModel } from "../model_resolver.ts";

/** Ollama's `details` object of a model. */
export interface OllamaModelDetails {
  parent_model: string;
  format: string;
  family: string;
  families: string[] | null;
  parameter_size: string;
  quantization_level: string;
}

/** An Ollama capability name, as `/api/show` lists them. */
export type OllamaCapability = "completion" | "tools" | "vision" | "embedding";

/** The `details` of every model: unknown fields empty (`families` null, as Ollama sends none). */
export function modelDetails(): OllamaModelDetails {
  return {
    parent_model: "",
    format: "",
    family: "",
    families: null,
    parameter_size: "",
    quantization_level: "",
  };
}

/** A stable digest of a model: the hex SHA-256 of its public name. */
export async function digestOf(name: string): Promise<string> {
  const hash = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(name));
  return [...new Uint8Array(hash)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * The model's capabilities in Ollama's words, in Ollama's order: `completion` for a chat model,
 * `tools` when it chats and every adapter kind serving it takes tools, `vision` and `embedding`
 * when declared and every kind serving it can take images or embed.
 */
export function ollamaCapabilities(config: EdgeConfig, model: ResolvedModel): OllamaCapability[] {
  const does = modelFeatures(config, model).capabilities;
  const kinds = kindsOf(config, model);
  const out: OllamaCapability[] = [];
  if (does.includes("chat")) {
    out.push("completion");
    // Only when every kind serving it passes `tools` on (a CLI profile, the mock call none).
    if (kinds.length > 0 && kinds.every((k) => kindFeatures(k)?.tools === true)) {
      out.push("tools");
    }
  }
  if (does.includes("vision")) out.push("vision");
  if (does.includes("embeddings")) out.push("embedding");
  return out;
}
