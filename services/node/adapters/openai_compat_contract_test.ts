import { startFakeOpenAI } from "../../../shared/testing/fake_openai.ts";
import { adapterContract, specFor } from "./contract_case.ts";
import { settingsFor } from "./http_adapter_cases.ts";
import { createOpenAICompatAdapter } from "./openai_compat.ts";

adapterContract("openai_compat", () => {
  const fake = startFakeOpenAI({
    models: ["test-model", "slow"],
    defaults: { reply: "The answer is 42." },
    perModel: { slow: { tokens: 500, chunkDelayMs: 20 } },
  });
  const messages = [{ role: "user" as const, content: "What is the answer?" }];
  return Promise.resolve({
    adapter: createOpenAICompatAdapter("openai", settingsFor(fake.url)),
    okSpec: specFor({ adapter: "openai_compat", target: "test-model", messages }),
    failSpec: specFor({ adapter: "openai_compat", target: "unknown-model", messages }),
    slowSpec: specFor({ adapter: "openai_compat", target: "slow", messages }),
    expectedText: "The answer is 42.",
    cleanup: () => fake.close(),
  });
});
