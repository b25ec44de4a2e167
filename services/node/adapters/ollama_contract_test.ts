import { startFakeOllama } from "../../../shared/testing/fake_ollama.ts";
import { adapterContract, specFor } from "./contract_case.ts";
import { settingsFor } from "./http_adapter_cases.ts";
import { createOllamaAdapter } from "./ollama.ts";

adapterContract("ollama", () => {
  const fake = startFakeOllama({
    models: ["llama3.2", "slow"],
    defaults: { reply: "The answer is 42." },
    perModel: { slow: { tokens: 500, chunkDelayMs: 20 } },
  });
  const messages = [{ role: "user" as const, content: "What is the answer?" }];
  return Promise.resolve({
    adapter: createOllamaAdapter("ollama", settingsFor(fake.url)),
    okSpec: specFor({ adapter: "ollama", target: "llama3.2", messages }),
    failSpec: specFor({ adapter: "ollama", target: "not-pulled", messages }),
    slowSpec: specFor({ adapter: "ollama", target: "slow", messages }),
    expectedText: "The answer is 42.",
    cleanup: () => fake.close(),
  });
});
