/**
 * `deno task hash-secret`: prints the `sha256:<hex>` form of a secret, for the config keys that
 * accept one (`wire.edges[].credential` of the Control Plane; `nodes[].token` and
 * `http.api_keys` of an Edge). The secret is read from stdin so that it stays out of the shell
 * history:
 *
 *   deno task hash-secret                          # asks for it, without echo
 *   printf %s "$TOKEN" | deno task hash-secret     # or pipe it (one trailing newline is dropped)
 *   deno task hash-secret my-secret                # works, with a warning: it lands in history
 * @module
 */
import { hashSecret } from "../shared/secrets.ts";

async function readPiped(): Promise<string> {
  const text = await new Response(Deno.stdin.readable).text();
  return text.replace(/\r?\n$/, "");
}

/** Reads one line from the terminal without echoing it; Ctrl-C or Ctrl-D gives up. */
async function readHidden(): Promise<string | undefined> {
  await Deno.stderr.write(new TextEncoder().encode("Secret (not echoed): "));
  Deno.stdin.setRaw(true);
  const bytes: number[] = [];
  const buffer = new Uint8Array(64);
  try {
    while (true) {
      const n = await Deno.stdin.read(buffer);
      if (n === null) return undefined;
      for (const byte of buffer.subarray(0, n)) {
        if (byte === 0x03 || byte === 0x04) return undefined;
        if (byte === 0x0d || byte === 0x0a) return new TextDecoder().decode(Uint8Array.from(bytes));
        if (byte === 0x7f || byte === 0x08) bytes.pop();
        else bytes.push(byte);
      }
    }
  } finally {
    Deno.stdin.setRaw(false);
    await Deno.stderr.write(new TextEncoder().encode("\n"));
  }
}

async function readSecret(): Promise<string | undefined> {
  const [arg] = Deno.args;
  if (arg !== undefined) {
    console.error(
      "warning: a secret given as an argument stays in your shell history; " +
        'pipe it on stdin instead (printf %s "$SECRET" | deno task hash-secret)',
    );
    return arg;
  }
  return Deno.stdin.isTerminal() ? await readHidden() : await readPiped();
}

const secret = await readSecret();
if (secret === undefined) {
  console.error("hash-secret: no secret read");
  Deno.exit(130);
}
if (secret === "") {
  console.error("hash-secret: cannot hash an empty secret");
  Deno.exit(1);
}
console.log(hashSecret(secret));
