/**
 * Fills a CLI profile's argument template for one run, without letting a client's value become
 * an option of the command.
 *
 * The rule: `{prompt}` and `{session}` are the client's. When one is substituted at the start of
 * an argument (the whole argument, as in `["-p", "{prompt}"]`, or its head, as in `{prompt}.md`)
 * and the filled argument starts with `-`, the command would read it as an option (`--version`,
 * `-rf`, `--output=/etc/passwd`), so the run is refused with INVALID_ARGUMENT. A template that
 * has a `--` argument before that argument passes the value as it is: after `--` the common
 * option parsers (getopt, and the parsers of most CLIs) read every argument as positional. A
 * value inside a larger argument (`--message={prompt}`, `prompt:{prompt}`) cannot start an
 * option and is never checked, nor is `{node_id}`, which comes from the node's own config.
 * @module
 */
import { IopError } from "../../../shared/errors.ts";

/** The values a template's placeholders take for one run. */
export interface ArgValues {
  prompt: string;
  session: string;
  node_id: string;
}

/** Placeholders whose value a client chooses, with how a refusal names them. */
const CLIENT_VALUES: Readonly<Record<string, string>> = { prompt: "prompt", session: "session id" };

const PLACEHOLDER = /\{(prompt|session|node_id)\}/g;
const LEADING_PLACEHOLDER = /^\{(prompt|session|node_id)\}/;

/** Where an argument template sits, for a refusal: its profile and which template it is. */
export interface TemplateOrigin {
  profile: string;
  command: string;
  /** `args` or `resume_args`. */
  key: string;
}

/**
 * The template with its placeholders replaced in one pass (so a prompt containing `{session}`
 * stays as it is). Throws INVALID_ARGUMENT when a client value would start an argument with `-`
 * before any `--` of the template.
 */
export function fillArgs(
  template: readonly string[],
  values: ArgValues,
  origin: TemplateOrigin,
): string[] {
  const endOfOptions = template.indexOf("--");
  return template.map((arg, i) => {
    const filled = arg.replace(
      PLACEHOLDER,
      (m, key: string) => values[key as keyof ArgValues] ?? m,
    );
    const positional = endOfOptions !== -1 && i > endOfOptions;
    if (positional || arg.startsWith("-") || !filled.startsWith("-")) return filled;
    const key = leadingValue(arg, values);
    if (key === undefined || !Object.hasOwn(CLIENT_VALUES, key)) return filled;
    throw new IopError(
      "INVALID_ARGUMENT",
      `Cannot run CLI profile '${origin.profile}' as the ${CLIENT_VALUES[key]} starts with '-', ` +
        `which '${origin.command}' would read as an option (${origin.key}[${i}] is '${arg}' ` +
        `with no '--' before it)`,
    );
  });
}

/** The placeholder whose value gives the filled argument its first character. */
function leadingValue(arg: string, values: ArgValues): string | undefined {
  let rest = arg;
  while (true) {
    const m = LEADING_PLACEHOLDER.exec(rest);
    if (!m) return undefined;
    const key = m[1] as keyof ArgValues;
    if (values[key] !== "") return key;
    rest = rest.slice(m[0].length);
  }
}
