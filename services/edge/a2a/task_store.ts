/**
 * The port through which the A2A task manager keeps tasks beyond the process: the SQLite
 * implementation lives in `store/a2a_task_store.ts`; tests may use the in-memory one here.
 * Deleting is by explicit ids or by age of *finished* tasks only: a store never drops a task
 * that is still running.
 * @module
 */
import { isTerminalState } from "./task_model.ts";
import type { A2aTask } from "./task_model.ts";

/** Durable task storage. */
export interface A2aTaskStore {
  /** Inserts or replaces a task; a task's `owner` is kept from its first put. */
  put(task: A2aTask): void;
  /** Every stored task, oldest first, each with its `owner`. */
  loadAll(): A2aTask[];
  /** Deletes finished (terminal) tasks whose status changed before `ms`; returns how many. */
  deleteFinishedBefore(ms: number): number;
  /** Deletes the tasks with these ids; returns how many were stored. */
  delete(ids: readonly string[]): number;
  close(): void;
}

/** A store that keeps nothing beyond the process (for tests and store-less setups). */
export function memoryTaskStore(): A2aTaskStore {
  const tasks = new Map<string, A2aTask>();
  return {
    put(task) {
      const owner = tasks.get(task.id)?.owner ?? task.owner;
      tasks.set(task.id, { ...structuredClone(task), owner });
    },
    loadAll: () => [...tasks.values()].map((t) => structuredClone(t)),
    deleteFinishedBefore(ms) {
      let n = 0;
      for (const [id, t] of tasks) {
        if (isTerminalState(t.status.state) && t.status.timestampMs < ms) {
          tasks.delete(id);
          n++;
        }
      }
      return n;
    },
    delete(ids) {
      let n = 0;
      for (const id of ids) if (tasks.delete(id)) n++;
      return n;
    },
    close: () => tasks.clear(),
  };
}
