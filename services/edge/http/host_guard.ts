/**
 * The `Host` allow-list that defeats DNS rebinding: a page on `evil.example` whose name is made
 * to resolve to the Edge reaches it with `Host: evil.example`, so only names the Edge is known
 * by are served. Accepted, on any port: the bind address, `localhost`, `127.0.0.1`, `[::1]`,
 * the host of `a2a.public_url` and each `http.allowed_hosts` entry (an entry with a port
 * matches that port only; `*` turns the check off). When the Edge binds a wildcard address
 * (`0.0.0.0`, `::`, as in containers) it is also reached by IP and by service name, so IP
 * literals and single-label names (`edge-a`) are accepted too: rebinding needs a name the
 * attacker's DNS answers for, and such names have a dot. Anything else is answered 421.
 * @module
 */
import type { MiddlewareHandler } from "hono";
import type { EdgeConfig } from "../config.ts";
import { refuse } from "./refusal.ts";

/** The config keys the guard reads. */
export type HostGuardConfig = Pick<EdgeConfig, "http" | "a2a">;

const WILDCARD_BINDS = new Set(["", "0.0.0.0", "::", "[::]"]);
const LOOPBACK = ["localhost", "127.0.0.1", "[::1]"];

/** `host[:port]` as the URL parser normalizes it, or undefined when it is not a host. */
function parseHost(value: string): { hostname: string; port: string } | undefined {
  if (value === "" || /[/?#@\\\s]/.test(value)) return undefined;
  const url = URL.parse(`http://${value}/`);
  if (!url) return undefined;
  return { hostname: url.hostname.replace(/\.$/, ""), port: url.port };
}

function isIpLiteral(hostname: string): boolean {
  return hostname.startsWith("[") || /^\d+\.\d+\.\d+\.\d+$/.test(hostname);
}

/** The entries (`name` or `name:port`) the guard accepts for `config`. */
export function allowedHostEntries(config: HostGuardConfig): string[] {
  const entries = [...LOOPBACK, ...config.http.allowedHosts];
  const bind = config.http.host.trim();
  if (!WILDCARD_BINDS.has(bind)) {
    const parsed = parseHost(bind.includes(":") && !bind.startsWith("[") ? `[${bind}]` : bind);
    if (parsed) entries.push(parsed.hostname);
  }
  const publicUrl = URL.parse(config.a2a.publicUrl);
  if (publicUrl) entries.push(publicUrl.hostname);
  return entries;
}

/** The allow-list of each config snapshot (a reload makes a new one), built on first use. */
const entriesByConfig = new WeakMap<HostGuardConfig, string[]>();

function entriesOf(config: HostGuardConfig): string[] {
  let entries = entriesByConfig.get(config);
  if (!entries) entriesByConfig.set(config, entries = allowedHostEntries(config));
  return entries;
}

/** Whether a request's `Host` value is one this Edge answers to. */
export function isHostAllowed(host: string, config: HostGuardConfig): boolean {
  const parsed = parseHost(host.trim().toLowerCase());
  if (!parsed) return false;
  const entries = entriesOf(config);
  if (entries.includes("*")) return true;
  const withPort = `${parsed.hostname}:${parsed.port}`;
  if (entries.some((e) => e === parsed.hostname || e === withPort)) return true;
  if (WILDCARD_BINDS.has(config.http.host.trim())) {
    return isIpLiteral(parsed.hostname) || !parsed.hostname.includes(".");
  }
  return false;
}

/** Middleware answering 421 to a request whose `Host` is not on the allow-list. */
export function hostGuard(config: () => HostGuardConfig): MiddlewareHandler {
  return async function hostGuardMiddleware(c, next) {
    const host = c.req.header("host") ?? new URL(c.req.url).host;
    if (isHostAllowed(host, config())) return await next();
    return refuse(c, {
      status: 421,
      code: "misdirected_request",
      message: `Host '${host}' is not a name this Edge answers to; ` +
        "if clients reach it by that name, add it to http.allowed_hosts",
    });
  };
}
