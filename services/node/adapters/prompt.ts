/**
 * What a prompt-only backend (mock, CLI) answers when a run carries chat messages.
 * @module
 */
import type { ExecutionSpec } from "../ports.ts";

/** The prompt of a run: `spec.prompt`, or else the content of the last user message. */
export function effectivePrompt(spec: Pick<ExecutionSpec, "prompt" | "messages">): string {
  if (spec.prompt !== "") return spec.prompt;
  return spec.messages.findLast((m) => m.role === "user")?.content ?? "";
}
