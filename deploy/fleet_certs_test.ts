import assert from "node:assert/strict";
import tls from "node:tls";
import "reflect-metadata";
import * as x509 from "@peculiar/x509";
import type { AddressInfo } from "node:net";
import { IopError } from "../shared/errors.ts";
import {
  dropPreviousCa,
  ensureFleetCertificates,
  type FleetCertificates,
  listCaCertificates,
  listCertificates,
  rotateCa,
  type ServiceIdentity,
} from "./fleet_certs.ts";

const EDGE: ServiceIdentity = { role: "edge", id: "edge-a" };
const NODE: ServiceIdentity = { role: "node", id: "node-a1" };

async function tempDir(): Promise<AsyncDisposable & { path: string }> {
  const path = await Deno.makeTempDir({ prefix: "fleet_certs_test_" });
  return { path, [Symbol.asyncDispose]: () => Deno.remove(path, { recursive: true }) };
}

interface Party {
  cert: string;
  key: string;
  ca: string;
}

/** PEM texts of a service's certificate, key and the directory's trust bundle. */
async function party(certs: FleetCertificates, service: ServiceIdentity): Promise<Party> {
  return {
    cert: await Deno.readTextFile(certs.certFor(service.role, service.id)),
    key: await Deno.readTextFile(certs.keyFor(service.role, service.id)),
    ca: await Deno.readTextFile(certs.ca),
  };
}

interface Handshake {
  /** The server certificate as the client saw it. */
  serverCn?: string | undefined;
  serverSan?: string | undefined;
  /** The client certificate as the server saw it. */
  clientSan?: string | undefined;
  error?: string | undefined;
}

/** One mutual-TLS handshake over loopback between a server and a client, both closed after. */
async function handshake(server: Party, client: Party): Promise<Handshake> {
  const seen = Promise.withResolvers<string | undefined>();
  const listener = tls.createServer({
    cert: server.cert,
    key: server.key,
    ca: server.ca,
    requestCert: true,
    rejectUnauthorized: true,
  }, (socket) => {
    seen.resolve(socket.getPeerCertificate().subjectaltname);
    socket.end();
  });
  listener.on("tlsClientError", () => seen.resolve(undefined));
  const listening = Promise.withResolvers<void>();
  listener.listen(0, "127.0.0.1", () => listening.resolve());
  await listening.promise;
  const { port } = listener.address() as AddressInfo;
  const socket = tls.connect({
    host: "127.0.0.1",
    port,
    servername: "localhost",
    ca: client.ca,
    cert: client.cert,
    key: client.key,
  });
  try {
    const result = await new Promise<Handshake>((resolve) => {
      socket.once("secureConnect", () => {
        const peer = socket.getPeerCertificate();
        resolve({ serverCn: String(peer.subject.CN), serverSan: peer.subjectaltname });
      });
      socket.once("error", (err) => resolve({ error: err.message }));
    });
    if (result.error) return result;
    return { ...result, clientSan: await seen.promise };
  } finally {
    const closed = Promise.withResolvers<void>();
    socket.once("close", () => closed.resolve());
    socket.destroy();
    if (!socket.destroyed || socket.readyState !== "closed") await closed.promise;
    const stopped = Promise.withResolvers<void>();
    listener.close(() => stopped.resolve());
    await stopped.promise;
  }
}

async function snapshot(dir: string): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for await (const entry of Deno.readDir(dir)) {
    out.set(entry.name, await Deno.readTextFile(`${dir}/${entry.name}`));
  }
  return out;
}

Deno.test("a client trusting only ca.pem completes mutual TLS with the edge and sees its names", async () => {
  await using dir = await tempDir();
  const certs = await ensureFleetCertificates(dir.path, [EDGE, NODE]);
  const seen = await handshake(await party(certs, EDGE), await party(certs, NODE));
  assert.deepEqual(seen.error, undefined);
  assert.deepEqual(seen.serverCn, "edge-a");
  assert.ok(seen.serverSan?.includes("URI:iop://edge/edge-a"), seen.serverSan);
  assert.ok(seen.serverSan?.includes("DNS:localhost"), seen.serverSan);
  assert.ok(seen.clientSan?.includes("URI:iop://node/node-a1"), seen.clientSan);
  assert.ok(seen.clientSan?.includes("DNS:node-a1"), seen.clientSan);
});

Deno.test("a client trusting one fleet's CA refuses a server of an independent CA", async () => {
  await using first = await tempDir();
  await using second = await tempDir();
  const ours = await ensureFleetCertificates(first.path, [NODE]);
  const theirs = await ensureFleetCertificates(second.path, [EDGE]);
  const seen = await handshake(await party(theirs, EDGE), await party(ours, NODE));
  assert.ok(seen.error, "the handshake must fail");
  assert.deepEqual(seen.serverCn, undefined);
});

Deno.test("ensureFleetCertificates() run twice leaves every file byte for byte as it was", async () => {
  await using dir = await tempDir();
  await ensureFleetCertificates(dir.path, [EDGE, NODE]);
  const before = await snapshot(dir.path);
  const lines: string[] = [];
  await ensureFleetCertificates(dir.path, [EDGE, NODE], { log: (line) => lines.push(line) });
  assert.deepEqual(await snapshot(dir.path), before);
  assert.deepEqual(lines.filter((line) => line.startsWith("kept")).length, 2, lines.join("\n"));
  assert.deepEqual(
    [...before.keys()].sort(),
    [
      "ca-key.pem",
      "ca.pem",
      "edge-edge-a-key.pem",
      "edge-edge-a.pem",
      "node-node-a1-key.pem",
      "node-node-a1.pem",
    ],
  );
});

Deno.test("ensureFleetCertificates() re-issues only the leaf whose hosts changed", async () => {
  await using dir = await tempDir();
  await ensureFleetCertificates(dir.path, [EDGE, NODE]);
  const before = await snapshot(dir.path);
  const moved = { ...EDGE, hosts: ["edge-a.example.com", "10.0.0.5"] };
  await ensureFleetCertificates(dir.path, [moved, NODE]);
  const after = await snapshot(dir.path);
  assert.notEqual(after.get("edge-edge-a.pem"), before.get("edge-edge-a.pem"));
  for (const name of ["ca.pem", "ca-key.pem", "node-node-a1.pem", "node-node-a1-key.pem"]) {
    assert.deepEqual(after.get(name), before.get(name), name);
  }
  const [edge] = (await listCertificates(dir.path)).filter((c) => c.role === "edge");
  assert.deepEqual(edge?.sans, ["URI:iop://edge/edge-a", "DNS:edge-a.example.com", "IP:10.0.0.5"]);
});

Deno.test("ensureFleetCertificates() renews a leaf that expires within 30 days", async () => {
  await using dir = await tempDir();
  await ensureFleetCertificates(dir.path, [NODE], { days: 10 });
  const lines: string[] = [];
  await ensureFleetCertificates(dir.path, [NODE], { log: (line) => lines.push(line) });
  const [node] = await listCertificates(dir.path);
  assert.deepEqual(node?.daysLeft, 397);
  assert.ok(lines.some((line) => line.includes("expires in 10 days")), lines.join("\n"));
});

Deno.test("ensureFleetCertificates() keeps a short-lived leaf until half its life has passed", async () => {
  await using dir = await tempDir();
  await ensureFleetCertificates(dir.path, [NODE], { days: 10 });
  const before = await snapshot(dir.path);
  await ensureFleetCertificates(dir.path, [NODE], { days: 10 });
  assert.deepEqual(await snapshot(dir.path), before);
});

Deno.test("ensureFleetCertificates() writes keys 0600 in a 0700 directory", {
  ignore: Deno.build.os === "windows",
}, async () => {
  await using dir = await tempDir();
  const certs = await ensureFleetCertificates(`${dir.path}/certs`, [EDGE]);
  assert.deepEqual((await Deno.stat(certs.dir)).mode! & 0o777, 0o700);
  assert.deepEqual((await Deno.stat(`${certs.dir}/ca-key.pem`)).mode! & 0o777, 0o600);
  assert.deepEqual((await Deno.stat(certs.keyFor("edge", "edge-a"))).mode! & 0o777, 0o600);
  assert.deepEqual((await Deno.stat(certs.certFor("edge", "edge-a"))).mode! & 0o777, 0o644);
});

Deno.test("ensureFleetCertificates() rejects a bad id with INVALID_ARGUMENT before writing", async () => {
  await using dir = await tempDir();
  await assert.rejects(
    ensureFleetCertificates(`${dir.path}/certs`, [{ role: "node", id: "node 1" }]),
    (err: unknown) =>
      err instanceof IopError && err.code === "INVALID_ARGUMENT" &&
      err.message.startsWith("Cannot issue a certificate for node 'node 1' as an id must be"),
  );
  await assert.rejects(Deno.stat(`${dir.path}/certs`), Deno.errors.NotFound);
});

Deno.test("rotateCa() keeps old and new leaves trusted until dropPreviousCa()", async () => {
  await using dir = await tempDir();
  const certs = await ensureFleetCertificates(dir.path, [EDGE, NODE]);
  const oldEdge = await party(certs, EDGE);
  await rotateCa(dir.path);
  const newEdge = await party(certs, EDGE);
  const newNode = await party(certs, NODE);
  assert.notEqual(newEdge.cert, oldEdge.cert);
  assert.deepEqual((await listCaCertificates(dir.path)).map((ca) => ca.status), [
    "current",
    "previous",
  ]);
  assert.deepEqual(
    (await Deno.readTextFile(`${dir.path}/ca-previous.pem`)).trim(),
    oldEdge.ca.trim(),
  );

  // A server still on its old-CA certificate and one already on the new CA both pass.
  const onOld = await handshake({ ...oldEdge, ca: newNode.ca }, newNode);
  assert.deepEqual(onOld.error, undefined);
  const onNew = await handshake(newEdge, newNode);
  assert.deepEqual(onNew.error, undefined);
  assert.deepEqual(onNew.serverCn, "edge-a");

  // An old-CA leaf put back into the directory blocks the drop.
  await Deno.writeTextFile(certs.certFor("edge", "edge-a"), oldEdge.cert);
  await Deno.writeTextFile(certs.keyFor("edge", "edge-a"), oldEdge.key);
  assert.deepEqual(
    (await listCertificates(dir.path)).map((c) => [c.file, c.issuer]),
    [["edge-edge-a.pem", "previous"], ["node-node-a1.pem", "current"]],
  );
  await assert.rejects(
    dropPreviousCa(dir.path),
    (err: unknown) =>
      err instanceof IopError && err.code === "INVALID_ARGUMENT" &&
      /^Cannot drop the previous CA as 1 certificate\(s\) .* edge-edge-a\.pem;/.test(err.message),
  );

  await ensureFleetCertificates(dir.path, [EDGE, NODE]);
  await dropPreviousCa(dir.path);
  assert.deepEqual((await listCaCertificates(dir.path)).map((ca) => ca.status), ["current"]);
  await assert.rejects(Deno.stat(`${dir.path}/ca-previous.pem`), Deno.errors.NotFound);
  const dropped = await party(certs, NODE);
  assert.deepEqual((await handshake(await party(certs, EDGE), dropped)).error, undefined);
  assert.ok((await handshake({ ...oldEdge, ca: dropped.ca }, dropped)).error);
});

Deno.test("rotateCa() refuses while the previous rotation is under way", async () => {
  await using dir = await tempDir();
  await ensureFleetCertificates(dir.path, [NODE]);
  await rotateCa(dir.path);
  await assert.rejects(
    rotateCa(dir.path),
    (err: unknown) => err instanceof IopError && /as a rotation is under way/.test(err.message),
  );
});

Deno.test("ensureFleetCertificates() completes a CA creation interrupted before the key's rename", async () => {
  await using dir = await tempDir();
  await ensureFleetCertificates(dir.path, []);
  const before = await snapshot(dir.path);
  await Deno.rename(`${dir.path}/ca-key.pem`, `${dir.path}/.ca-key.pem.next`);
  const lines: string[] = [];
  await ensureFleetCertificates(dir.path, [], { log: (line) => lines.push(line) });
  assert.deepEqual(await snapshot(dir.path), before);
  assert.ok(lines.some((line) => line.startsWith("repaired")), lines.join("\n"));
});

async function certsCli(
  ...args: string[]
): Promise<{ code: number; stdout: string; stderr: string }> {
  const cli = new URL("./certs.ts", import.meta.url).pathname;
  const config = new URL("../deno.json", import.meta.url).pathname;
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--config", config, cli, ...args],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder();
  return { code: out.code, stdout: text.decode(out.stdout), stderr: text.decode(out.stderr) };
}

Deno.test("deno task certs issues repeatable --edge/--node/--cp flags with their hosts", async () => {
  await using dir = await tempDir();
  const args = [
    "--dir",
    dir.path,
    "--edge",
    "edge-a",
    "--edge",
    "edge-b=edge-b.example.com,10.0.0.5",
  ];
  const run = await certsCli(...args, "--node", "node-a1", "--cp", "cp");
  assert.equal(run.code, 0, run.stderr);
  assert.match(
    run.stdout,
    /^issued {3}edge-edge-b\.pem: .*DNS:edge-b\.example\.com, IP:10\.0\.0\.5/m,
  );
  const listed = (await listCertificates(dir.path)).map((c) => `${c.file} ${c.sans.join(" ")}`);
  assert.deepEqual(listed, [
    "cp-cp.pem URI:iop://cp/cp DNS:cp DNS:localhost IP:127.0.0.1",
    "edge-edge-a.pem URI:iop://edge/edge-a DNS:edge-a DNS:localhost IP:127.0.0.1",
    "edge-edge-b.pem URI:iop://edge/edge-b DNS:edge-b.example.com IP:10.0.0.5",
    "node-node-a1.pem URI:iop://node/node-a1 DNS:node-a1",
  ]);
  const again = await certsCli(...args, "--node", "node-a1", "--cp", "cp");
  assert.equal(again.stdout.match(/^kept/gm)?.length, 4, again.stdout);
});

Deno.test("deno task certs exits 2 on an unknown flag or a bad id, writing nothing", async () => {
  await using dir = await tempDir();
  const unknown = await certsCli("--dir", `${dir.path}/certs`, "--bogus");
  assert.equal(unknown.code, 2);
  assert.match(unknown.stderr, /Unknown option '--bogus'/);
  const badId = await certsCli("--dir", `${dir.path}/certs`, "--node", "node/1");
  assert.equal(badId.code, 2);
  assert.match(badId.stderr, /node 'node\/1' as an id must be non-empty/);
  await assert.rejects(Deno.stat(`${dir.path}/certs`), Deno.errors.NotFound);
});

Deno.test("an enrollment certificate names only its rule and serves as a TLS client only", async () => {
  await using dir = await tempDir();
  const gpu: ServiceIdentity = { role: "enroll", id: "gpu" };
  const certs = await ensureFleetCertificates(dir.path, [EDGE, gpu]);
  const [info] = (await listCertificates(dir.path)).filter((c) => c.role === "enroll");
  assert.deepEqual([info?.file, info?.id, info?.sans], [
    "enroll-gpu.pem",
    "gpu",
    ["URI:iop://enroll/gpu"],
  ]);
  const cert = new x509.X509Certificate(await Deno.readTextFile(certs.certFor("enroll", "gpu")));
  const usage = cert.getExtension(x509.ExtendedKeyUsageExtension);
  assert.deepEqual([...usage?.usages ?? []], [x509.ExtendedKeyUsage.clientAuth]);
  // As a node's client certificate it completes mutual TLS with the edge, naming the rule.
  const seen = await handshake(await party(certs, EDGE), await party(certs, gpu));
  assert.deepEqual(seen.error, undefined);
  assert.deepEqual(seen.clientSan, "URI:iop://enroll/gpu");
  // Many hosts share it: it may name none.
  await assert.rejects(
    ensureFleetCertificates(dir.path, [{ ...gpu, hosts: ["gpu-1"] }]),
    (err: unknown) =>
      err instanceof IopError && err.code === "INVALID_ARGUMENT" &&
      /for enroll 'gpu' with hosts/.test(err.message),
  );
});

Deno.test("deno task certs --enroll issues a rule's certificate; a host for it is a usage error", async () => {
  await using dir = await tempDir();
  const run = await certsCli("--dir", dir.path, "--enroll", "gpu", "--enroll", "cpu");
  assert.equal(run.code, 0, run.stderr);
  assert.match(run.stdout, /^issued {3}enroll-gpu\.pem: missing; URI:iop:\/\/enroll\/gpu, until/m);
  assert.deepEqual((await listCertificates(dir.path)).map((c) => c.file), [
    "enroll-cpu.pem",
    "enroll-gpu.pem",
  ]);
  const withHost = await certsCli("--dir", dir.path, "--enroll", "gpu=gpu-1.lan");
  assert.equal(withHost.code, 2);
  assert.match(withHost.stderr, /certificate for enroll 'gpu' with hosts/);
});

Deno.test("an enrollment certificate is issued only for a name an Edge's enrollment rule may have", async () => {
  await using dir = await tempDir();
  for (const id of ["-gpu", ".gpu", "_gpu", "g".repeat(65)]) {
    await assert.rejects(
      ensureFleetCertificates(dir.path, [{ role: "enroll", id }]),
      (err: unknown) =>
        err instanceof IopError && err.code === "INVALID_ARGUMENT" &&
        err.message.startsWith(
          `Cannot issue a certificate for enroll '${id}' as an enrollment rule's name must be`,
        ),
      id,
    );
  }
  assert.deepEqual(await listCertificates(dir.path), []);
  // The longest name a rule may have is issued; node ids keep their own rule.
  await ensureFleetCertificates(dir.path, [
    { role: "enroll", id: "g".repeat(64) },
    { role: "node", id: "-n1" },
  ]);
  assert.deepEqual((await listCertificates(dir.path)).map((c) => c.file), [
    `enroll-${"g".repeat(64)}.pem`,
    "node--n1.pem",
  ]);
});
