/**
 * The Node's own secret, its node key: 32 random bytes (as hex) made at the first start and kept in a
 * file beside the run history (`<history dir>/node.key`, readable by its owner only), sent at
 * every registration (`RegisterRequest.node_key`). An Edge that enrolls the Node by a rule binds
 * the enrolled id to it, so that another holder of the rule's shared token cannot take the id
 * over while the Edge keeps its record. Losing the file means the Edge refuses the id until that
 * record goes (the rule's `retain_disconnected_ms` after the Node disconnected).
 * @module
 */
/** Reads the node key at `path`, or makes one there when the file does not exist. */
export async function loadNodeKey(path: string): Promise<string> {
  try {
    const stored = (await Deno.readTextFile(path)).trim();
    if (!/^[0-9a-f]{64}$/.test(stored)) {
      throw new TypeError(
        `Cannot use the node key in '${path}' as it is not one this node made: delete the file ` +
          `to make a new one (an Edge that enrolled this node then refuses its id until it ` +
          `forgets the old record)`,
      );
    }
    return stored;
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
  }
  const bytes = crypto.getRandomValues(new Uint8Array(32));
  const key = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  try {
    // createNew: two processes starting at once must not each write a key of their own.
    await Deno.writeTextFile(path, `${key}\n`, { createNew: true, mode: 0o600 });
  } catch (err) {
    if (err instanceof Deno.errors.AlreadyExists) return await loadNodeKey(path);
    throw err;
  }
  return key;
}
