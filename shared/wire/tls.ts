/**
 * TLS settings of the two wires (Node → Edge, Edge → Control Plane), read from config and
 * loaded from PEM files, and the identities a certificate names.
 *
 * Config shape, the same on every tier:
 *
 * ```yaml
 * tls:                       # dialing side (node `edge:`, edge `control_plane:`)
 *   ca: .iop/certs/ca.pem    # the fleet CA bundle; the only CAs the server may be signed by
 *   server_name: edge-local  # name the server's certificate must carry (default: the address host)
 *   cert: .iop/certs/node-node-1.pem       # optional client certificate (mutual TLS)
 *   key: .iop/certs/node-node-1-key.pem
 * tls:                       # listening side (edge `wire:`, control plane `wire:`)
 *   cert: .iop/certs/edge-edge-local.pem
 *   key: .iop/certs/edge-edge-local-key.pem
 *   client_ca: .iop/certs/ca.pem  # optional: peers must show a certificate from it naming their id
 * insecure_plaintext: true   # instead of tls: no encryption, warned at every start
 * ```
 *
 * A certificate names a service by a URI entry `iop://<role>/<id>` among its subject
 * alternative names (`deno task certs` issues them so); `iop://enroll/<rule>` names an Edge
 * enrollment rule instead, for the nodes that join by it (`deno task certs --enroll <rule>`).
 * @module
 */
import type { ConfigReader } from "../config.ts";
import { ConfigError } from "../config.ts";

/**
 * What an Edge enrollment rule may be named, and so what `iop://enroll/<rule>` may carry: the
 * Edge's config and `deno task certs --enroll` check the same rule.
 */
export const ENROLLMENT_RULE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** PEM material of a dialing side. */
export interface DialTls {
  /** Trusted CA certificates; replaces, not extends, the public roots. */
  ca: string;
  /** Name the server's certificate must carry; empty means the host of the address. */
  serverName: string;
  cert?: string;
  key?: string;
}

/** PEM material of a listening side. */
export interface ListenTls {
  cert: string;
  key: string;
  /** When set, every peer must show a certificate signed by one of these CAs. */
  clientCa?: string;
}

/** File paths of a dialing side, as configured. */
export interface DialTlsFiles {
  /** The config file and key path of this `tls` section, for errors. */
  file: string;
  path: string;
  caFile: string;
  serverName: string;
  certFile: string;
  keyFile: string;
}

/** File paths of a listening side, as configured. */
export interface ListenTlsFiles {
  file: string;
  path: string;
  certFile: string;
  keyFile: string;
  clientCaFile: string;
}

/** How a link is secured, as configured: `tls` set, or plaintext by explicit opt-out. */
export interface LinkSecurity<Files> {
  tls: Files | undefined;
  /** `insecure_plaintext: true`: the only way to run the link without TLS. */
  insecurePlaintext: boolean;
  /** Config file and key path of the section, for the error when neither is set. */
  file: string;
  path: string;
}

/** The `tls` and `insecure_plaintext` keys of a dialing `section`. */
export function readDialTls(section: ConfigReader): LinkSecurity<DialTlsFiles> {
  const insecurePlaintext = plaintextOptOut(section);
  const where = { insecurePlaintext, file: section.file, path: section.path };
  if (!section.has("tls")) return { tls: undefined, ...where };
  const tls = section.section("tls");
  const files = {
    file: tls.file,
    path: tls.path,
    caFile: tls.nonEmpty("ca"),
    serverName: tls.string("server_name", ""),
    certFile: tls.string("cert", ""),
    keyFile: tls.string("key", ""),
  };
  if ((files.certFile === "") !== (files.keyFile === "")) {
    throw tls.error(files.certFile ? "key" : "cert", "cert and key go together (mutual TLS)");
  }
  return { tls: files, ...where };
}

/** The `tls` and `insecure_plaintext` keys of a listening `section`. */
export function readListenTls(section: ConfigReader): LinkSecurity<ListenTlsFiles> {
  const insecurePlaintext = plaintextOptOut(section);
  const where = { insecurePlaintext, file: section.file, path: section.path };
  if (!section.has("tls")) return { tls: undefined, ...where };
  const tls = section.section("tls");
  return {
    tls: {
      file: tls.file,
      path: tls.path,
      certFile: tls.nonEmpty("cert"),
      keyFile: tls.nonEmpty("key"),
      clientCaFile: tls.string("client_ca", ""),
    },
    ...where,
  };
}

function plaintextOptOut(section: ConfigReader): boolean {
  const optOut = section.boolean("insecure_plaintext", false);
  if (optOut && section.has("tls")) {
    throw section.error("insecure_plaintext", "cannot be true while tls is set; choose one");
  }
  return optOut;
}

/**
 * The TLS files of a link a service is about to open; a config error naming the key when the
 * config sets neither `tls` nor `insecure_plaintext: true`. Undefined means plaintext by choice.
 */
export function requireLinkSecurity<Files>(link: LinkSecurity<Files>): Files | undefined {
  if (link.tls || link.insecurePlaintext) return link.tls;
  throw new ConfigError(
    link.file,
    link.path ? `${link.path}.tls` : "tls",
    "is required (the link carries tokens and commands): give the certificate files " +
      "(`deno task certs` creates them) or set insecure_plaintext: true",
  );
}

/** Reads the PEM files of a dialing side; an unreadable file names its key. */
export async function loadDialTls(files: DialTlsFiles): Promise<DialTls> {
  return {
    ca: await readPem(files, "ca", files.caFile, "CERTIFICATE"),
    serverName: files.serverName,
    ...(files.certFile
      ? {
        cert: await readPem(files, "cert", files.certFile, "CERTIFICATE"),
        key: await readPem(files, "key", files.keyFile, "PRIVATE KEY"),
      }
      : {}),
  };
}

/** Reads the PEM files of a listening side. */
export async function loadListenTls(files: ListenTlsFiles): Promise<ListenTls> {
  return {
    cert: await readPem(files, "cert", files.certFile, "CERTIFICATE"),
    key: await readPem(files, "key", files.keyFile, "PRIVATE KEY"),
    ...(files.clientCaFile
      ? { clientCa: await readPem(files, "client_ca", files.clientCaFile, "CERTIFICATE") }
      : {}),
  };
}

async function readPem(
  origin: { file: string; path: string },
  key: string,
  pemFile: string,
  label: string,
): Promise<string> {
  const fail = (problem: string) => new ConfigError(origin.file, `${origin.path}.${key}`, problem);
  let text: string;
  try {
    text = await Deno.readTextFile(pemFile);
  } catch (err) {
    // The sample configs and the compare bench name the files `deno task certs` makes.
    const hint = err instanceof Deno.errors.NotFound && pemFile.includes(".iop/certs/")
      ? "; `deno task certs` makes the fleet CA and a certificate per service in .iop/certs"
      : "";
    throw fail(`cannot read '${pemFile}': ${(err as Error).message}${hint}`);
  }
  // "PRIVATE KEY" also matches "EC PRIVATE KEY" and "RSA PRIVATE KEY".
  if (!text.includes(`${label}-----`)) throw fail(`'${pemFile}' holds no PEM ${label}`);
  return text;
}

/** The `iop://<role>/<id>` identities in a peer certificate, as `role/id` (`enroll/<rule>` too). */
export function peerIdentities(cert: { subjectaltname?: string } | undefined): string[] {
  const names = cert?.subjectaltname ?? "";
  const out: string[] = [];
  for (const entry of names.split(",")) {
    const match = /^\s*URI:iop:\/\/(node|edge|cp|enroll)\/([^/\s]+)\s*$/.exec(entry);
    if (match) out.push(`${match[1]}/${decodeURIComponent(match[2]!)}`);
  }
  return out;
}

/**
 * Why a peer on a link that requires client certificates may not act as `role/id`; undefined
 * when its certificate names it, or one of `alternatives` (`role/id` too: a node enrolling by a
 * rule may show the rule's `enroll/<rule>` certificate). Links without client certificates are
 * not checked.
 */
export function identityRefusal(
  link: { readonly peerIds: readonly string[] },
  required: boolean,
  role: "node" | "edge",
  id: string,
  alternatives: readonly string[] = [],
): string | undefined {
  if (!required) return undefined;
  if ([`${role}/${id}`, ...alternatives].some((name) => link.peerIds.includes(name))) {
    return undefined;
  }
  const shown = link.peerIds.length > 0 ? link.peerIds.join(", ") : "no iop:// identity";
  const wanted = [`${role} '${id}'`, ...alternatives.map(describeIdentity)].join(" or ");
  return `client certificate is not for ${wanted} (it names ${shown})`;
}

/** `enroll/gpu` as `enrollment rule 'gpu'`, `node/n1` as `node 'n1'`. */
function describeIdentity(name: string): string {
  const slash = name.indexOf("/");
  const role = name.slice(0, slash);
  return `${role === "enroll" ? "enrollment rule" : role} '${name.slice(slash + 1)}'`;
}
