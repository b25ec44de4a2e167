/**
 * Opens the Edge's A2A task manager on its SQLite store (`a2a.store_path`) and marks tasks a
 * previous process left unfinished as failed. Used by `main.ts`.
 * @module
 */
import { dirname } from "node:path";
import type { Logger } from "../../../shared/log.ts";
import type { EdgeConfig } from "../config.ts";
import { openA2aTaskStore } from "../store/a2a_task_store.ts";
import { A2aTaskManager, type RunSubmitter } from "./task_manager.ts";

/** Opens the store, builds the manager and recovers stored tasks. */
export async function openA2aTasks(
  config: EdgeConfig,
  service: RunSubmitter,
  logger: Logger,
): Promise<A2aTaskManager> {
  const path = config.a2a.storePath;
  if (path !== ":memory:") await Deno.mkdir(dirname(path), { recursive: true });
  const tasks = new A2aTaskManager({
    service,
    store: openA2aTaskStore(path),
    logger,
    retentionMs: config.a2a.taskRetentionMs,
    maxTasks: config.a2a.maxTasks,
    maxTaskBytes: config.a2a.maxTaskBytes,
  });
  tasks.recover();
  return tasks;
}
