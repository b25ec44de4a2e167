/**
 * The relay benchmark's upstream in a process of its own, as a real model server would be:
 * starts the fake OpenAI-compatible server and prints its URL on the first line of stdout.
 * @module
 */
import { startFakeOpenAI } from "../shared/testing/fake_openai.ts";

const upstream = startFakeOpenAI({
  models: ["fast"],
  defaults: { reply: "Hello from the fast upstream" },
});
console.log(upstream.url);
Deno.addSignalListener("SIGTERM", async () => {
  await upstream.close();
  Deno.exit(0);
});
