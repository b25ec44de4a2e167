/**
 * Checks a run against what an adapter kind honours ({@linkcode KindFeatures}, listed per kind
 * in `catalog.ts`): the Edge refuses a request naming the first field its backend cannot honour,
 * before dispatch, and a Node's adapter refuses the same run as a backstop. Also maps a run's
 * `sampling.extra` onto the names one backend reads.
 * @module
 */
import type { RunInput } from "../run.ts";
import type { KindFeatures } from "./kind.ts";

/** A run field a kind cannot honour, and why. */
export interface Unhonoured {
  field:
    | "output_format"
    | "tools"
    | "tool_choice"
    | "parallel_tool_calls"
    | "tool_result"
    | "image"
    | "embed"
    | "truncate"
    | "sampling";
  /** The message's index, for `tool_result` and `image`. */
  index?: number;
  /** The part's index within that message, for `image`. */
  part?: number;
  /** What the kind cannot do, as the end of a sentence ("cannot constrain output to JSON"). */
  reason: string;
}

/** The fields of a run that {@linkcode unhonoured} reads. */
export type RunFeatures =
  & Pick<
    RunInput,
    "outputFormat" | "toolChoice" | "parallelToolCalls" | "messages" | "embed"
  >
  & Partial<Pick<RunInput, "tools" | "sampling">>;

/** The first field of `run` a kind with `features` cannot honour; undefined when all hold. */
export function unhonoured(features: KindFeatures, run: RunFeatures): Unhonoured | undefined {
  if (run.embed && !features.embeddings) return { field: "embed", reason: "cannot embed" };
  if (run.embed?.truncate && !features.embedTruncate) {
    return {
      field: "truncate",
      reason: "cannot cut an overlong input (its API has no such switch)",
    };
  }
  if (run.embed && !features.embedOptions) {
    const option = samplingOptionOf(run.sampling);
    if (option !== undefined) {
      return {
        field: "sampling",
        reason: `cannot pass the option '${option}' to its embeddings API (it has no such field)`,
      };
    }
  }
  if (run.tools?.length && !features.tools) return { field: "tools", reason: "calls no tools" };
  const image = unhonouredImage(features, run.messages);
  if (image) return image;
  const format = run.outputFormat;
  if (format && !features.outputFormats.includes(format.type)) {
    return {
      field: "output_format",
      reason: features.outputFormats.length === 0
        ? "cannot constrain output to JSON"
        : "cannot constrain output to a JSON schema",
    };
  }
  const choice = run.toolChoice;
  if (choice !== undefined) {
    const value = typeof choice === "string" ? choice : "function";
    if (!features.toolChoices.includes(value)) {
      return {
        field: "tool_choice",
        reason: value === "function"
          ? `cannot force a call of the function '${(choice as { function: string }).function}'`
          : value === "required"
          ? "cannot force a tool call"
          : `cannot honour tool_choice '${value}'`,
      };
    }
  }
  if (run.parallelToolCalls === false && !features.singleToolCall) {
    return { field: "parallel_tool_calls", reason: "cannot limit a turn to one tool call" };
  }
  if (features.toolResultsById) {
    const index = run.messages.findIndex((m) => m.role === "tool" && !m.toolCallId);
    if (index >= 0) {
      return {
        field: "tool_result",
        index,
        reason: "needs the id of the tool call each tool result answers, and no earlier " +
          "assistant tool call matches this one",
      };
    }
  }
  return undefined;
}

/** The first sampling option `sampling` sets, by its Ollama name; undefined when none is. */
function samplingOptionOf(sampling: RunFeatures["sampling"]): string | undefined {
  if (!sampling) return undefined;
  if (sampling.temperature !== undefined) return "temperature";
  if (sampling.topP !== undefined) return "top_p";
  if (sampling.maxTokens !== undefined) return "num_predict";
  if (sampling.stop?.length) return "stop";
  if (sampling.seed !== undefined) return "seed";
  return Object.keys(sampling.extra ?? {})[0];
}

/** The first image part of `messages` a kind with `features` cannot carry. */
function unhonouredImage(
  features: KindFeatures,
  messages: RunFeatures["messages"],
): Unhonoured | undefined {
  for (const [index, m] of messages.entries()) {
    const part = m.parts?.findIndex((p) =>
      p.type === "image" && (features.images === "none" ||
        (features.images === "data" && !p.url.startsWith("data:")))
    ) ?? -1;
    if (part < 0) continue;
    return {
      field: "image",
      index,
      part,
      reason: features.images === "none"
        ? "cannot take images"
        : "takes images as data: URLs (base64) only, not as links",
    };
  }
  return undefined;
}

/**
 * `extra` under the names a backend with `features` reads; keys it has no equivalent for are
 * returned in `dropped` (for the caller to log), never sent as they are.
 */
export function backendExtras(
  features: KindFeatures,
  extra: Record<string, unknown> | undefined,
): { extras: Record<string, unknown>; dropped: string[] } {
  const extras: Record<string, unknown> = {};
  const dropped: string[] = [];
  for (const [key, value] of Object.entries(extra ?? {})) {
    const name = Object.hasOwn(features.samplingExtras, key)
      ? features.samplingExtras[key]
      : undefined;
    if (name === undefined) dropped.push(key);
    else extras[name] = value;
  }
  return { extras, dropped };
}
