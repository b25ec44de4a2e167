/**
 * Certificates for tests: one fleet CA per test process (made by the same code as
 * `deno task certs`), with a certificate for each service issued on first use, and the config
 * shapes that point a tier at them.
 * @module
 */
import {
  ensureFleetCertificates,
  type FleetCertificates,
  type ServiceIdentity,
} from "../deploy/fleet_certs.ts";
import type { DialTlsFiles, ListenTls } from "../shared/wire/tls.ts";

let dir: Promise<string> | undefined;
let queue: Promise<unknown> = Promise.resolve();

/** The test process's certificate directory, with a certificate for each given service. */
export function testCertificates(...services: ServiceIdentity[]): Promise<FleetCertificates> {
  dir ??= Deno.makeTempDir({ prefix: "iop-test-certs-" }).then((d) => {
    globalThis.addEventListener("unload", () => {
      try {
        Deno.removeSync(d, { recursive: true });
      } catch {
        // Gone already.
      }
    });
    return d;
  });
  // One issuer at a time: concurrent tests must not both create the CA.
  const next = queue.then(async () => ensureFleetCertificates(await dir!, services));
  queue = next.catch(() => {});
  return next;
}

/** A CA and certificates nobody in the fleet trusts: what an impostor holds. */
export async function foreignCertificates(
  ...services: ServiceIdentity[]
): Promise<FleetCertificates> {
  const foreign = await Deno.makeTempDir({ prefix: "iop-foreign-certs-" });
  globalThis.addEventListener("unload", () => {
    try {
      Deno.removeSync(foreign, { recursive: true });
    } catch {
      // Gone already.
    }
  });
  return await ensureFleetCertificates(foreign, services);
}

/** The Edge id every test certificate for an Edge's node wire is issued to. */
export const TEST_EDGE_ID = "edge-test";

/** Listening PEM material of an Edge (or `cp` Control Plane) at 127.0.0.1/localhost. */
export async function listenTlsOf(
  role: "edge" | "cp",
  options: { mutual?: boolean; id?: string } = {},
): Promise<ListenTls> {
  const id = options.id ?? (role === "edge" ? TEST_EDGE_ID : "cp-test");
  const certs = await testCertificates({ role, id });
  return {
    cert: await Deno.readTextFile(certs.certFor(role, id)),
    key: await Deno.readTextFile(certs.keyFor(role, id)),
    ...(options.mutual ? { clientCa: await Deno.readTextFile(certs.ca) } : {}),
  };
}

/**
 * Dialing files of a node (or `edge` toward its Control Plane) that trusts the test CA; with
 * `clientId`, it also shows a client certificate for that id.
 */
export async function dialTlsOf(
  role: "node" | "edge",
  clientId?: string,
): Promise<DialTlsFiles> {
  const certs = await testCertificates(...(clientId ? [{ role, id: clientId }] : []));
  return {
    file: "test",
    path: role === "node" ? "edge" : "control_plane",
    caFile: certs.ca,
    serverName: "",
    certFile: clientId ? certs.certFor(role, clientId) : "",
    keyFile: clientId ? certs.keyFor(role, clientId) : "",
  };
}

/** The raw `tls` config a listener in a subprocess uses (edge `wire`, control plane `wire`). */
export async function listenTlsConfig(
  role: "edge" | "cp",
  id: string,
  options: { mutual?: boolean } = {},
): Promise<Record<string, string>> {
  const certs = await testCertificates({ role, id });
  return {
    cert: certs.certFor(role, id),
    key: certs.keyFor(role, id),
    ...(options.mutual ? { client_ca: certs.ca } : {}),
  };
}

/** The raw `tls` config a dialer in a subprocess uses (node `edge`, edge `control_plane`). */
export async function dialTlsConfig(
  role: "node" | "edge",
  clientId?: string,
): Promise<Record<string, string>> {
  const files = await dialTlsOf(role, clientId);
  return {
    ca: files.caFile,
    ...(clientId ? { cert: files.certFile, key: files.keyFile } : {}),
  };
}
