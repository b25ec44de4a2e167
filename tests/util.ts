/**
 * Small helpers of the multi-process and cross-tier suites.
 * @module
 */

/** A TCP port on 127.0.0.1 that was free a moment ago (bound, then released). */
export function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

/**
 * Polls `check` until it returns something other than undefined or false (state of another
 * process raises no event to await); fails after `timeoutMs` naming what was awaited and the
 * last error seen.
 */
export async function until<T>(
  what: string,
  check: () => T | undefined | false | Promise<T | undefined | false>,
  timeoutMs = 10_000,
  everyMs = 25,
): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  let last = "";
  while (true) {
    try {
      const value = await check();
      if (value !== undefined && value !== false) return value;
    } catch (err) {
      last = `: ${err instanceof Error ? err.message : String(err)}`;
    }
    if (performance.now() > deadline) {
      throw new Error(`Timed out after ${timeoutMs} ms waiting for ${what}${last}`);
    }
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}

/** Text written so far (a process's output, a console's screen), with a way to await more. */
export class TextLog {
  text = "";
  readonly #waiters = new Set<() => void>();

  /** Adds text and wakes the waiters; bound, so it can be handed out as a writer. */
  readonly append = (chunk: string): void => {
    this.text += chunk;
    for (const wake of this.#waiters) wake();
  };

  /** Resolves with the first match of `pattern` at or after `from`; rejects after `ms`. */
  waitFor(pattern: RegExp, ms = 10_000, from = 0): Promise<RegExpMatchArray> {
    return new Promise((resolve, reject) => {
      const check = () => {
        const m = this.text.slice(from).match(pattern);
        if (!m) return;
        this.#waiters.delete(check);
        clearTimeout(timer);
        resolve(m);
      };
      const timer = setTimeout(() => {
        this.#waiters.delete(check);
        reject(new Error(`timed out after ${ms} ms waiting for ${pattern} in:\n${this.text}`));
      }, ms);
      this.#waiters.add(check);
      check();
    });
  }

  /** Appends everything `stream` yields, as UTF-8 text, until it ends. */
  async readFrom(stream: ReadableStream<Uint8Array>): Promise<void> {
    for await (const text of stream.pipeThrough(new TextDecoderStream())) this.append(text);
  }

  /** Returns the text written since the last call and forgets it. */
  take(): string {
    const t = this.text;
    this.text = "";
    return t;
  }

  /** The JSON log lines written so far. */
  logLines(): Record<string, unknown>[] {
    return this.text.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l));
  }
}
