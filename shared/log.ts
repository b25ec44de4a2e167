/**
 * The only place IOP writes log output: a fixed message plus snake_case fields, as JSON lines
 * (or a readable line when stderr is a terminal). Level from `IOP_LOG_LEVEL` (default info).
 * @module
 */

/** Log severities: error = a human must act, warn = degraded or retrying, info = lifecycle, debug = per request. */
export type Level = "debug" | "info" | "warn" | "error";

const RANK: Record<Level, number> = { debug: 10, info: 20, warn: 30, error: 40 };

/** Structured fields of a log line; values are JSON-encoded, errors by their message and code. */
export type Fields = Record<string, unknown>;

/** A logger bound to a component name and fixed fields. */
export interface Logger {
  debug(message: string, fields?: Fields): void;
  info(message: string, fields?: Fields): void;
  warn(message: string, fields?: Fields): void;
  error(message: string, fields?: Fields): void;
  /** A logger that adds `fields` to every line. */
  with(fields: Fields): Logger;
}

/** Where lines go; replaced in tests to capture them. */
export type LogWriter = (line: string) => void;

function envLevel(): Level {
  let value: string | undefined;
  try {
    value = Deno.env.get("IOP_LOG_LEVEL");
  } catch {
    value = undefined;
  }
  return value === "debug" || value === "warn" || value === "error" ? value : "info";
}

const encoder = new TextEncoder();
const pretty = (() => {
  try {
    return Deno.stderr.isTerminal();
  } catch {
    return false;
  }
})();

const stderrWriter: LogWriter = (line) => {
  Deno.stderr.writeSync(encoder.encode(line + "\n"));
};

function plain(value: unknown): unknown {
  if (value instanceof Error) {
    const code = (value as { code?: unknown }).code;
    return code === undefined ? value.message : `${code}: ${value.message}`;
  }
  return value;
}

/** Options of {@linkcode createLogger}. */
export interface LoggerOptions {
  /** Minimum level written; defaults to `IOP_LOG_LEVEL` or info. */
  level?: Level;
  /** Defaults to stderr. */
  writer?: LogWriter;
}

/** Creates a logger for one component (e.g. "edge.transport"). */
export function createLogger(component: string, options: LoggerOptions = {}): Logger {
  const min = RANK[options.level ?? envLevel()];
  const write = options.writer ?? stderrWriter;
  const make = (bound: Fields): Logger => {
    const emit = (level: Level, message: string, fields?: Fields) => {
      if (RANK[level] < min) return;
      const all: Fields = { ...bound, ...fields };
      for (const [k, v] of Object.entries(all)) all[k] = plain(v);
      if (pretty && !options.writer) {
        const kv = Object.entries(all).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(" ");
        write(`${level.toUpperCase().padEnd(5)} ${component}: ${message} ${kv}`.trimEnd());
      } else {
        write(
          JSON.stringify({ ts: new Date().toISOString(), level, component, msg: message, ...all }),
        );
      }
    };
    return {
      debug: (m, f) => emit("debug", m, f),
      info: (m, f) => emit("info", m, f),
      warn: (m, f) => emit("warn", m, f),
      error: (m, f) => emit("error", m, f),
      with: (f) => make({ ...bound, ...f }),
    };
  };
  return make({});
}
