/**
 * Whether a registering node is admitted, and as which record: a node listed under `nodes` by
 * its own record (its token; with mutual TLS a certificate naming `iop://node/<id>`), any other
 * by an enrollment rule (`enrollment.ts`). A listed id is never enrolled. A refusal carries the
 * reason the node is told and logs, and a code from a small fixed set for the refusal metric;
 * no reason ever carries a token.
 * @module
 */
import { secretMatches } from "../../../shared/secrets.ts";
import { identityRefusal } from "../../../shared/wire/tls.ts";
import type { NodeRecord } from "../config.ts";
import type { Enrollment } from "./enrollment.ts";
import type { NodeStore } from "./node_store.ts";

/** Why a registration was refused: the `reason` label of the refusal metric. */
export type RefusalCode =
  /** The first frame was not a register request (or none came in time). */
  | "no_register"
  /** The node speaks another wire protocol version. */
  | "protocol"
  /** No listed node has the id and no enrollment rule admits it. */
  | "unknown_node"
  /** The token is not the listed node's, nor that of a rule admitting the id. */
  | "wrong_token"
  /** With mutual TLS, the certificate names neither the node nor a rule admitting it. */
  | "certificate"
  /** The token is a rule's, but the rule's `node_ids` do not admit the id. */
  | "id_not_admitted"
  /** The id cannot be enrolled (characters, length). */
  | "invalid_id"
  /** The rule holds `max_nodes` nodes, none of them disconnected. */
  | "rule_full"
  /** A node enrolled under that id is connected (or registering) now. */
  | "duplicate"
  /** The enrolled record's id, alias or a provider id is already another node's. */
  | "name_taken"
  /** The rule's template cannot be expanded for this id. */
  | "template";

/** What a registering node claims, and what its TLS link shows. */
export interface RegistrationClaim {
  nodeId: string;
  token: string;
  /** The `role/id` identities of its client certificate (`peerIdentities`). */
  peerIds: readonly string[];
  /** Client certificates are required on this wire. */
  mutualTls: boolean;
}

/** The verdict on a registration. */
export type Admission =
  | {
    ok: true;
    record: NodeRecord;
    /** Call when the node never got connected (its answer could not be sent). */
    release: () => void;
  }
  | { ok: false; code: RefusalCode; reason: string };

/** A refusal. */
export function refused(code: RefusalCode, reason: string): Admission {
  return { ok: false, code, reason };
}

/**
 * Admits a listed node by its record, any other by the enrollment rules. With mutual TLS the
 * certificate is checked before the token, so that a certificate for one node cannot be used to
 * probe another's token.
 */
export function admitNode(
  claim: RegistrationClaim,
  store: NodeStore,
  enrollment: Enrollment,
): Admission {
  const record = store.byId(claim.nodeId);
  if (!record || record.enrolledBy !== undefined) return enrollment.admit(claim, store);
  const refusal = identityRefusal(claim, claim.mutualTls, "node", claim.nodeId);
  if (refusal) return refused("certificate", refusal);
  // Compared in constant time; an empty token never matches.
  if (!secretMatches(claim.token, record.token)) {
    return refused("wrong_token", "unknown node token");
  }
  return { ok: true, record, release: () => {} };
}
