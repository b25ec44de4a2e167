/**
 * `malloc_trim` hands freed native memory back: a real Deno subprocess fills 64 MiB of buffers,
 * drops them (but the last, so the freed memory is not at the top of the heap, which malloc
 * releases by itself), collects them, and its RSS falls only once it trims.
 */
import assert from "node:assert/strict";

const SCRIPT = `
import { openMallocTrim } from ${JSON.stringify(new URL("./memory_trim.ts", import.meta.url).href)};
const trim = openMallocTrim();
let buffers = [];
for (let i = 0; i < 4096; i++) buffers.push(new Uint8Array(16 * 1024).fill(1));
const last = new Uint8Array(16 * 1024).fill(2);
buffers = undefined;
globalThis.gc();
await new Promise((resolve) => setTimeout(resolve, 100));
const before = Deno.memoryUsage().rss;
const trimmed = (await trim?.()) ?? false;
const after = Deno.memoryUsage().rss;
console.log(JSON.stringify({ trimmed, before, after, last: last[0] }));
`;

Deno.test({
  name: "a trim hands the memory a burst freed back to the OS",
  ignore: Deno.build.os !== "linux",
  fn: async () => {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["eval", "--v8-flags=--expose-gc", SCRIPT],
      stdout: "piped",
      stderr: "inherit",
    }).output();
    assert.ok(out.success);
    const { trimmed, before, after } = JSON.parse(new TextDecoder().decode(out.stdout));
    assert.equal(trimmed, true);
    const freedMiB = (before - after) / 2 ** 20;
    assert.ok(freedMiB > 32, `RSS went from ${before} to ${after} bytes`);
  },
});
