import assert from "node:assert/strict";
import { Http1Client, Http1Error, type Http1Response } from "./http1_client.ts";

/** A raw TCP server that answers each request on a connection with the next scripted reply. */
function rawServer(
  replies: (string | Uint8Array)[][],
  options: { closeAfterEach?: boolean } = {},
) {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const connections: number[] = [];
  const requests: string[] = [];
  let next = 0;
  const serving = (async () => {
    for await (const conn of listener) {
      connections.push((conn.remoteAddr as Deno.NetAddr).port);
      void (async () => {
        const buf = new Uint8Array(64 * 1024);
        try {
          while (true) {
            const n = await conn.read(buf);
            if (n === null) break;
            requests.push(new TextDecoder().decode(buf.subarray(0, n)));
            for (const piece of replies[next++ % replies.length]!) {
              await conn.write(typeof piece === "string" ? new TextEncoder().encode(piece) : piece);
              await new Promise((resolve) => setTimeout(resolve, 1));
            }
            if (options.closeAfterEach) break;
          }
        } catch {
          // The client went away.
        } finally {
          try {
            conn.close();
          } catch { /* closed */ }
        }
      })();
    }
  })();
  return {
    url: `http://127.0.0.1:${(listener.addr as Deno.NetAddr).port}/v1/x?y=1`,
    connections,
    requests,
    async [Symbol.asyncDispose]() {
      listener.close();
      await serving.catch(() => {});
    },
  };
}

async function body(res: Http1Response): Promise<string[]> {
  const pieces: string[] = [];
  while (await res.read((b) => pieces.push(new TextDecoder().decode(b)))) { /* on */ }
  return pieces;
}

const post = (client: Http1Client, url: string, signal = new AbortController().signal) =>
  client.post(url, { headers: { "content-type": "application/json" }, body: '{"a":"é"}', signal });

Deno.test("Http1Client sends the request line, host, headers and body length in bytes", async () => {
  await using server = rawServer([["HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"]]);
  const client = new Http1Client();
  const res = await post(client, server.url);
  assert.equal(await res.text(), "ok");
  client.close();
  const request = server.requests[0]!;
  assert.match(request, /^POST \/v1\/x\?y=1 HTTP\/1\.1\r\n/);
  assert.match(request, /\r\nhost: 127\.0\.0\.1:\d+\r\n/);
  assert.match(request, /\r\ncontent-type: application\/json\r\n/);
  assert.match(request, /\r\ncontent-length: 10\r\n\r\n\{"a":"é"\}$/);
});

Deno.test("Http1Client decodes chunked bodies cut at any byte and reuses the connection", async () => {
  const wire = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" +
    "5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nx-trailer: t\r\n\r\n";
  const bytes = new TextEncoder().encode(wire);
  const cuts = [1, 3, 7, bytes.length];
  await using server = rawServer(
    cuts.map((size) =>
      Array.from(
        { length: Math.ceil(bytes.length / size) },
        (_, i) => bytes.slice(i * size, (i + 1) * size),
      )
    ),
  );
  const client = new Http1Client();
  for (const size of cuts) {
    const res = await post(client, server.url);
    assert.equal(res.status, 200);
    assert.equal((await body(res)).join(""), "hello, world", `cut every ${size} bytes`);
  }
  client.close();
  assert.equal(server.connections.length, 1, "one kept-alive connection for every request");
});

Deno.test("Http1Client reads a body framed by the connection's end and does not reuse it", async () => {
  await using server = rawServer(
    [["HTTP/1.1 500 Boom\r\nconnection: close\r\n\r\n", "bad"]],
    {
      closeAfterEach: true,
    },
  );
  const client = new Http1Client();
  for (let i = 0; i < 2; i++) {
    const res = await post(client, server.url);
    assert.deepEqual([res.status, res.statusText, res.ok], [500, "Boom", false]);
    assert.equal(await res.text(), "bad");
  }
  client.close();
  assert.equal(server.connections.length, 2);
});

Deno.test("Http1Client sends again on a new connection when a kept-alive one was closed", async () => {
  await using server = rawServer([["HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n1"]], {
    closeAfterEach: true,
  });
  const client = new Http1Client();
  assert.equal(await (await post(client, server.url)).text(), "1");
  await new Promise((resolve) => setTimeout(resolve, 20)); // the server closes the idle one
  assert.equal(await (await post(client, server.url)).text(), "1");
  client.close();
  assert.equal(server.requests.length, 2, "the retried request reached the server once");
});

Deno.test("Http1Client: an abort mid-body closes the connection and rejects with its reason", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const serverSawEnd = (async () => {
    const conn = await listener.accept();
    const buf = new Uint8Array(4096);
    await conn.read(buf);
    await conn.write(new TextEncoder().encode("HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nab"));
    const n = await conn.read(buf).catch(() => null);
    conn.close();
    return n;
  })();
  const client = new Http1Client();
  const controller = new AbortController();
  const res = await post(
    client,
    `http://127.0.0.1:${(listener.addr as Deno.NetAddr).port}/`,
    controller.signal,
  );
  assert.equal(await res.read(() => {}), true);
  const reading = res.read(() => {});
  const reason = new DOMException("stop", "AbortError");
  controller.abort(reason);
  await assert.rejects(reading);
  assert.equal(await serverSawEnd, null, "the server sees the connection end");
  client.close();
  listener.close();
});

Deno.test("Http1Client refuses a malformed status line, content-length and a head over 64 KiB", async () => {
  await using server = rawServer([
    ["SMTP ready\r\n\r\n"],
    ["HTTP/1.1 200 OK\r\ncontent-length: 5, 7\r\n\r\nhello"],
    ["HTTP/1.1 200 OK\r\nx: " + "a".repeat(70 * 1024) + "\r\n\r\n"],
  ], { closeAfterEach: true });
  const client = new Http1Client();
  await assert.rejects(
    post(client, server.url),
    (e) => e instanceof Http1Error && /status line/.test(e.message),
  );
  await assert.rejects(
    post(client, server.url),
    (e) => e instanceof Http1Error && /malformed content-length '5, 7'/.test(e.message),
  );
  await assert.rejects(
    post(client, server.url),
    (e) => e instanceof Http1Error && /head/.test(e.message),
  );
  client.close();
});

Deno.test("Http1Client skips an interim 100 Continue and reads the real answer", async () => {
  await using server = rawServer([[
    "HTTP/1.1 100 Continue\r\n\r\n",
    "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
  ]]);
  const client = new Http1Client();
  const res = await post(client, server.url);
  assert.deepEqual([res.status, await res.text()], [200, "ok"]);
  client.close();
});

Deno.test("Http1Client speaks TLS to an https backend whose certificate it trusts", async () => {
  const dir = await Deno.makeTempDir({ prefix: "iop_tls_" });
  try {
    // A CA and a server certificate it signed (rustls refuses a CA used as the server's own).
    const openssl = async (...args: string[]) => {
      const run = await new Deno.Command("openssl", {
        args,
        cwd: dir,
        stdout: "null",
        stderr: "piped",
      })
        .output();
      assert.ok(run.success, new TextDecoder().decode(run.stderr));
    };
    const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    await openssl(
      "req",
      "-x509",
      ...ec,
      "-keyout",
      "ca.key",
      "-out",
      "ca.pem",
      "-days",
      "1",
      "-subj",
      "/CN=test-ca",
    );
    await openssl("req", ...ec, "-keyout", "key.pem", "-out", "leaf.csr", "-subj", "/CN=127.0.0.1");
    await Deno.writeTextFile(
      `${dir}/leaf.ext`,
      "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    );
    await openssl(
      "x509",
      "-req",
      "-in",
      "leaf.csr",
      "-CA",
      "ca.pem",
      "-CAkey",
      "ca.key",
      "-CAcreateserial",
      "-out",
      "cert.pem",
      "-days",
      "1",
      "-extfile",
      "leaf.ext",
    );
    const ca = await Deno.readTextFile(`${dir}/ca.pem`);
    const cert = await Deno.readTextFile(`${dir}/cert.pem`);
    const key = await Deno.readTextFile(`${dir}/key.pem`);
    await using server = Deno.serve(
      { hostname: "127.0.0.1", port: 0, cert, key, onListen() {} },
      async (req) => new Response(`secure ${await req.text()}`),
    );
    const url = `https://127.0.0.1:${server.addr.port}/v1/x`;
    const trusting = new Http1Client({ caCerts: [ca] });
    for (let i = 0; i < 2; i++) {
      assert.equal(await (await post(trusting, url)).text(), 'secure {"a":"é"}');
    }
    trusting.close();
    const stranger = new Http1Client();
    await assert.rejects(post(stranger, url), "a certificate outside the trusted roots is refused");
    stranger.close();
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
