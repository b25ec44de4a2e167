import assert from "node:assert/strict";
import { loadNodeKey } from "./node_key.ts";

Deno.test("loadNodeKey() makes a key at the first start, readable by its owner only, and keeps it", async () => {
  const dir = await Deno.makeTempDir({ prefix: "iop_node_key_" });
  try {
    const path = `${dir}/node.key`;
    const key = await loadNodeKey(path);
    assert.match(key, /^[0-9a-f]{64}$/);
    assert.equal((await Deno.stat(path)).mode! & 0o777, 0o600);
    assert.equal(await loadNodeKey(path), key, "the next start reads the same key");
    const other = await loadNodeKey(`${dir}/other.key`);
    assert.notEqual(other, key);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("loadNodeKey() refuses a file it did not write instead of sending it", async () => {
  const dir = await Deno.makeTempDir({ prefix: "iop_node_key_" });
  try {
    const path = `${dir}/node.key`;
    await Deno.writeTextFile(path, "guessable\n");
    await assert.rejects(
      loadNodeKey(path),
      (err: unknown) =>
        err instanceof TypeError &&
        err.message.startsWith(`Cannot use the node key in '${path}' as it is not one this node`),
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
