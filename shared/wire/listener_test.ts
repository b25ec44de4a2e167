import assert from "node:assert/strict";
import { createLogger } from "../log.ts";
import { listenFrames } from "./listener.ts";

const quiet = createLogger("test", { level: "error" });

/** Resolves true when the server closed `conn` (a read ends) within `ms`, false otherwise. */
async function closedWithin(conn: Deno.Conn, ms: number): Promise<boolean> {
  const timer = new Promise<false>((r) => setTimeout(() => r(false), ms));
  const read = conn.read(new Uint8Array(16)).then((n) => n === null, () => true);
  const closed = await Promise.race([read, timer]);
  return closed;
}

Deno.test("connections beyond maxPending anonymous ones are closed at once; an admitted one frees its place", async () => {
  let crowded = 0;
  const admit: (() => void)[] = [];
  const release = Promise.withResolvers<void>();
  await using listener = await listenFrames({
    hostname: "127.0.0.1",
    port: 0,
    logger: quiet,
    maxPending: 2,
    onCrowded: () => crowded++,
    handle: async (_link, admitted) => {
      admit.push(admitted);
      await release.promise;
    },
  });
  const dial = () => Deno.connect({ hostname: "127.0.0.1", port: listener.port });
  const a = await dial();
  const b = await dial();
  while (admit.length < 2) await new Promise((r) => setTimeout(r, 5));
  const c = await dial();
  assert.equal(await closedWithin(c, 2_000), true, "the third anonymous connection is closed");
  assert.equal(crowded, 1);

  admit[0]!(); // a logged in: its place is free for another anonymous peer
  const d = await dial();
  while (admit.length < 3) await new Promise((r) => setTimeout(r, 5));
  assert.equal(crowded, 1);
  assert.equal(await closedWithin(a, 100), false, "admitted connections stay open");
  release.resolve();
  for (const conn of [a, b, c, d]) {
    try {
      conn.close();
    } catch {
      // Closed by the server already.
    }
  }
});
