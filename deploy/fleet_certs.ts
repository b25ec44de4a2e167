/**
 * The fleet's certificates: one CA per fleet and one leaf per service (`node`, `edge`, `cp`), kept
 * in a directory that `deno task certs`, `deno task up` and the compose init container share,
 * and one leaf per Edge enrollment rule (`enroll`) that every node joining by the rule shows.
 *
 * Layout of the directory:
 * - `ca.pem`: the trust bundle verifiers load: the current CA first, then a previous CA that is
 *   still trusted while a rotation is under way; `ca-key.pem` (0600): the current CA's key;
 *   `ca-previous.pem`: the old CA while a rotation is under way.
 * - `<role>-<id>.pem` and `<role>-<id>-key.pem` (0600) per service, e.g. `edge-edge-local.pem`;
 *   `enroll-<rule>.pem` and `enroll-<rule>-key.pem` per enrollment rule, e.g. `enroll-gpu.pem`.
 *
 * Keys are ECDSA P-256 (PKCS#8 PEM), signatures SHA-256. A leaf names its service as the SAN
 * `URI:iop://<role>/<id>` next to its DNS names and IP addresses and may serve as both TLS server
 * and client; an enrollment leaf names `URI:iop://enroll/<rule>` only (no host: many hosts share
 * it) and serves as a TLS client only, so that no host holding it can pose as a server of the
 * fleet. Every file is written to a temporary name and renamed, so a crash never leaves half
 * a key; the CA key is staged the same way, so an interrupted CA change completes on the next run.
 * @module
 */
import "reflect-metadata";
import * as x509 from "@peculiar/x509";
import { isIP } from "node:net";
import { basename, dirname, join, resolve } from "node:path";
import { IopError } from "../shared/errors.ts";
import { ENROLLMENT_RULE_NAME } from "../shared/wire/tls.ts";

/**
 * The tiers that hold a certificate, and `enroll`: the certificate of an Edge enrollment rule,
 * which nodes that join by the rule show instead of one made for their own id in advance.
 */
export const SERVICE_ROLES = ["node", "edge", "cp", "enroll"] as const;

/** One of {@linkcode SERVICE_ROLES}. */
export type ServiceRole = typeof SERVICE_ROLES[number];

/** A service that needs a certificate; `hosts` (DNS names, IP addresses) default per role. */
export interface ServiceIdentity {
  role: ServiceRole;
  id: string;
  /**
   * Absent or empty: edge and cp get `<id>`, `localhost`, `127.0.0.1`; a node gets `<id>` (the id
   * only where it is a valid DNS name); an enrollment certificate none (and may be given none).
   * The SAN `URI:iop://<role>/<id>` is always added.
   */
  hosts?: string[];
}

/** Where {@linkcode ensureFleetCertificates} put the files, as absolute paths. */
export interface FleetCertificates {
  /** The certificate directory. */
  dir: string;
  /** The trust bundle (`ca.pem`). */
  ca: string;
  /** The leaf certificate of a service. */
  certFor(role: ServiceRole, id: string): string;
  /** The private key of a service. */
  keyFor(role: ServiceRole, id: string): string;
}

/** Options of {@linkcode ensureFleetCertificates}. */
export interface EnsureOptions {
  /** Validity of issued leaves in days (default 397; never beyond the CA's own expiry). */
  days?: number;
  /** Re-issue a leaf that expires within this many days (default 30, or half of `days` if less). */
  renewWithinDays?: number;
  /** Receives one human-readable line per decision; absent: silent. */
  log?: (line: string) => void;
}

/** Options of {@linkcode rotateCa} and {@linkcode dropPreviousCa}. */
export interface CaChangeOptions {
  /** Validity of re-issued leaves in days (default 397). */
  days?: number;
  /** Receives one human-readable line per step; absent: silent. */
  log?: (line: string) => void;
}

/** Which CA signed a certificate, as seen from the directory's bundle. */
export type IssuerStatus = "current" | "previous" | "unknown";

/** One leaf certificate of a directory, as {@linkcode listCertificates} reports it. */
export interface CertificateInfo {
  file: string;
  role: ServiceRole;
  id: string;
  /** E.g. `URI:iop://node/node-1`, `DNS:node-1`, `IP:127.0.0.1`. */
  sans: string[];
  notAfter: Date;
  /** Days until `notAfter`, a part of a day counting as one: 0 or less once expired. */
  daysLeft: number;
  issuer: IssuerStatus;
}

/** One CA certificate of a directory, as {@linkcode listCaCertificates} reports it. */
export interface CaInfo {
  file: string;
  subject: string;
  notAfter: Date;
  daysLeft: number;
  status: "current" | "previous";
}

const ALG = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" } as const;
const DAY_MS = 86_400_000;
/** Leaves start a minute in the past so that a peer whose clock is slightly behind accepts them. */
const CLOCK_SKEW_MS = 60_000;
const CA_DAYS = 3650;
const DEFAULT_DAYS = 397;
const DEFAULT_RENEW_WITHIN_DAYS = 30;
const ID_PATTERN = /^[A-Za-z0-9._-]+$/;
const DNS_PATTERN =
  /^(\*\.)?[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/;
const LEAF_FILE = /^(node|edge|cp|enroll)-([A-Za-z0-9._-]+)\.pem$/;
const CA_BUNDLE = "ca.pem";
const CA_KEY = "ca-key.pem";
const CA_PREVIOUS = "ca-previous.pem";
/** The next CA key, written before `ca.pem` names its certificate and renamed after. */
const CA_KEY_STAGED = ".ca-key.pem.next";

type Log = (line: string) => void;
interface Ca {
  cert: x509.X509Certificate;
  key: CryptoKey;
}
interface Bundle {
  current: x509.X509Certificate | undefined;
  previous: x509.X509Certificate[];
}
interface Leaf {
  file: string;
  role: ServiceRole;
  id: string;
  cert: x509.X509Certificate;
}

/** The file name of a service's certificate inside the directory. */
export function certFileName(role: ServiceRole, id: string): string {
  return `${role}-${id}.pem`;
}

/** The file name of a service's private key inside the directory. */
export function keyFileName(role: ServiceRole, id: string): string {
  return `${role}-${id}-key.pem`;
}

/**
 * The DNS names and IP addresses a service's certificate carries (its own or the defaults),
 * checked: throws INVALID_ARGUMENT for an unknown role, a bad id or a bad host.
 */
export function certificateHosts(service: ServiceIdentity): string[] {
  const { role, id } = service;
  if (!(SERVICE_ROLES as readonly string[]).includes(role)) {
    throw invalid(
      `Cannot issue a certificate as the role must be node, edge, cp or enroll: got '${role}'`,
    );
  }
  if (!ID_PATTERN.test(id)) {
    throw invalid(
      `Cannot issue a certificate for ${role} '${id}' as an id must be non-empty and use only ` +
        `letters, digits, '.', '_' and '-'`,
    );
  }
  if (role === "enroll" && !ENROLLMENT_RULE_NAME.test(id)) {
    throw invalid(
      `Cannot issue a certificate for enroll '${id}' as an enrollment rule's name must be 1 to ` +
        `64 letters, digits, '.', '_' or '-', starting with a letter or digit (as the Edge's ` +
        `enrollment[].name)`,
    );
  }
  let hosts = service.hosts ?? [];
  if (role === "enroll" && hosts.length > 0) {
    throw invalid(
      `Cannot issue a certificate for enroll '${id}' with hosts: every node enrolling by the ` +
        `rule shares it, so it names the rule only`,
    );
  }
  if (hosts.length === 0 && role !== "enroll") {
    const own = DNS_PATTERN.test(id.toLowerCase()) ? [id] : [];
    hosts = role === "node" ? own : [...own, "localhost", "127.0.0.1"];
  }
  const out = new Set<string>();
  for (const host of hosts) {
    const name = isIP(host) ? host : host.toLowerCase();
    if (!isIP(name) && (name.length > 253 || !DNS_PATTERN.test(name))) {
      throw invalid(
        `Cannot issue a certificate for ${role} '${id}' as '${host}' is neither a DNS name nor ` +
          `an IP address`,
      );
    }
    out.add(name);
  }
  return [...out];
}

/**
 * Makes `dir` hold a CA and a valid certificate for every service: creates what is missing and
 * re-issues a leaf that expires soon, was not signed by the current CA, does not match its key or
 * whose SANs differ from the requested ones; leaves the others untouched.
 */
export async function ensureFleetCertificates(
  dir: string,
  services: ServiceIdentity[],
  options: EnsureOptions = {},
): Promise<FleetCertificates> {
  const log = options.log ?? (() => {});
  const days = positiveInteger("days", options.days ?? DEFAULT_DAYS);
  const renewWithin = options.renewWithinDays ??
    Math.min(DEFAULT_RENEW_WITHIN_DAYS, Math.floor(days / 2));
  if (!Number.isInteger(renewWithin) || renewWithin < 0) {
    throw invalid(
      `Cannot check certificates as 'renewWithinDays' must be a non-negative integer: current ` +
        `value is ${renewWithin}`,
    );
  }
  const wanted = uniqueServices(services);
  const root = resolve(dir);
  await makeDir(root);
  const ca = await loadCa(root, log) ?? await createCa(root, log);
  const caLeft = daysUntil(ca.cert.notAfter);
  if (caLeft < 365) {
    log(`warning  ${CA_BUNDLE}: the CA expires in ${caLeft} days; run 'deno task certs rotate-ca'`);
  }
  for (const { service, hosts } of wanted) {
    const sans = sanNames(service.role, service.id, hosts);
    const file = certFileName(service.role, service.id);
    const check = await checkLeaf(root, service, sans, ca, renewWithin);
    if ("valid" in check) {
      log(`kept     ${file}: valid for ${daysUntil(check.valid.notAfter)} more days`);
      continue;
    }
    const cert = await issueLeaf(root, ca, service.role, service.id, sans, days);
    const verb = check.reason === "missing" ? "issued  " : "renewed ";
    const names = describeSans(cert).join(", ");
    log(`${verb} ${file}: ${check.reason}; ${names}, until ${day(cert.notAfter)}`);
  }
  return {
    dir: root,
    ca: join(root, CA_BUNDLE),
    certFor: (role, id) => join(root, certFileName(role, id)),
    keyFor: (role, id) => join(root, keyFileName(role, id)),
  };
}

/**
 * Starts a CA rotation: a new CA becomes current, `ca.pem` trusts the new and the old one, the old
 * certificate is kept as `ca-previous.pem`, and every leaf in `dir` is re-issued by the new CA
 * with its SANs. Refuses while an earlier rotation is still under way.
 */
export async function rotateCa(dir: string, options: CaChangeOptions = {}): Promise<void> {
  const log = options.log ?? (() => {});
  const days = positiveInteger("days", options.days ?? DEFAULT_DAYS);
  const root = resolve(dir);
  const old = await loadCa(root, log);
  if (!old) throw noCa(root, "rotate the CA");
  const bundle = await readBundle(root);
  // ca-previous.pem equal to the current CA means a rotation stopped before it switched CAs.
  const pending = bundle.previous.filter((cert) => !sameCert(cert, old.cert));
  if (pending.length > 0) {
    throw new IopError(
      "INVALID_ARGUMENT",
      `Cannot rotate the CA as a rotation is under way: ${join(root, CA_PREVIOUS)} and ` +
        `${join(root, CA_BUNDLE)} still trust the previous CA; once every service runs on a ` +
        `certificate of the current CA, run 'deno task certs drop-previous-ca' first`,
    );
  }
  const leaves = await readLeaves(root, log);
  await writeAtomic(join(root, CA_PREVIOUS), pem(old.cert), 0o644);
  const next = await createCa(root, log, [old.cert]);
  log(`kept     ${CA_PREVIOUS}: ${old.cert.subject}, trusted in ${CA_BUNDLE} until dropped`);
  for (const leaf of leaves) {
    const sans = leaf.cert.getExtension(x509.SubjectAlternativeNameExtension)?.names.toJSON() ??
      [];
    const cert = await issueLeaf(root, next, leaf.role, leaf.id, sans, days);
    log(`renewed  ${leaf.file}: signed by the new CA, until ${day(cert.notAfter)}`);
  }
}

/**
 * Ends a CA rotation: `ca.pem` trusts the current CA only and `ca-previous.pem` goes. Refuses,
 * naming the files, while a leaf in `dir` is still signed by the previous CA.
 */
export async function dropPreviousCa(dir: string, options: CaChangeOptions = {}): Promise<void> {
  const log = options.log ?? (() => {});
  const root = resolve(dir);
  const ca = await loadCa(root, log);
  if (!ca) throw noCa(root, "drop the previous CA");
  const bundle = await readBundle(root);
  const previous = bundle.previous.filter((cert) => !sameCert(cert, ca.cert));
  if (previous.length === 0) {
    await removeIfPresent(join(root, CA_PREVIOUS));
    log(`kept     ${CA_BUNDLE}: trusts only the current CA already; nothing to drop`);
    return;
  }
  const stale: string[] = [];
  for (const leaf of await readLeaves(root, log)) {
    if (await issuerOf(leaf.cert, { current: ca.cert, previous }) === "previous") {
      stale.push(leaf.file);
    }
  }
  if (stale.length > 0) {
    throw new IopError(
      "INVALID_ARGUMENT",
      `Cannot drop the previous CA as ${stale.length} certificate(s) in ${root} are still signed ` +
        `by it: ${stale.join(", ")}; re-issue them with 'deno task certs' first`,
    );
  }
  await writeAtomic(join(root, CA_BUNDLE), pem(ca.cert), 0o644);
  await removeIfPresent(join(root, CA_PREVIOUS));
  log(`updated  ${CA_BUNDLE}: trusts only ${ca.cert.subject}; removed ${CA_PREVIOUS}`);
}

/** Every leaf certificate in `dir` with its SANs, expiry and issuing CA, sorted by file name. */
export async function listCertificates(dir: string): Promise<CertificateInfo[]> {
  const root = resolve(dir);
  const bundle = await readBundle(root);
  const out: CertificateInfo[] = [];
  for (const leaf of await readLeaves(root, () => {})) {
    out.push({
      file: leaf.file,
      role: leaf.role,
      id: leaf.id,
      sans: describeSans(leaf.cert),
      notAfter: leaf.cert.notAfter,
      daysLeft: daysUntil(leaf.cert.notAfter),
      issuer: await issuerOf(leaf.cert, bundle),
    });
  }
  return out;
}

/** The CA certificates `dir` trusts: the current one first, then any previous one. */
export async function listCaCertificates(dir: string): Promise<CaInfo[]> {
  const root = resolve(dir);
  const bundle = await readBundle(root);
  const info = (cert: x509.X509Certificate, file: string, status: CaInfo["status"]) => ({
    file,
    subject: cert.subject,
    notAfter: cert.notAfter,
    daysLeft: daysUntil(cert.notAfter),
    status,
  });
  const out = bundle.current ? [info(bundle.current, CA_BUNDLE, "current")] : [];
  return [...out, ...bundle.previous.map((cert) => info(cert, CA_BUNDLE, "previous"))];
}

// ---------------------------------------------------------------------------------------------
// CA

async function createCa(root: string, log: Log, alsoTrust: x509.X509Certificate[] = []) {
  const keys = await generateKeys();
  const now = Date.now();
  const ski = await x509.SubjectKeyIdentifierExtension.create(keys.publicKey);
  const created = new Date(now).toISOString().slice(0, 10);
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: randomSerial(),
    // The key id in OU tells two CAs made on the same day apart in every tool's output.
    name: `CN=IOP fleet CA ${created}, OU=key ${ski.keyId.slice(0, 16)}`,
    notBefore: new Date(now - CLOCK_SKEW_MS),
    notAfter: new Date(now + CA_DAYS * DAY_MS),
    keys,
    signingAlgorithm: ALG,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(
        x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign,
        true,
      ),
      ski,
    ],
  });
  // Key first under a staged name, then the bundle, then the rename: see loadCa for recovery.
  await writeAtomic(join(root, CA_KEY_STAGED), await keyPem(keys.privateKey), 0o600);
  await writeAtomic(join(root, CA_BUNDLE), [cert, ...alsoTrust].map(pem).join(""), 0o644);
  await Deno.rename(join(root, CA_KEY_STAGED), join(root, CA_KEY));
  log(`created  ${CA_BUNDLE}, ${CA_KEY}: ${cert.subject}, until ${day(cert.notAfter)}`);
  return { cert, key: keys.privateKey };
}

/** The current CA of `root`, or undefined when it has none; completes an interrupted CA change. */
async function loadCa(root: string, log: Log): Promise<Ca | undefined> {
  const bundlePath = join(root, CA_BUNDLE);
  const keyPath = join(root, CA_KEY);
  const stagedPath = join(root, CA_KEY_STAGED);
  const { current } = await readBundle(root);
  const keyText = await readOptional(keyPath);
  if (!current) {
    if (keyText === undefined) return undefined;
    throw new IopError(
      "NOT_FOUND",
      `Cannot use the fleet CA as ${bundlePath} is missing while ${keyPath} exists; restore it, ` +
        `or move ${keyPath} away to start a new CA (every certificate is then re-issued)`,
    );
  }
  if (keyText !== undefined) {
    const key = await parseKey(keyText, keyPath);
    if (await keyMatches(key, current)) return { cert: current, key };
  }
  const stagedText = await readOptional(stagedPath);
  if (stagedText !== undefined) {
    const staged = await parseKey(stagedText, stagedPath);
    if (await keyMatches(staged, current)) {
      await Deno.rename(stagedPath, keyPath);
      log(`repaired ${CA_KEY}: completed an interrupted CA change`);
      return { cert: current, key: staged };
    }
  }
  if (keyText === undefined) {
    throw new IopError(
      "NOT_FOUND",
      `Cannot use the fleet CA as ${keyPath} is missing while ${bundlePath} exists; restore ` +
        `it, or move ${bundlePath} away to start a new CA (every certificate is then re-issued)`,
    );
  }
  throw new IopError(
    "INVALID_ARGUMENT",
    `Cannot use the fleet CA as ${keyPath} does not belong to the first certificate of ` +
      `${bundlePath}; restore the matching pair`,
  );
}

async function readBundle(root: string): Promise<Bundle> {
  const certs = await readCerts(join(root, CA_BUNDLE));
  const previous = [...certs.slice(1), ...await readCerts(join(root, CA_PREVIOUS))];
  const unique = previous.filter((cert, i) => previous.findIndex((c) => sameCert(c, cert)) === i);
  return { current: certs[0], previous: unique };
}

async function issuerOf(cert: x509.X509Certificate, bundle: Bundle): Promise<IssuerStatus> {
  if (bundle.current && await signedBy(cert, bundle.current)) return "current";
  for (const ca of bundle.previous) if (await signedBy(cert, ca)) return "previous";
  return "unknown";
}

async function signedBy(cert: x509.X509Certificate, ca: x509.X509Certificate): Promise<boolean> {
  if (cert.issuer !== ca.subject) return false;
  return await cert.verify({ publicKey: ca.publicKey, signatureOnly: true }).catch(() => false);
}

// ---------------------------------------------------------------------------------------------
// Leaves

async function issueLeaf(
  root: string,
  ca: Ca,
  role: ServiceRole,
  id: string,
  sans: x509.JsonGeneralNames,
  days: number,
): Promise<x509.X509Certificate> {
  const keys = await generateKeys();
  const now = Date.now();
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: randomSerial(),
    subject: `CN=${id}`,
    issuer: ca.cert.subjectName,
    notBefore: new Date(now - CLOCK_SKEW_MS),
    notAfter: new Date(Math.min(now + days * DAY_MS, ca.cert.notAfter.getTime())),
    signingKey: ca.key,
    publicKey: keys.publicKey,
    signingAlgorithm: ALG,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      // Shared by many hosts, an enrollment certificate must not let one of them serve as a peer.
      new x509.ExtendedKeyUsageExtension(
        role === "enroll"
          ? [x509.ExtendedKeyUsage.clientAuth]
          : [x509.ExtendedKeyUsage.serverAuth, x509.ExtendedKeyUsage.clientAuth],
      ),
      new x509.SubjectAlternativeNameExtension(sans),
      await x509.AuthorityKeyIdentifierExtension.create(ca.cert),
    ],
  });
  // Key before certificate: a crash in between leaves a pair that fails keyMatches, so the next
  // run re-issues it.
  await writeAtomic(join(root, keyFileName(role, id)), await keyPem(keys.privateKey), 0o600);
  await writeAtomic(join(root, certFileName(role, id)), pem(cert), 0o644);
  return cert;
}

/** The leaf of a service when it can stay, else why it must be (re-)issued. */
async function checkLeaf(
  root: string,
  service: ServiceIdentity,
  sans: x509.JsonGeneralNames,
  ca: Ca,
  renewWithinDays: number,
): Promise<{ valid: x509.X509Certificate } | { reason: string }> {
  const certText = await readOptional(join(root, certFileName(service.role, service.id)));
  const keyText = await readOptional(join(root, keyFileName(service.role, service.id)));
  if (certText === undefined || keyText === undefined) return { reason: "missing" };
  let cert: x509.X509Certificate;
  let key: CryptoKey;
  try {
    cert = new x509.X509Certificate(certText);
    key = await importKey(keyText);
  } catch {
    return { reason: "unreadable certificate or key" };
  }
  if (!await keyMatches(key, cert)) return { reason: "key does not match the certificate" };
  if (!await signedBy(cert, ca.cert)) return { reason: "not signed by the current CA" };
  const left = cert.notAfter.getTime() - Date.now();
  if (left <= 0) return { reason: "expired" };
  if (left <= renewWithinDays * DAY_MS) {
    return { reason: `expires in ${daysUntil(cert.notAfter)} days` };
  }
  const have = describeSans(cert).sort().join(",");
  const want = describeSans(sans).sort().join(",");
  if (have !== want) return { reason: "host names changed" };
  return { valid: cert };
}

async function readLeaves(root: string, log: Log): Promise<Leaf[]> {
  const out: Leaf[] = [];
  let entries: Deno.DirEntry[];
  try {
    entries = await Array.fromAsync(Deno.readDir(root));
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return [];
    throw err;
  }
  for (const entry of entries.sort((a, b) => a.name.localeCompare(b.name))) {
    const match = entry.isFile ? LEAF_FILE.exec(entry.name) : null;
    if (!match) continue;
    // A key's name fits the pattern too (id + "-key"); the content tells them apart.
    const text = await Deno.readTextFile(join(root, entry.name));
    if (!text.includes("-----BEGIN CERTIFICATE-----")) continue;
    try {
      const cert = new x509.X509Certificate(text);
      out.push({ file: entry.name, role: match[1] as ServiceRole, id: match[2] ?? "", cert });
    } catch {
      log(`skipped  ${entry.name}: not a readable certificate`);
    }
  }
  return out;
}

function uniqueServices(services: ServiceIdentity[]) {
  const seen = new Map<string, { service: ServiceIdentity; hosts: string[] }>();
  for (const service of services) {
    const hosts = certificateHosts(service);
    const key = `${service.role}/${service.id}`;
    const earlier = seen.get(key);
    if (earlier && earlier.hosts.join(",") !== hosts.join(",")) {
      throw invalid(
        `Cannot issue certificates as ${service.role} '${service.id}' is listed twice with ` +
          `different hosts: ${earlier.hosts.join(",")} and ${hosts.join(",")}`,
      );
    }
    seen.set(key, { service, hosts });
  }
  return [...seen.values()];
}

function sanNames(role: ServiceRole, id: string, hosts: string[]): x509.JsonGeneralNames {
  return [
    { type: "url", value: `iop://${role}/${encodeURIComponent(id)}` },
    ...hosts.map((host) => ({ type: isIP(host) ? "ip" as const : "dns" as const, value: host })),
  ];
}

/** SANs as text, read back from DER so that e.g. `fe80::0001` and `fe80::1` compare equal. */
function describeSans(source: x509.X509Certificate | x509.JsonGeneralNames): string[] {
  const ext = source instanceof x509.X509Certificate
    ? source.getExtension(x509.SubjectAlternativeNameExtension)
    : new x509.SubjectAlternativeNameExtension(
      new x509.SubjectAlternativeNameExtension(source).rawData,
    );
  const label = { url: "URI", dns: "DNS", ip: "IP" } as Record<string, string>;
  return (ext?.names.items ?? []).map((n) => `${label[n.type] ?? n.type}:${n.value}`);
}

// ---------------------------------------------------------------------------------------------
// Keys, files, small helpers

async function generateKeys(): Promise<CryptoKeyPair> {
  return await crypto.subtle.generateKey(ALG, true, ["sign", "verify"]) as CryptoKeyPair;
}

async function keyPem(key: CryptoKey): Promise<string> {
  const der = await crypto.subtle.exportKey("pkcs8", key);
  return `${x509.PemConverter.encode(der, "PRIVATE KEY")}\n`;
}

async function importKey(text: string): Promise<CryptoKey> {
  const der = x509.PemConverter.decodeFirst(text);
  return await crypto.subtle.importKey("pkcs8", der, ALG, true, ["sign"]);
}

async function parseKey(text: string, path: string): Promise<CryptoKey> {
  try {
    return await importKey(text);
  } catch (err) {
    throw new IopError(
      "INVALID_ARGUMENT",
      `Cannot use the fleet CA as ${path} is not a PKCS#8 P-256 private key`,
      { cause: err },
    );
  }
}

/** True when `key` is the private half of the certificate's public key. */
async function keyMatches(key: CryptoKey, cert: x509.X509Certificate): Promise<boolean> {
  const { d: _private, ...jwk } = await crypto.subtle.exportKey("jwk", key);
  const publicKey = await crypto.subtle.importKey(
    "jwk",
    { ...jwk, key_ops: ["verify"] },
    ALG,
    true,
    [
      "verify",
    ],
  );
  const spki = new Uint8Array(await crypto.subtle.exportKey("spki", publicKey));
  return bytesEqual(spki, new Uint8Array(cert.publicKey.rawData));
}

function pem(cert: x509.X509Certificate): string {
  return `${cert.toString("pem")}\n`;
}

function sameCert(a: x509.X509Certificate, b: x509.X509Certificate): boolean {
  return bytesEqual(new Uint8Array(a.rawData), new Uint8Array(b.rawData));
}

function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((byte, i) => byte === b[i]);
}

async function readCerts(path: string): Promise<x509.X509Certificate[]> {
  const text = await readOptional(path);
  if (text === undefined) return [];
  try {
    return x509.PemConverter.decode(text).map((der) => new x509.X509Certificate(der));
  } catch (err) {
    throw new IopError("INVALID_ARGUMENT", `Cannot read ${path} as it is not PEM certificates`, {
      cause: err,
    });
  }
}

async function readOptional(path: string): Promise<string | undefined> {
  try {
    return await Deno.readTextFile(path);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return undefined;
    throw err;
  }
}

async function removeIfPresent(path: string): Promise<void> {
  await Deno.remove(path).catch((err) => {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
  });
}

async function makeDir(path: string): Promise<void> {
  try {
    await Deno.stat(path);
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
    await Deno.mkdir(path, { recursive: true, mode: 0o700 });
    if (Deno.build.os !== "windows") await Deno.chmod(path, 0o700);
  }
}

/** Writes via a temporary file in the same directory and a rename, so readers never see half. */
async function writeAtomic(path: string, text: string, mode: number): Promise<void> {
  const suffix = crypto.randomUUID().slice(0, 8);
  const temp = join(dirname(path), `.${basename(path)}.${suffix}.tmp`);
  const bytes = new TextEncoder().encode(text);
  try {
    using file = await Deno.open(temp, { write: true, createNew: true, mode });
    if (Deno.build.os !== "windows") await Deno.chmod(temp, mode);
    for (let done = 0; done < bytes.length;) done += await file.write(bytes.subarray(done));
    await file.sync();
  } catch (err) {
    await removeIfPresent(temp);
    throw err;
  }
  await Deno.rename(temp, path);
}

/** 16 random bytes as a positive DER integer without a leading zero byte. */
function randomSerial(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[0] = ((bytes[0] ?? 0) & 0x7f) | 0x40;
  return [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
}

function daysUntil(date: Date): number {
  return Math.ceil((date.getTime() - Date.now()) / DAY_MS);
}

function day(date: Date): string {
  return date.toISOString().slice(0, 10);
}

function positiveInteger(name: string, value: number): number {
  if (Number.isInteger(value) && value > 0) return value;
  throw invalid(
    `Cannot issue certificates as '${name}' must be a positive integer: current value is ${value}`,
  );
}

function invalid(message: string): IopError {
  return new IopError("INVALID_ARGUMENT", message);
}

function noCa(root: string, action: string): IopError {
  return new IopError(
    "NOT_FOUND",
    `Cannot ${action} as ${join(root, CA_BUNDLE)} does not exist; run 'deno task certs' first`,
  );
}
