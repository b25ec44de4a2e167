/**
 * Hands memory the process freed back to the operating system, now and then.
 *
 * glibc's malloc keeps what its arenas freed for reuse: after a burst of load, the buffers the
 * runtime's threads allocated for sockets, TLS records and HTTP bodies (native memory, outside
 * the V8 heap, which shrinks by itself once idle) stay counted in the RSS, tens of MiB above
 * what the process uses, until `malloc_trim` releases their free pages. A call takes from about
 * ten to some fifty milliseconds on a large heap, so it runs on a thread of its own (a
 * nonblocking FFI call), never on the event loop, once every {@linkcode TRIM_INTERVAL_MS}; on a
 * system without glibc (musl, macOS) there is nothing to call and nothing happens.
 * @module
 */

/** How often freed memory is handed back. */
export const TRIM_INTERVAL_MS = 30_000;

/** Releases the free pages of every malloc arena; resolves true when it released some. */
export type TrimMemory = () => Promise<boolean>;

/** `malloc_trim(0)` of glibc, or undefined where it cannot be loaded. */
export function openMallocTrim(): TrimMemory | undefined {
  if (Deno.build.os !== "linux") return undefined;
  let libc;
  try {
    libc = Deno.dlopen("libc.so.6", {
      malloc_trim: { parameters: ["usize"], result: "i32", nonblocking: true },
    });
  } catch {
    return undefined;
  }
  const { malloc_trim } = libc.symbols;
  return async () => await malloc_trim(0n) === 1;
}

/**
 * Trims every {@linkcode TRIM_INTERVAL_MS} on an unref'd timer (it never keeps the process
 * alive); returns how to stop. Without glibc it does nothing.
 */
export function startMemoryTrim(intervalMs = TRIM_INTERVAL_MS): () => void {
  const trim = openMallocTrim();
  if (!trim) return () => {};
  const id = setInterval(() => void trim(), intervalMs);
  Deno.unrefTimer(id);
  return () => clearInterval(id);
}
