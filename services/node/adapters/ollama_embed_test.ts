import assert from "node:assert/strict";
import {
  fakeEmbedding,
  OLLAMA_CONTEXT_EXCEEDED,
  startFakeOllama,
} from "../../../shared/testing/fake_ollama.ts";
import { recordingSink, specFor } from "./contract_case.ts";
import { never, rejectsWith, settingsFor } from "./http_adapter_cases.ts";
import { createOllamaAdapter } from "./ollama.ts";

Deno.test("ollama sends an embedding run to /api/embed with truncate and dimensions", async () => {
  await using fake = startFakeOllama({
    models: ["nomic-embed-text"],
    defaults: { embeddingDimensions: 768 },
  });
  const adapter = createOllamaAdapter("ollama", settingsFor(fake.url));
  const sink = recordingSink();
  await adapter.execute(
    specFor({
      target: "nomic-embed-text",
      embed: { inputs: ["a b", "c"], dimensions: 256, truncate: false },
    }),
    sink,
    { signal: never() },
  );
  assert.deepEqual(fake.requests[0]!.body, {
    model: "nomic-embed-text",
    input: ["a b", "c"],
    truncate: false,
    dimensions: 256,
  });
  assert.deepEqual(sink.embeddings.map((e) => [e.index, e.values.length]), [[0, 256], [1, 256]]);
});

Deno.test("ollama leaves truncation to the server by default, and truncate: false fails a long input", async () => {
  await using fake = startFakeOllama({ defaults: { contextTokens: 2 } });
  const adapter = createOllamaAdapter("ollama", settingsFor(fake.url));
  const sink = recordingSink();
  await adapter.execute(
    specFor({ target: "llama3.2", embed: { inputs: ["one two three"] } }),
    sink,
    { signal: never() },
  );
  assert.ok(!("truncate" in (fake.requests[0]!.body as object)));
  assert.deepEqual(sink.embeddings[0]!.values, fakeEmbedding("one two", 8));
  const err = await rejectsWith(
    adapter.execute(
      specFor({ target: "llama3.2", embed: { inputs: ["one two three"], truncate: false } }),
      recordingSink(),
      { signal: never() },
    ),
    "INVALID_ARGUMENT",
  );
  assert.equal(err.message, OLLAMA_CONTEXT_EXCEEDED);
});

Deno.test("ollama sends an embedding run's sampling as options, as for a chat", async () => {
  await using fake = startFakeOllama({ models: ["nomic-embed-text"] });
  const adapter = createOllamaAdapter("ollama", settingsFor(fake.url));
  const sink = recordingSink();
  await adapter.execute(
    specFor({
      target: "nomic-embed-text",
      embed: { inputs: ["a b"] },
      sampling: { temperature: 0, extra: { num_ctx: 8192, mirostat: 2 } },
    }),
    sink,
    { signal: never() },
  );
  // Extras outside Ollama's names are dropped (and logged) as for a chat.
  assert.deepEqual((fake.requests[0]!.body as { options: unknown }).options, {
    temperature: 0,
    num_ctx: 8192,
  });
  assert.equal(sink.embeddings.length, 1);
});
