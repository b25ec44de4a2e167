/**
 * `deno task certs`: the fleet's certificates in one directory (see `deploy/fleet_certs.ts`).
 * Prints one line per file created, kept or renewed; exits 2 on a usage error, 1 when an
 * operation is refused or fails.
 * @module
 */
import { parseArgs } from "node:util";
import { isAbsolute, join } from "node:path";
import {
  certificateHosts,
  dropPreviousCa,
  ensureFleetCertificates,
  listCaCertificates,
  listCertificates,
  rotateCa,
  type ServiceIdentity,
  type ServiceRole,
} from "./fleet_certs.ts";

const USAGE = `Usage: deno task certs [command] [options]

Commands:
  (none)            create the CA if absent; issue, renew or keep each certificate
                    (without --edge/--cp/--node/--enroll: edge-local, cp-local, node-1)
  rotate-ca         start a CA rotation: new CA, ca.pem trusts new + old, every
                    certificate in the directory re-issued by the new CA
  drop-previous-ca  end a rotation: ca.pem trusts the current CA only (refused
                    while a certificate is still signed by the previous CA)
  list              show each certificate: SANs, expiry, issuing CA

Options:
  --dir DIR                 certificate directory (default: $IOP_UP_DIR/certs, i.e. .iop/certs)
  --edge ID[=HOST,HOST]     an Edge certificate (repeatable); hosts default to ID,localhost,127.0.0.1
  --cp ID[=HOST,HOST]       a Control Plane certificate (repeatable); same default hosts
  --node ID[=HOST,HOST]     a Node certificate (repeatable); hosts default to ID
  --enroll RULE             the certificate of Edge enrollment rule RULE (repeatable): every
                            node joining by the rule shows it (SAN iop://enroll/RULE, no host,
                            client use only)
  --days N                  validity of certificates issued now, in days (default 397)
  --renew-within-days N     renew certificates expiring within N days (default 30)
  -h, --help                show this help

Files: ca.pem (trust bundle), ca-key.pem, <role>-<id>.pem, <role>-<id>-key.pem
(enrollment: enroll-<rule>.pem, enroll-<rule>-key.pem).

Examples:
  deno task certs
  deno task certs --dir certs --edge edge-a --edge edge-b=edge-b.example.com,10.0.0.5 --node node-a1 --cp cp
  deno task certs --dir certs --enroll gpu
  deno task certs rotate-ca --dir certs
  deno task certs list --dir certs`;

/** The embedded default stack of `deploy/config/*.yaml`. */
const DEFAULT_SERVICES: ServiceIdentity[] = [
  { role: "edge", id: "edge-local" },
  { role: "cp", id: "cp-local" },
  { role: "node", id: "node-1" },
];

const COMMANDS = ["ensure", "rotate-ca", "drop-previous-ca", "list"] as const;
type Command = typeof COMMANDS[number];

/** A mistake in the command line: reported with a pointer to --help, exit code 2. */
class UsageError extends Error {
  override name = "UsageError";
}

interface Invocation {
  command: Command;
  dir: string;
  services: ServiceIdentity[];
  days?: number;
  renewWithinDays?: number;
}

function parse(args: string[]): Invocation | "help" {
  let parsed;
  try {
    parsed = parseArgs({
      args,
      allowPositionals: true,
      strict: true,
      options: {
        dir: { type: "string" },
        edge: { type: "string", multiple: true },
        cp: { type: "string", multiple: true },
        node: { type: "string", multiple: true },
        enroll: { type: "string", multiple: true },
        days: { type: "string" },
        "renew-within-days": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    });
  } catch (err) {
    // node:util appends advice on '--' to an unknown option, which only confuses here.
    const message = err instanceof Error ? err.message : String(err);
    throw new UsageError(message.split(". To specify a positional")[0] ?? message);
  }
  const { values, positionals } = parsed;
  if (values.help) return "help";
  if (positionals.length > 1) {
    throw new UsageError(`Unexpected argument '${positionals[1]}'`);
  }
  const command = positionals[0] ?? "ensure";
  if (!(COMMANDS as readonly string[]).includes(command)) {
    throw new UsageError(`Unknown command '${command}'`);
  }
  const services = [
    ...(values.edge ?? []).map((spec) => service("edge", spec)),
    ...(values.cp ?? []).map((spec) => service("cp", spec)),
    ...(values.node ?? []).map((spec) => service("node", spec)),
    ...(values.enroll ?? []).map((spec) => service("enroll", spec)),
  ];
  if (command !== "ensure" && services.length > 0) {
    throw new UsageError(`Cannot use --edge, --cp, --node or --enroll with '${command}'`);
  }
  const out: Invocation = {
    command: command as Command,
    dir: values.dir === undefined
      ? `${Deno.env.get("IOP_UP_DIR") || ".iop"}/certs`
      : fromCaller(values.dir),
    services: services.length > 0 ? services : DEFAULT_SERVICES,
  };
  if (values.days !== undefined) out.days = count("--days", values.days, 1);
  if (values["renew-within-days"] !== undefined) {
    out.renewWithinDays = count("--renew-within-days", values["renew-within-days"], 0);
  }
  return out;
}

/** A relative --dir is taken from where `deno task` was started, not from the repository root. */
function fromCaller(dir: string): string {
  const caller = Deno.env.get("INIT_CWD");
  return caller && !isAbsolute(dir) ? join(caller, dir) : dir;
}

/** `ID` or `ID=HOST,HOST`, checked now so that a typo is a usage error, not a half-done run. */
function service(role: ServiceRole, spec: string): ServiceIdentity {
  const eq = spec.indexOf("=");
  const id = eq < 0 ? spec : spec.slice(0, eq);
  const hosts = eq < 0 ? [] : spec.slice(eq + 1).split(",").map((h) => h.trim()).filter(Boolean);
  const out: ServiceIdentity = hosts.length > 0 ? { role, id, hosts } : { role, id };
  try {
    certificateHosts(out);
  } catch (err) {
    throw new UsageError(err instanceof Error ? err.message : String(err));
  }
  return out;
}

function count(flag: string, text: string, min: number): number {
  const value = Number(text);
  if (!/^\d+$/.test(text) || value < min) {
    throw new UsageError(`${flag} must be an integer of at least ${min}: got '${text}'`);
  }
  return value;
}

async function run(call: Invocation): Promise<void> {
  const log = (line: string) => console.log(line);
  const days = call.days === undefined ? {} : { days: call.days };
  switch (call.command) {
    case "ensure": {
      const renew = call.renewWithinDays === undefined
        ? {}
        : { renewWithinDays: call.renewWithinDays };
      const certs = await ensureFleetCertificates(call.dir, call.services, {
        ...days,
        ...renew,
        log,
      });
      console.log(`trust bundle: ${certs.ca}`);
      return;
    }
    case "rotate-ca":
      await rotateCa(call.dir, { ...days, log });
      console.log(
        "next: give every service the new ca.pem and its new certificate, restart them one by " +
          "one, then run 'deno task certs drop-previous-ca'",
      );
      return;
    case "drop-previous-ca":
      await dropPreviousCa(call.dir, { log });
      return;
    case "list":
      await list(call.dir);
      return;
  }
}

async function list(dir: string): Promise<void> {
  const cas = await listCaCertificates(dir);
  if (cas.length === 0) console.log(`no CA in ${dir}; run 'deno task certs' to create one`);
  for (const ca of cas) {
    console.log(`${ca.file} ${ca.status}: ${ca.subject}, ${until(ca.notAfter, ca.daysLeft)}`);
  }
  for (const cert of await listCertificates(dir)) {
    console.log(
      `${cert.file} (${cert.issuer} CA): ${cert.sans.join(", ")}, ` +
        until(cert.notAfter, cert.daysLeft),
    );
  }
}

function until(notAfter: Date, daysLeft: number): string {
  const date = notAfter.toISOString().slice(0, 10);
  return daysLeft <= 0 ? `EXPIRED on ${date}` : `until ${date} (${daysLeft} days)`;
}

if (import.meta.main) {
  try {
    const call = parse(Deno.args);
    if (call === "help") {
      console.log(USAGE);
    } else {
      await run(call);
    }
  } catch (err) {
    if (err instanceof UsageError) {
      console.error(`certs: ${err.message}\nRun 'deno task certs --help' for usage.`);
      Deno.exit(2);
    }
    console.error(`certs: ${err instanceof Error ? err.message : String(err)}`);
    Deno.exit(1);
  }
}
