/**
 * ListTasks over the tasks a caller may see: filtering, ordering (most recently changed first)
 * and offset page tokens; and the choice of which finished tasks a full store drops first.
 * @module
 */
import type { ListParams, TaskPage } from "./dialect.ts";
import { invalidParams } from "./rpc_error.ts";
import { type A2aTask, isTerminalState, withHistory } from "./task_model.ts";

/** The page `p` asks for out of `visible` (the caller's tasks of one agent). */
export function pageOf(visible: readonly A2aTask[], p: ListParams): TaskPage {
  const matching = visible.filter((t) =>
    (p.contextId === "" || t.contextId === p.contextId) &&
    (p.state === undefined || t.status.state === p.state) &&
    (p.statusTimestampAfterMs === undefined || t.status.timestampMs > p.statusTimestampAfterMs)
  ).sort((a, b) => b.status.timestampMs - a.status.timestampMs || b.createdAtMs - a.createdAtMs);
  let offset = 0;
  if (p.pageToken !== "") {
    offset = Number.parseInt(p.pageToken, 10);
    if (!/^\d+$/.test(p.pageToken) || offset > matching.length) {
      throw invalidParams("params.pageToken", "is not a token this server issued");
    }
  }
  const page = matching.slice(offset, offset + p.pageSize).map((t) => {
    const out = withHistory(structuredClone(t), p.historyLength);
    if (!p.includeArtifacts) out.artifacts = [];
    return out;
  });
  const next = offset + page.length;
  return {
    tasks: page,
    nextPageToken: next < matching.length ? String(next) : "",
    pageSize: p.pageSize,
    totalSize: matching.length,
  };
}

/** Ids of up to `count` finished tasks, least recently changed first; never a running one. */
export function oldestFinished(tasks: Iterable<A2aTask>, count: number): string[] {
  if (count <= 0) return [];
  return [...tasks].filter((t) => isTerminalState(t.status.state))
    .sort((a, b) => a.status.timestampMs - b.status.timestampMs || a.createdAtMs - b.createdAtMs)
    .slice(0, count)
    .map((t) => t.id);
}
