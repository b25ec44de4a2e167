/**
 * Ollama's `POST /api/show`: the request (`model`, or the older `name`; `verbose`; `system` and
 * `template`, which Ollama echoes back as the model's would-be system prompt and template) and
 * the answer for one public model. The Edge knows no Modelfile, license, template or weights,
 * so those are empty and `model_info` is `{}`; `capabilities` say what the model does here.
 * @module
 */
import type { EdgeConfig } from "../../config.ts";
import type { JsonFields } from "../json_fields.ts";
import type { ResolvedModel } from "../model_resolver.ts";
import {
  modelDetails,
  ollamaCapabilities,
  type OllamaCapability,
  type OllamaModelDetails,
} from "./model_info.ts";

/** A parsed `/api/show` request. */
export interface ShowRequest {
  /** The model asked for, as the client named it. */
  model: string;
  /** A system prompt to show instead of the model's (Ollama's override). */
  system: string;
  /** A template to show instead of the model's (Ollama's older override). */
  template: string;
}

/** The `/api/show` answer. */
export interface ShowResponse {
  license: string;
  modelfile: string;
  parameters: string;
  template: string;
  system: string;
  details: OllamaModelDetails;
  model_info: Record<string, never>;
  capabilities: OllamaCapability[];
  modified_at: string;
}

const FIELDS = new Set(["model", "name", "verbose", "system", "template", "options"]);

/**
 * Reads an `/api/show` body. `verbose` only asks Ollama for the long arrays of `model_info`,
 * which is empty here, so any boolean is honoured; `options` would be merged into a Modelfile
 * the Edge does not have, so a non-empty one is refused, as is any other unknown field.
 */
export function parseShowRequest(body: JsonFields): ShowRequest {
  for (const key of Object.keys(body.value)) {
    if (!FIELDS.has(key)) {
      body.fail(key, `is not a field of /api/show; it takes ${[...FIELDS].join(", ")}`);
    }
  }
  const model = body.string("model") || undefined;
  const name = body.string("name") || undefined;
  if (model === undefined && name === undefined) body.fail("model", "is required");
  if (model !== undefined && name !== undefined && model !== name) {
    body.fail("name", `must name the same model as 'model' when both are given: got '${name}'`);
  }
  body.boolean("verbose");
  const options = body.object("options");
  if (options && Object.keys(options.value).length > 0) {
    body.fail(
      "options",
      "cannot be applied by /api/show: this Edge has no Modelfile to apply them to",
    );
  }
  return {
    model: (model ?? name)!,
    system: body.string("system") ?? "",
    template: body.string("template") ?? "",
  };
}

/** The `/api/show` answer for `model`, as the Edge serves it since `modifiedAt` (ISO 8601). */
export function showResponse(
  config: EdgeConfig,
  model: ResolvedModel,
  req: ShowRequest,
  modifiedAt: string,
): ShowResponse {
  return {
    license: "",
    modelfile: "",
    parameters: "",
    template: req.template,
    system: req.system,
    details: modelDetails(),
    model_info: {},
    capabilities: ollamaCapabilities(config, model),
    modified_at: modifiedAt,
  };
}
