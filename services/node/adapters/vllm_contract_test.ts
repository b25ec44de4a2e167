import { startFakeOpenAI } from "../../../shared/testing/fake_openai.ts";
import { adapterContract, specFor } from "./contract_case.ts";
import { settingsFor } from "./http_adapter_cases.ts";
import { createVllmAdapter } from "./vllm.ts";

adapterContract("vllm", () => {
  const fake = startFakeOpenAI({
    flavor: "vllm",
    models: ["test-model", "slow"],
    defaults: { reply: "The answer is 42." },
    perModel: { slow: { tokens: 500, chunkDelayMs: 20 } },
  });
  const messages = [{ role: "user" as const, content: "What is the answer?" }];
  return Promise.resolve({
    adapter: createVllmAdapter("gpu-vllm", settingsFor(fake.url)),
    okSpec: specFor({ adapter: "vllm", target: "test-model", messages }),
    failSpec: specFor({ adapter: "vllm", target: "unknown-model", messages }),
    slowSpec: specFor({ adapter: "vllm", target: "slow", messages }),
    expectedText: "The answer is 42.",
    cleanup: () => fake.close(),
  });
});
