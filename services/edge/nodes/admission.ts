/**
 * Whether a registering node is admitted, and as which record: a node listed under `nodes` by
 * its own record (its token; with mutual TLS a certificate naming `iop://node/<id>`), any other
 * by an enrollment rule (`enrollment.ts`). A listed id is never enrolled. A refusal carries the
 * reason the node is told and logs, and a code from a small fixed set for the refusal metric;
 * no reason ever carries a token, and a claimed id is shown clipped (`shownId`).
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
  /** The id's enrolled record is bound to the node that enrolled (its node key or certificate). */
  | "id_held"
  /** The enrolled record's id, alias or a provider id is already another node's. */
  | "name_taken"
  /** The rule's template cannot be expanded for this id. */
  | "template";

/** Refusals that may pass on a retry soon: the node retries at its usual pace and warns. */
const TEMPORARY_REFUSALS: ReadonlySet<RefusalCode> = new Set(["duplicate", "rule_full"]);

/** True when a registration refused with `code` may pass when the node retries soon. */
export function isTemporaryRefusal(code: RefusalCode): boolean {
  return TEMPORARY_REFUSALS.has(code);
}

/** What a registering node claims, and what its TLS link shows. */
export interface RegistrationClaim {
  nodeId: string;
  token: string;
  /** The node's own secret (`RegisterRequest.node_key`); empty when it sent none. */
  nodeKey: string;
  /** The `role/id` identities of its client certificate (`peerIdentities`). */
  peerIds: readonly string[];
  /** Client certificates are required on this wire. */
  mutualTls: boolean;
}

/**
 * An admitted node's hold on its id, from its admission to its disconnection. For an enrolled
 * node it moves the enrollment entry along (registering → connected → disconnected); it acts
 * only while it is the entry's latest admission, so a late call from an earlier connection
 * leaves a newer one alone. A listed node's seat does nothing.
 */
export interface Seat {
  /** The node's registration answer went out and the service took the node. */
  connected(): void;
  /**
   * The node never got connected, or its connection ended: the id is free again. `stopped`: the
   * node had said it was stopping (a drain before a restart or an update), so it gives up its
   * id: the next node to claim it enrolls afresh, bound to its own key.
   */
  release(stopped?: boolean): void;
}

/** The seat of a listed node. */
export const LISTED_SEAT: Seat = Object.freeze({ connected: () => {}, release: () => {} });

/** The verdict on a registration. */
export type Admission =
  | { ok: true; record: NodeRecord; seat: Seat }
  | { ok: false; code: RefusalCode; reason: string };

/** A refusal. */
export function refused(code: RefusalCode, reason: string): Admission {
  return { ok: false, code, reason };
}

/** Longest claimed id shown whole in a reason or a log (the longest id a node may enroll). */
const SHOWN_ID_MAX = 128;

/** A claimed id as reasons and logs show it: clipped, since a peer may claim 16 KiB of one. */
export function shownId(id: string): string {
  return id.length <= SHOWN_ID_MAX ? id : `${id.slice(0, SHOWN_ID_MAX)}… (${id.length} chars)`;
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
  return { ok: true, record, seat: LISTED_SEAT };
}
