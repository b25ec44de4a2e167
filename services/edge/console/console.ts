/**
 * The edge-local ops console: `/` commands read line by line, answered through the service
 * layer, so an operator can diagnose and drive the group with no Control Plane. Runs stream
 * their output live while the console keeps accepting commands (e.g. `/cancel`).
 * @module
 */
import { toIopError } from "../../../shared/errors.ts";
import { runInput } from "../../../shared/run.ts";
import { formatTraceparent, freshTraceContext } from "../../../shared/trace_context.ts";
import { type RequestTrace, startSpan, withTrace } from "../../../shared/tracing.ts";
import type { DomainAgents } from "../agents/domain_agents.ts";
import type { OpsGateway, RunHandle } from "../ports.ts";
import { resolveModel, submissionFor } from "../http/model_resolver.ts";
import { formatAgents, formatHistory, formatNodes, formatStatus } from "./format.ts";

/** How often a waiting `/ask` run's queue position is re-read. */
const QUEUE_FEEDBACK_MS = 1_000;

/** Where the console writes; one call per piece of text. */
export type ConsoleOutput = (text: string) => void;

const HELP = `Commands:
  /nodes                               connected and configured nodes
  /status                              resource-first status of the group
  /run <adapter> <target> <prompt...>  start a run and stream its output
  /run @<node> <adapter> <target> ...  the same, pinned to one node
  /ask <model> <prompt...>             run a public model (its pool queue position shown)
  /cancel <run-id>                     cancel a run
  /runs                                runs started from this console that are still going
  /history <node> [limit]              the node's recent runs from its history
  /history <node> <run-id>             one run's whole stored output
  /drain <node>                        no new runs on the node; runs in flight finish
  /undrain <node>                      the node takes new runs again
  /agents                              domain agents with their state and commands
  /agent <id> <command> [input...]     run a domain agent's command, progress streamed
  /reload                              re-read the config file (kept when invalid)
  /help                                this text
  /quit                                leave the console (the edge keeps running)`;

/**
 * A new trace for a console command (an internal span `iop.console <command>` while tracing is
 * on): the run it submits joins it.
 */
function consoleTrace(command: string): RequestTrace {
  const span = startSpan(`iop.console ${command}`);
  return { traceparent: span?.traceparent ?? formatTraceparent(freshTraceContext()), span };
}

/** An interactive console bound to one service. */
export class OpsConsole {
  readonly #service: OpsGateway;
  readonly #out: ConsoleOutput;
  /** Whether the last text written ended a line (streamed output may stop mid-line). */
  #atLineStart = true;
  readonly #agents: DomainAgents | undefined;
  readonly #runs = new Map<string, RunHandle>();
  readonly #streams = new Set<Promise<void>>();
  /** Aborts the agent commands this console started, when it closes. */
  readonly #closing = new AbortController();

  /**
   * `agents`: the Edge's domain agents, the same instance its Control Plane link commands, so
   * both see one state (a busy agent refuses a second command from either side).
   */
  constructor(service: OpsGateway, out: ConsoleOutput, agents?: DomainAgents) {
    this.#service = service;
    this.#out = (text) => {
      if (text === "") return;
      out(text);
      this.#atLineStart = text.endsWith("\n");
    };
    this.#agents = agents;
  }

  /**
   * Reads commands from `input` until it ends or `/quit`; then cancels the runs this console
   * started and waits for them to end.
   */
  async serve(input: ReadableStream<Uint8Array>, prompt = "iop> "): Promise<void> {
    this.#out(`IOP edge console (${this.#service.config.edge.id}). Type /help.\n${prompt}`);
    const lines = input.pipeThrough(new TextDecoderStream()).pipeThrough(lineSplitter());
    for await (const line of lines) {
      const keepGoing = await this.execute(line);
      if (!keepGoing) break;
      this.#out(prompt);
    }
    for (const run of this.#runs.values()) run.cancel("console closed");
    this.#closing.abort();
    await Promise.allSettled([...this.#streams]);
  }

  /** Executes one command line; returns false on `/quit`. */
  async execute(line: string): Promise<boolean> {
    const trimmed = line.trim();
    if (trimmed === "") return true;
    const [command, ...args] = trimmed.split(/\s+/);
    try {
      switch (command) {
        case "/help":
          this.#out(`${HELP}\n`);
          break;
        case "/nodes":
          this.#out(formatNodes(this.#service.status()));
          break;
        case "/status":
          this.#out(formatStatus(this.#service.status()));
          break;
        case "/run":
          await this.#run(trimmed.slice("/run".length).trim());
          break;
        case "/ask":
          this.#ask(trimmed.slice("/ask".length).trim());
          break;
        case "/cancel":
          this.#cancel(args[0]);
          break;
        case "/runs":
          this.#out(
            this.#runs.size === 0
              ? "no runs in progress\n"
              : [...this.#runs.values()].map((r) =>
                `${r.runId} ${r.adapter}/${r.target} on ${r.nodeId}\n`
              ).join(""),
          );
          break;
        case "/history":
          await this.#history(args[0], args[1]);
          break;
        case "/drain":
        case "/undrain":
          this.#drain(args[0], command === "/drain");
          break;
        case "/agents":
          this.#out(formatAgents(this.#domainAgents().list()));
          break;
        case "/agent":
          this.#agent(args[0], args[1], args.slice(2).join(" "));
          break;
        case "/reload": {
          const result = await this.#service.reload();
          this.#out(`${result.ok ? "reloaded" : "reload failed"}: ${result.detail}\n`);
          break;
        }
        case "/quit":
        case "/exit":
          return false;
        default:
          this.#out(`unknown command '${command}'; type /help\n`);
      }
    } catch (err) {
      const e = toIopError(err);
      this.#out(`error ${e.code}: ${e.message}\n`);
    }
    return true;
  }

  async #run(rest: string): Promise<void> {
    let node: string | undefined;
    let text = rest;
    if (text.startsWith("@")) {
      const space = text.indexOf(" ");
      node = space < 0 ? text.slice(1) : text.slice(1, space);
      text = space < 0 ? "" : text.slice(space + 1).trim();
    }
    const match = text.match(/^(\S+)\s+(\S+)\s*([\s\S]*)$/);
    if (!match) {
      this.#out("usage: /run [@node] <adapter> <target> <prompt...>\n");
      return;
    }
    const [, adapter, target, prompt] = match as unknown as [string, string, string, string];
    const trace = consoleTrace("/run");
    let handle;
    try {
      handle = await withTrace(trace, () =>
        this.#service.submitRun({
          ...runInput({
            adapter,
            target,
            prompt,
            messages: prompt ? [{ role: "user", content: prompt }] : [],
          }),
          ...(node ? { node } : {}),
        }));
    } catch (err) {
      trace.span?.end(toIopError(err));
      throw err;
    }
    const started = handle;
    this.#runs.set(started.runId, started);
    this.#out(`run ${started.runId} started on ${started.nodeId} (${adapter}/${target})\n`);
    const stream = this.#stream(started).finally(() => {
      trace.span?.end();
      this.#runs.delete(started.runId);
      this.#streams.delete(stream);
    });
    this.#streams.add(stream);
  }

  /**
   * Runs a public model as a client would (through its pool, which may queue it), without
   * holding the console: while the run waits, its queue position is shown whenever it changes.
   */
  #ask(rest: string): void {
    const match = rest.match(/^(\S+)\s+([\s\S]+)$/);
    if (!match) {
      this.#out("usage: /ask <model> <prompt...>\n");
      return;
    }
    const [, name, prompt] = match as unknown as [string, string, string];
    const model = resolveModel(this.#service.config, name);
    const { adapter: _a, target: _t, ...input } = runInput({
      adapter: "",
      target: "",
      prompt,
      messages: [{ role: "user", content: prompt }],
    });
    let ticker: ReturnType<typeof setInterval> | undefined;
    // On a line of its own, even when another run's output stopped mid-line.
    const show = (position: number) =>
      this.#out(`${this.#atLineStart ? "" : "\n"}queued for ${model.name}, position ${position}\n`);
    const onQueued = (position: () => number) => {
      let shown = position();
      show(shown);
      ticker = setInterval(() => {
        const now = position();
        if (now > 0 && now !== shown) show(now);
        shown = now;
      }, QUEUE_FEEDBACK_MS);
    };
    const trace = consoleTrace("/ask");
    const flow = withTrace(trace, () =>
      this.#service.submitRun(submissionFor(model, input), {
        signal: this.#closing.signal,
        onQueued,
      })).finally(() => clearInterval(ticker)).then(
        (handle) => {
          this.#runs.set(handle.runId, handle);
          this.#out(`run ${handle.runId} started on ${handle.nodeId} (${model.name})\n`);
          return this.#stream(handle).finally(() => this.#runs.delete(handle.runId));
        },
        (err) => {
          const e = toIopError(err);
          trace.span?.end(e);
          this.#out(`error ${e.code}: ${e.message}\n`);
        },
      ).finally(() => {
        trace.span?.end();
        this.#streams.delete(flow);
      });
    this.#streams.add(flow);
  }

  async #stream(handle: RunHandle): Promise<void> {
    const tag = handle.runId.slice(0, 12);
    for await (const event of handle.events()) {
      switch (event.type) {
        case "output":
          this.#out(event.text);
          break;
        case "log":
          this.#out(`\n[${tag} ${event.stream}] ${event.text.trimEnd()}\n`);
          break;
        case "tool_call":
          this.#out(`\n[${tag} tool] ${event.call.name}(${event.call.arguments})\n`);
          break;
        case "completed":
          this.#out(
            `\n[${tag} completed] finish=${event.finishReason} exit=${event.exitCode}` +
              (event.usage
                ? ` tokens in=${event.usage.inputTokens} out=${event.usage.outputTokens}`
                : "") +
              "\n",
          );
          break;
        case "failed":
          this.#out(`\n[${tag} failed] ${event.code}: ${event.message}\n`);
          break;
        case "cancelled":
          this.#out(`\n[${tag} cancelled] ${event.reason}\n`);
          break;
        case "started":
        case "usage":
          break;
      }
    }
  }

  #cancel(runId: string | undefined): void {
    if (!runId) {
      this.#out("usage: /cancel <run-id>\n");
      return;
    }
    const full = this.#resolveRunId(runId);
    this.#out(
      this.#service.cancelRun(full, "cancelled from console")
        ? `cancelling ${full}\n`
        : `no run '${runId}' in progress\n`,
    );
  }

  #resolveRunId(prefix: string): string {
    const matches = [...this.#runs.keys()].filter((id) => id.startsWith(prefix));
    return matches.length === 1 ? matches[0]! : prefix;
  }

  #drain(node: string | undefined, draining: boolean): void {
    if (!node) {
      this.#out(`usage: /${draining ? "drain" : "undrain"} <node>\n`);
      return;
    }
    if (!this.#service.drainNode(node, draining)) {
      this.#out(`no connected node '${node}'\n`);
      return;
    }
    this.#out(
      draining
        ? `node ${node} draining: no new runs; runs in flight finish\n`
        : `node ${node} accepting runs\n`,
    );
  }

  #domainAgents(): DomainAgents {
    if (!this.#agents) throw new Error("this console has no domain agents");
    return this.#agents;
  }

  /** Starts an agent command; its progress and outcome print as they come. */
  #agent(id: string | undefined, command: string | undefined, input: string): void {
    if (!id || !command) {
      this.#out("usage: /agent <id> <command> [input...]\n");
      return;
    }
    const agents = this.#domainAgents();
    const agent = agents.list().find((a) => a.id === id);
    if (!agent) {
      this.#out(`no domain agent '${id}'; /agents lists them\n`);
      return;
    }
    if (!agent.commands.includes(command)) {
      this.#out(`agent ${id} has no command '${command}': it has ${agent.commands.join(", ")}\n`);
      return;
    }
    this.#out(`agent ${id}: ${command} started\n`);
    const stream = agents.execute(id, command, input, {
      signal: this.#closing.signal,
      onProgress: (p) => this.#out(`[${id} ${command}] ${p.message.trimEnd()}\n`),
    }).then((outcome) => {
      const where = outcome.runId ? ` (run ${outcome.runId} on ${outcome.nodeId})` : "";
      const why = outcome.error ? `: ${outcome.error.code}: ${outcome.error.message}` : "";
      this.#out(`agent ${id}: ${command} ${outcome.status}${why}${where}\n`);
    }, (err) => {
      const e = toIopError(err);
      this.#out(`agent ${id}: ${command} refused: ${e.code}: ${e.message}\n`);
    }).finally(() => this.#streams.delete(stream));
    this.#streams.add(stream);
  }

  /** `/history <node> [limit]` lists recent runs; a second argument not a number is a run id. */
  async #history(node: string | undefined, limit: string | undefined): Promise<void> {
    if (!node) {
      this.#out("usage: /history <node> [limit] | /history <node> <run-id>\n");
      return;
    }
    if (limit !== undefined && !/^[+-]?[\d.]+$/.test(limit)) {
      await this.#runOutput(node, limit);
      return;
    }
    const n = limit ? Number(limit) : 20;
    if (!Number.isInteger(n) || n <= 0) {
      this.#out(`limit must be a positive whole number: current value is '${limit}'\n`);
      return;
    }
    const result = await this.#service.nodeCommand(node, { type: "history", limit: n });
    if (result.type === "history") this.#out(formatHistory(node, result.runs));
  }

  /** Prints one run's whole stored output (it ends with a truncation line when it was cut). */
  async #runOutput(node: string, runId: string): Promise<void> {
    const result = await this.#service.nodeCommand(node, { type: "run_output", runId });
    if (result.type !== "run_output") return;
    if (!result.found) {
      this.#out(`no run '${runId}' in the history of node ${node}\n`);
      return;
    }
    const output = result.output;
    this.#out(output === "" || output.endsWith("\n") ? output : `${output}\n`);
  }
}

function lineSplitter(): TransformStream<string, string> {
  let buffer = "";
  return new TransformStream({
    transform(chunk, controller) {
      buffer += chunk;
      const lines = buffer.split(/\r?\n/);
      buffer = lines.pop() ?? "";
      for (const line of lines) controller.enqueue(line);
    },
    flush(controller) {
      if (buffer) controller.enqueue(buffer);
    },
  });
}
