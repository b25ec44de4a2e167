/**
 * The port through which the A2A task manager keeps tasks beyond the process: the SQLite
 * implementation lives in `store/a2a_task_store.ts`; tests may use the in-memory one here.
 * @module
 */
import type { A2aTask } from "./task_model.ts";

/** Durable task storage. */
export interface A2aTaskStore {
  /** Inserts or replaces a task. */
  put(task: A2aTask): void;
  /** Every stored task, oldest first. */
  loadAll(): A2aTask[];
  /** Deletes tasks whose status changed before `ms`; returns how many. */
  deleteUpdatedBefore(ms: number): number;
  close(): void;
}

/** A store that keeps nothing beyond the process (for tests and store-less setups). */
export function memoryTaskStore(): A2aTaskStore {
  const tasks = new Map<string, A2aTask>();
  return {
    put: (task) => void tasks.set(task.id, structuredClone(task)),
    loadAll: () => [...tasks.values()].map((t) => structuredClone(t)),
    deleteUpdatedBefore(ms) {
      let n = 0;
      for (const [id, t] of tasks) {
        if (t.status.timestampMs < ms) {
          tasks.delete(id);
          n++;
        }
      }
      return n;
    },
    close: () => tasks.clear(),
  };
}
