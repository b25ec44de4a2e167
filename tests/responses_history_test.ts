/**
 * What a `previous_response_id` conversation brings along is refused as the conversation's: an
 * image of an earlier turn that the model now asked cannot take is a 400 naming
 * `previous_response_id`, not `input` (which the client did not send it in). Real Edge and Node
 * over TCP, the unmodified `openai` client.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { mockNode, startStack } from "./stack.ts";

const PNG_URL = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4" +
  "nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg==";

async function apiError(promise: Promise<unknown>): Promise<InstanceType<typeof OpenAI.APIError>> {
  const err = await promise.then(() => undefined, (e) => e);
  assert.ok(err instanceof OpenAI.APIError, `expected an API error, got ${err}`);
  return err;
}

Deno.test("an earlier turn's image the model cannot take is refused naming previous_response_id", async () => {
  await using edge = await startStack({
    http: true,
    tls: "off",
    config: {
      nodes: [mockNode("n1", {
        extraAdapters: [{ name: "sh", kind: "cli", profiles: [{ name: "echo", command: "echo" }] }],
      })],
      models: [
        {
          name: "eyes",
          route: "direct",
          adapter: "mock",
          target: "demo",
          capabilities: ["chat", "vision"],
        },
        // Declares vision, but a CLI profile cannot carry an image.
        {
          name: "shell",
          route: "direct",
          adapter: "sh",
          target: "echo",
          capabilities: ["chat", "vision"],
        },
      ],
    },
  });
  const oa = new OpenAI({ baseURL: `${edge.url}/v1`, apiKey: "none", maxRetries: 0 });
  const image = {
    role: "user" as const,
    content: [
      { type: "input_text" as const, text: "what is this?" },
      { type: "input_image" as const, image_url: PNG_URL, detail: "auto" as const },
    ],
  };
  const first = await oa.responses.create({ model: "eyes", input: [image] });
  const fromHistory = await apiError(oa.responses.create({
    model: "shell",
    instructions: "Be brief",
    input: "and now?",
    previous_response_id: first.id,
  }));
  assert.equal(fromHistory.status, 400);
  assert.equal(fromHistory.param, "previous_response_id");
  assert.match(fromHistory.message, /cli adapter, which cannot take images/);
  // The same image in this request's own input is the input's.
  const own = await apiError(oa.responses.create({ model: "shell", input: [image] }));
  assert.equal(own.param, "input");
});
