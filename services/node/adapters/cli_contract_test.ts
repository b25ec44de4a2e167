import { createCliAdapter } from "./cli.ts";
import { adapterContract, specFor } from "./contract_case.ts";

const base = { resumeArgs: [], env: {}, cwd: "", timeoutMs: 0, description: "" };

adapterContract("cli adapter", () => {
  const adapter = createCliAdapter("cli", {
    profiles: [
      // The prompt arrives as "$1", never as shell text.
      {
        ...base,
        name: "echo",
        command: "sh",
        args: ["-c", 'printf "%s\\n" "$1"', "sh", "{prompt}"],
      },
      { ...base, name: "fail", command: "sh", args: ["-c", "echo boom >&2; exit 3"] },
      { ...base, name: "slow", command: "sh", args: ["-c", "echo started; sleep 30"] },
    ],
  });
  return Promise.resolve({
    adapter,
    okSpec: specFor({ adapter: "cli", target: "echo", prompt: "hello from the contract" }),
    failSpec: specFor({ adapter: "cli", target: "fail" }),
    slowSpec: specFor({ adapter: "cli", target: "slow" }),
    expectedText: "hello from the contract\n",
    cleanup: () => adapter.close?.() ?? Promise.resolve(),
  });
});
