/**
 * Guards the architecture by the imports each file may make; every rule says why it exists.
 */
import assert from "node:assert/strict";

const root = new URL("..", import.meta.url).pathname;

interface Rule {
  /** Files the rule applies to (path relative to the repo root). */
  applies: (file: string) => boolean;
  /** An import specifier (resolved to repo-relative when local) that breaks the rule. */
  forbids: (specifier: string, file: string) => boolean;
  why: string;
}

const underService = (svc: string) => (f: string) => f.startsWith(`services/${svc}/`);
const otherTier = (svc: string) => (s: string) =>
  /^services\/(edge|node|cp)\//.test(s) && !s.startsWith(`services/${svc}/`);

const RULES: Rule[] = [
  {
    applies: (f) => f.startsWith("shared/"),
    forbids: (s) => s.startsWith("services/"),
    why: "shared/ sits below every service and must not depend on one",
  },
  ...["edge", "node", "cp"].map((svc): Rule => ({
    applies: underService(svc),
    forbids: otherTier(svc),
    why: `services/${svc} talks to other tiers only over the wire; cross-tier tests live in tests/`,
  })),
  {
    applies: (f) => f.startsWith("services/") && !/\/store\//.test(f),
    forbids: (s) => s === "node:sqlite",
    why: "persistence stays in the store/ ring of each service",
  },
  {
    applies: (f) => f.startsWith("services/") && !/\/http\//.test(f) && !f.endsWith("/main.ts"),
    forbids: (s) => s === "hono" || s.startsWith("hono/"),
    why: "only the http/ ring knows the web framework; cores stay surface-neutral",
  },
  {
    applies: (f) => /^services\/(node\/adapters|edge\/(http|a2a|pools|console))\//.test(f),
    forbids: (s) => s.startsWith("proto/gen/"),
    why: "only transports convert between wire messages and domain types",
  },
  {
    applies: (f) => f.startsWith("services/edge/http/"),
    forbids: (s) => s.startsWith("services/edge/pools/"),
    why: "surfaces reach the pools only through the service layer; shared errors live in shared/",
  },
  {
    applies: (f) => /^services\/edge\/(http|console)\//.test(f) && !f.endsWith("_test.ts"),
    forbids: (s) => s === "services/edge/service.ts",
    why: "surfaces and the console are typed against their ports (RunGateway, OpsGateway)",
  },
  {
    applies: () => true,
    forbids: (s) => /^(npm:)?(@grpc\/|grpc|ws$|socket\.io)/.test(s),
    why: "gRPC and WebSocket libraries are forbidden as internal transports (SPEC §8)",
  },
];

async function* sourceFiles(dir: string): AsyncGenerator<string> {
  for await (const entry of Deno.readDir(`${root}${dir}`)) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory && entry.name !== "gen" && entry.name !== "node_modules") {
      yield* sourceFiles(path);
    } else if (entry.isFile && path.endsWith(".ts")) {
      yield path;
    }
  }
}

function normalize(specifier: string, file: string): string {
  if (!specifier.startsWith(".")) return specifier;
  const parts = file.split("/").slice(0, -1);
  for (const piece of specifier.split("/")) {
    if (piece === "..") parts.pop();
    else if (piece !== ".") parts.push(piece);
  }
  return parts.join("/");
}

const IMPORT =
  /(?:^|\n)\s*(?:import|export)[^"'`;]*?from\s*["']([^"']+)["']|import\(\s*["']([^"']+)["']\s*\)/g;

Deno.test("source files import only what their layer may (see each rule's reason)", async () => {
  const violations: string[] = [];
  for (const dir of ["shared", "services"]) {
    for await (const file of sourceFiles(dir)) {
      const text = await Deno.readTextFile(`${root}${file}`);
      for (const match of text.matchAll(IMPORT)) {
        const specifier = normalize(match[1] ?? match[2]!, file);
        for (const rule of RULES) {
          if (rule.applies(file) && rule.forbids(specifier, file)) {
            violations.push(`${file} imports ${specifier}: ${rule.why}`);
          }
        }
      }
    }
  }
  assert.deepEqual(violations, []);
});

Deno.test("the import rules catch a forbidden import", () => {
  const file = "services/edge/service.ts";
  const hits = RULES.filter((r) =>
    r.applies(file) && r.forbids(normalize("../node/node.ts", file), file)
  );
  assert.equal(hits.length, 1);
});
