/**
 * The failover rule of a node with several Edge addresses (`edge_addresses.ts`), and the
 * failback watch against real TCP listeners.
 */
import assert from "node:assert/strict";
import { type ByteLink, dialLink } from "../../../shared/wire/link.ts";
import { freePort, until } from "../../../tests/util.ts";
import { EdgeAddresses, refusedOutright, watchFailback } from "./edge_addresses.ts";

/** Dials addresses until a round fails; returns the addresses dialled, in order. */
function dialsUntilBackoff(addresses: EdgeAddresses): string[] {
  const dialled: string[] = [];
  do dialled.push(addresses.current); while (!addresses.failed());
  return dialled;
}

Deno.test("the node dials in list order and backs off only after a whole round failed", () => {
  const addresses = new EdgeAddresses(["a:1", "b:2", "c:3"]);
  assert.equal(addresses.first, "a:1");
  assert.deepEqual(dialsUntilBackoff(addresses), ["a:1", "b:2", "c:3"]);
  // The round after the backoff begins where the last one did.
  assert.deepEqual(dialsUntilBackoff(addresses), ["a:1", "b:2", "c:3"]);
});

Deno.test("after a link loss the node tries the address it was on first, then the others", () => {
  const addresses = new EdgeAddresses(["a:1", "b:2", "c:3"]);
  assert.equal(addresses.failed(), false, "a:1 is down: b:2 at once");
  assert.equal(addresses.current, "b:2");
  assert.equal(addresses.onFirst, false);
  addresses.lost(); // registered with b:2, then lost it
  assert.deepEqual(dialsUntilBackoff(addresses), ["b:2", "c:3", "a:1"]);
  assert.equal(addresses.current, "b:2");
});

Deno.test("a failback returns to the first address and starts a round there", () => {
  const addresses = new EdgeAddresses(["a:1", "b:2"]);
  addresses.failed();
  addresses.lost();
  addresses.backToFirst();
  assert.equal(addresses.onFirst, true);
  assert.deepEqual(dialsUntilBackoff(addresses), ["a:1", "b:2"]);
});

Deno.test("one address backs off after every failed dial, as a node with edge.address does", () => {
  const addresses = new EdgeAddresses("a:1");
  assert.deepEqual(addresses.all, ["a:1"]);
  assert.equal(addresses.failed(), true);
  addresses.lost();
  assert.equal(addresses.failed(), true);
  assert.equal(addresses.current, "a:1");
  assert.throws(() => new EdgeAddresses([]), /no address/);
});

/** A TCP listener on a fixed loopback port that counts the connections it accepted. */
function listen(port = 0) {
  const listener = Deno.listen({ hostname: "127.0.0.1", port });
  let accepted = 0;
  const conns: Deno.Conn[] = [];
  void (async () => {
    for await (const conn of listener) {
      accepted++;
      conns.push(conn);
    }
  })().catch(() => {});
  return {
    address: `127.0.0.1:${listener.addr.port}`,
    port: listener.addr.port,
    get accepted() {
      return accepted;
    },
    close() {
      listener.close();
      for (const c of conns) c.close();
    },
  };
}

Deno.test("the failback watch hands over a link once the first address accepts", async () => {
  const first = listen();
  const back = Promise.withResolvers<ByteLink>();
  const stop = watchFailback({
    address: first.address,
    intervalMs: 20,
    dial: (address) => dialLink({ address }),
    mayFailBack: () => true,
    onBack: back.resolve,
  });
  try {
    const link = await back.promise;
    assert.equal(first.accepted, 1, "one connection: the one handed over");
    // The handed-over link is open: the listener's side sees bytes written on it.
    await link.write(new Uint8Array([1]));
    link.close();
  } finally {
    stop();
    first.close();
  }
});

Deno.test("the failback watch keeps checking while the first address is down", async () => {
  // A port that was free a moment ago: nothing accepts there until the listener opens.
  const probe = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = probe.addr.port;
  probe.close();
  let failedDials = 0;
  const back = Promise.withResolvers<ByteLink>();
  const stop = watchFailback({
    address: `127.0.0.1:${port}`,
    intervalMs: 10,
    dial: (address) => dialLink({ address }).catch((err) => (failedDials++, Promise.reject(err))),
    mayFailBack: () => true,
    onBack: back.resolve,
  });
  let first: ReturnType<typeof listen> | undefined;
  try {
    await until("three failed checks", () => failedDials >= 3, 10_000, 10);
    first = listen(port);
    (await back.promise).close();
    assert.ok(failedDials >= 3);
  } finally {
    stop();
    first?.close();
  }
});

Deno.test("the failback watch does not dial while the node may not switch (a run in flight)", async () => {
  const first = listen();
  let asked = 0;
  let busy = true;
  const back = Promise.withResolvers<ByteLink>();
  const stop = watchFailback({
    address: first.address,
    intervalMs: 10,
    dial: (address) => dialLink({ address }),
    mayFailBack: () => (asked++, !busy),
    onBack: back.resolve,
  });
  try {
    await until("five checks", () => asked >= 5, 10_000, 10);
    assert.equal(first.accepted, 0, "no check dialled the first address while busy");
    busy = false; // the run ended
    (await back.promise).close();
    assert.equal(first.accepted, 1);
  } finally {
    stop();
    first.close();
  }
});

Deno.test("a stopped failback watch hands nothing over", async () => {
  const first = listen();
  let onBack = 0;
  let asked = 0;
  const stop = watchFailback({
    address: first.address,
    intervalMs: 10,
    dial: (address) => dialLink({ address }),
    // The node's link ends while the check is under way: the watch is stopped.
    mayFailBack: () => {
      if (++asked === 2) stop();
      return true;
    },
    onBack: () => onBack++,
  });
  try {
    await until("the check's dial", () => first.accepted >= 1, 10_000, 10);
    assert.equal(onBack, 0);
  } finally {
    stop();
    first.close();
  }
});

/** The error `dial` fails with. */
async function dialError(dial: () => Promise<ByteLink>): Promise<unknown> {
  try {
    (await dial()).close();
  } catch (err) {
    return err;
  }
  throw new Error("the dial succeeded");
}

Deno.test("a closed port refuses a dial outright, plain or TLS: no Edge listens there", async () => {
  const address = `127.0.0.1:${freePort()}`;
  const plain = await dialError(() => dialLink({ address }));
  assert.ok(plain instanceof Deno.errors.ConnectionRefused);
  assert.equal(refusedOutright(plain), true);
  // node:tls reports it by code, under the error that names the address.
  const tls = await dialError(() => dialLink({ address, tls: { ca: "", serverName: "" } }));
  assert.match(String(tls), /ECONNREFUSED/);
  assert.equal(refusedOutright(tls), true);
});

Deno.test("a listener that accepts and never answers is no refusal: the Edge may only be slow", async () => {
  const silent = listen();
  try {
    const timedOut = await dialError(() =>
      dialLink({ address: silent.address, tls: { ca: "", serverName: "" }, timeoutMs: 100 })
    );
    assert.match(String(timedOut), /TLS handshake with .* took over 100 ms/);
    await until("the connection to be accepted", () => silent.accepted === 1);
    assert.equal(refusedOutright(timedOut), false);
    assert.equal(refusedOutright(new Error("socket closed")), false);
    assert.equal(refusedOutright(undefined), false);
  } finally {
    silent.close();
  }
});
