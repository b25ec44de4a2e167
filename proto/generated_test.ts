import assert from "node:assert/strict";

const root = new URL("..", import.meta.url).pathname;
const bin = `${root}node_modules/.bin`;

async function listFiles(dir: string, prefix = ""): Promise<string[]> {
  const out: string[] = [];
  for await (const entry of Deno.readDir(dir)) {
    const rel = `${prefix}${entry.name}`;
    if (entry.isDirectory) out.push(...await listFiles(`${dir}/${entry.name}`, `${rel}/`));
    else out.push(rel);
  }
  return out.sort();
}

Deno.test("generated protobuf code in proto/gen matches the .proto files (run `deno task proto`)", async () => {
  const tmp = await Deno.makeTempDir();
  try {
    const result = await new Deno.Command(`${bin}/buf`, {
      args: ["generate", "-o", tmp],
      cwd: `${root}proto`,
      env: { PATH: `${bin}:${Deno.env.get("PATH") ?? ""}` },
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(result.code, 0, new TextDecoder().decode(result.stderr));
    const committed = await listFiles(`${root}proto/gen`);
    const fresh = await listFiles(`${tmp}/gen`);
    assert.deepEqual(committed, fresh, "proto/gen has missing or extra files");
    for (const file of fresh) {
      const want = await Deno.readTextFile(`${tmp}/gen/${file}`);
      const have = await Deno.readTextFile(`${root}proto/gen/${file}`);
      assert.ok(have === want, `proto/gen/${file} is stale: run \`deno task proto\` and commit it`);
    }
  } finally {
    await Deno.remove(tmp, { recursive: true });
  }
});
