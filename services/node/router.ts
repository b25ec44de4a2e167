/**
 * Resolves a run request to the adapter that executes it and its ExecutionSpec.
 * @module
 */
import { IopError } from "../../shared/errors.ts";
import type { RunInput } from "../../shared/run.ts";
import type { Adapter, ExecutionSpec } from "./ports.ts";

/** Looks adapters up by instance name. */
export interface AdapterLookup {
  get(name: string): Adapter | undefined;
}

/** The adapter and spec of one run; throws NOT_FOUND for an adapter this node does not have. */
export function resolve(
  runId: string,
  input: RunInput,
  adapters: AdapterLookup,
): { adapter: Adapter; spec: ExecutionSpec } {
  const adapter = adapters.get(input.adapter);
  if (!adapter) {
    throw new IopError("NOT_FOUND", `Cannot run as this node has no adapter '${input.adapter}'`);
  }
  if (!input.target && adapter.kind !== "mock") {
    throw new IopError(
      "INVALID_ARGUMENT",
      `Cannot run adapter '${input.adapter}' without a target`,
    );
  }
  return { adapter, spec: { runId, ...input } };
}
