import { adapterContract, specFor } from "./contract_case.ts";
import { createMockAdapter, mockAnswer } from "./mock.ts";

adapterContract("mock adapter", () => {
  const adapter = createMockAdapter("mock", {
    tokens: 5,
    tokenDelayMs: 1,
    startDelayMs: 0,
    failWith: "",
    failRetryable: false,
    embeddingDimensions: 8,
  });
  return Promise.resolve({
    adapter,
    okSpec: specFor({ adapter: "mock", target: "echo", prompt: "the quick brown fox" }),
    failSpec: specFor({
      adapter: "mock",
      target: "echo",
      metadata: { "mock.fail_with": "BACKEND_ERROR", "mock.fail_after": "1" },
    }),
    slowSpec: specFor({
      adapter: "mock",
      target: "echo",
      metadata: { "mock.tokens": "1000", "mock.token_delay_ms": "50" },
    }),
    expectedText: mockAnswer("the quick brown fox", 5),
    cleanup: () => Promise.resolve(),
  });
});
