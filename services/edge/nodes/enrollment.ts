/**
 * Nodes that joined by an enrollment rule instead of a `nodes` entry: the Edge's in-memory
 * overlay on its config file. A node whose id a rule's `node_ids` admit and who presents the
 * rule's token (with mutual TLS: shows a certificate naming `iop://node/<id>` or the rule's
 * `iop://enroll/<rule>`) gets a record built from the rule's template; the service appends the
 * enrolled records to the file's `nodes` in the config snapshot in force, so routing, pools,
 * status and the model listings see them as they see listed nodes.
 *
 * Bounds and lifetime:
 * - A rule holds at most `max_nodes` records. When it is full, a new node takes the place of the
 *   record disconnected longest; with every one of them connected it is refused.
 * - A node enrolled under an id that is connected (or registering) is refused: the rule's token is
 *   shared, so a second holder must not take over a running node's id. The node retries; once
 *   the first connection ends (at the latest after three missed heartbeats) it gets in.
 *
 * Who may come back under an enrolled id: the rule's token (and its `enroll/<rule>` certificate)
 * are shared by all its nodes, so they cannot tell one node from another. A kept record is
 * therefore bound to what only the node that enrolled showed: its node key
 * (`RegisterRequest.node_key`, a random secret each Node keeps in its state directory; stored
 * here as a hash) and, when it showed one, a certificate naming `iop://node/<id>`. A
 * registration under that id must show both again until the record goes; another holder of the
 * rule's token is refused (`id_held`), even during a blip of the real node. Limits: the first
 * node to claim a free id holds it (the rule's token is all it takes, so rules should admit only
 * the ids of their hosts); a node that lost its key file is refused until its record goes
 * (`retain_disconnected_ms` after it disconnected; a reload that drops the record frees it at
 * once). A node that said it was stopping (it drained before a restart or an update) gives its
 * id up when its link closes (its record goes): the next claimant enrolls afresh, so a replaced container with a
 * new key file takes its place at once. A node that sends no key (an older Node) binds its record only by a node certificate,
 * and without one any holder of the rule's token can take the id while it is disconnected.
 * - A disconnected node keeps its record (shown as disconnected) for the rule's
 *   `retain_disconnected_ms`, then the record goes at the next registration, status read or
 *   reload.
 * - A reload keeps each record whose rule is still there, still admits the id and whose id is not
 *   now listed under `nodes`, rebuilt from the new template; a rule's lowered `max_nodes` keeps the
 *   connected records first. The service then reconciles the connected nodes as on any reload
 *   (a changed token disconnects them).
 * @module
 */
import type { Logger } from "../../../shared/log.ts";
import { hashSecret, secretMatches } from "../../../shared/secrets.ts";
import type { EdgeConfig, EnrollmentRule, NodeRecord } from "../config.ts";
import type { EdgeMetrics } from "../edge_metrics.ts";
import { matchesPattern } from "../tenants/tenant.ts";
import {
  type Admission,
  refused,
  type RegistrationClaim,
  type Seat,
  shownId,
} from "./admission.ts";
import { enrolledRecord } from "./enrollment_config.ts";
import { ENROLLABLE_ID } from "./enrollment_template.ts";
import type { NodeStore } from "./node_store.ts";

/** Options of {@linkcode Enrollment}. */
export interface EnrollmentOptions {
  logger: Logger;
  /** Defaults to Date.now. */
  now?: () => number;
  /** Called after a node enrolled or a record went, to rebuild the config snapshot in force. */
  onChange: () => void;
  /** Records `iop_edge_enrolled_nodes`; absent = not recorded. */
  metrics?: EdgeMetrics;
}

interface Entry {
  id: string;
  rule: string;
  record: NodeRecord;
  /** `pending`: admitted, its answer on the way; the id is taken as if connected. */
  state: "pending" | "connected" | "disconnected";
  enrolledAtMs: number;
  /** When it disconnected; meaningful in state `disconnected`. */
  disconnectedAtMs: number;
  /** It enrolled showing a certificate naming `iop://node/<id>`: a readmission must show it. */
  nodeCertificate: boolean;
  /** The hash of the node key it enrolled with; a readmission must present that key. */
  nodeKeyHash: string | undefined;
  /** Counts its admissions: only the seat of the latest one moves it. */
  admissions: number;
}

/** What a node holding no rule's token is told, whether or not a rule admits its id. */
function unknown(id: string): Admission {
  return refused("unknown_node", `unknown node id '${shownId(id)}' or wrong node token`);
}

/** The enrolled nodes of one Edge and the rules in force. */
export class Enrollment {
  #config: EdgeConfig;
  readonly #entries = new Map<string, Entry>();
  readonly #logger: Logger;
  readonly #now: () => number;
  readonly #onChange: () => void;
  readonly #metrics: EdgeMetrics | undefined;

  constructor(config: EdgeConfig, options: EnrollmentOptions) {
    this.#config = config;
    this.#logger = options.logger;
    this.#now = options.now ?? Date.now;
    this.#onChange = options.onChange;
    this.#metrics = options.metrics;
    this.#record();
  }

  /** `file` with every enrolled record appended to its nodes (`file` itself when none). */
  overlay(file: EdgeConfig): EdgeConfig {
    if (this.#entries.size === 0) return file;
    return { ...file, nodes: [...file.nodes, ...this.records()] };
  }

  /** The enrolled records, in the order they enrolled. */
  records(): NodeRecord[] {
    return [...this.#entries.values()].map((e) => e.record);
  }

  /**
   * Admits an unlisted node by a rule, or says why not; `store` is the snapshot in force (listed
   * and enrolled records), for the names an enrolled record must not take. Only a peer holding
   * a rule's token (and, with mutual TLS, a certificate for the id or that rule) learns anything
   * of the rules: the others are told the same whether or not a rule admits the id.
   */
  admit(claim: RegistrationClaim, store: NodeStore): Admission {
    this.prune();
    const id = claim.nodeId;
    const rules = this.#config.enrollment;
    // The shape first: it bounds the id that the patterns are matched against.
    if (!ENROLLABLE_ID.test(id)) {
      if (!rules.some((r) => secretMatches(claim.token, r.token))) return unknown(id);
      return refused(
        "invalid_id",
        `node id '${shownId(id)}' cannot be enrolled: it must be 1 to 128 letters, digits, ` +
          `'.', '_' or '-', starting with a letter or digit`,
      );
    }
    const existing = this.#entries.get(id);
    const matching = rules.filter((r) =>
      matchesPattern(r.nodeIds, id) && (!existing || existing.rule === r.name)
    );
    // The certificate first: a node certificate for this id, or the enrollment certificate of
    // a rule that admits it; the token is then checked against those rules only.
    const nodeCertificate = claim.mutualTls && claim.peerIds.includes(`node/${id}`);
    const shows = (r: EnrollmentRule) =>
      !claim.mutualTls || nodeCertificate || claim.peerIds.includes(`enroll/${r.name}`);
    if (matching.length === 0) {
      // The patterns are shown only to a holder of a rule's token and certificate.
      const holder = rules.find((r) => shows(r) && secretMatches(claim.token, r.token));
      if (holder) {
        return refused(
          "id_not_admitted",
          `node id '${id}' is not admitted by enrollment rule '${holder.name}' ` +
            `(node_ids: ${holder.nodeIds.join(", ")})`,
        );
      }
      return claim.mutualTls && !nodeCertificate ? this.#wrongCertificate(claim) : unknown(id);
    }
    const allowed = matching.filter(shows);
    if (allowed.length === 0) return this.#wrongCertificate(claim);
    const rule = allowed.find((r) => secretMatches(claim.token, r.token));
    if (!rule) {
      return refused("wrong_token", `unknown node id '${id}' or wrong node token`);
    }
    if (existing) {
      const held = heldBy(existing, claim, nodeCertificate);
      if (held) return held;
    }
    if (existing && existing.state !== "disconnected") {
      return refused(
        "duplicate",
        `node '${id}' enrolled under rule '${rule.name}' is connected already; a second node ` +
          `cannot take its id while the first is connected`,
      );
    }
    return existing ? this.#readmit(existing) : this.#enroll(rule, claim, nodeCertificate, store);
  }

  /** The certificate names neither the id nor a rule admitting it (which rules, it is not told). */
  #wrongCertificate(claim: RegistrationClaim): Admission {
    const shown = claim.peerIds.length > 0 ? claim.peerIds.join(", ") : "no iop:// identity";
    return refused(
      "certificate",
      `client certificate is not for node '${claim.nodeId}' nor for an enrollment rule ` +
        `admitting it (it names ${shown})`,
    );
  }

  #readmit(entry: Entry): Admission {
    entry.state = "pending";
    return { ok: true, record: entry.record, seat: this.#seat(entry) };
  }

  #enroll(
    rule: EnrollmentRule,
    claim: RegistrationClaim,
    nodeCertificate: boolean,
    store: NodeStore,
  ): Admission {
    const id = claim.nodeId;
    const ofRule = [...this.#entries.values()].filter((e) => e.rule === rule.name);
    const away = ofRule.filter((e) => e.state === "disconnected")
      .sort((a, b) => a.disconnectedAtMs - b.disconnectedAtMs)[0];
    if (ofRule.length >= rule.maxNodes && !away) {
      return refused(
        "rule_full",
        `enrollment rule '${rule.name}' is full: its ${rule.maxNodes} nodes (max_nodes) are ` +
          `connected`,
      );
    }
    let record: NodeRecord;
    try {
      record = enrolledRecord(rule, id, this.#config.file);
    } catch (err) {
      return refused(
        "template",
        `cannot build node '${id}' from enrollment rule '${rule.name}': ${(err as Error).message}`,
      );
    }
    const clash = nameClash(record, store.list().filter((n) => n.id !== id));
    if (clash) return refused("name_taken", `cannot enroll node '${id}': ${clash}`);
    if (ofRule.length >= rule.maxNodes && away) {
      this.#entries.delete(away.id);
      this.#logger.info("enrolled node record dropped to make room", {
        node_id: away.id,
        rule: rule.name,
      });
    }
    const entry: Entry = {
      id,
      rule: rule.name,
      record,
      state: "pending",
      enrolledAtMs: this.#now(),
      disconnectedAtMs: 0,
      nodeCertificate,
      nodeKeyHash: claim.nodeKey === "" ? undefined : hashSecret(claim.nodeKey),
      admissions: 0,
    };
    this.#entries.set(id, entry);
    this.#logger.info("node enrolled", {
      node_id: id,
      rule: rule.name,
      bound_to: [
        ...(nodeCertificate ? ["node certificate"] : []),
        ...(entry.nodeKeyHash ? ["node key"] : []),
      ].join(", ") || "nothing",
    });
    this.#changed();
    return { ok: true, record, seat: this.#seat(entry) };
  }

  /** The seat of the entry's admission just made (see {@linkcode Seat}). */
  #seat(entry: Entry): Seat {
    const admission = ++entry.admissions;
    const current = () => this.#entries.get(entry.id) === entry && entry.admissions === admission;
    return {
      connected: () => {
        if (current() && entry.state === "pending") entry.state = "connected";
      },
      release: (stopped = false) => {
        if (!current() || entry.state === "disconnected") return;
        if (stopped) {
          // It left on purpose: its record goes, and the id is free for its replacement.
          this.#entries.delete(entry.id);
          this.#changed();
          return;
        }
        entry.state = "disconnected";
        entry.disconnectedAtMs = this.#now();
      },
    };
  }

  /** Removes the records of nodes disconnected longer than their rule keeps them. */
  prune(): void {
    const now = this.#now();
    let removed = false;
    for (const [id, entry] of this.#entries) {
      if (entry.state !== "disconnected") continue;
      const rule = this.#config.enrollment.find((r) => r.name === entry.rule);
      if (rule && now - entry.disconnectedAtMs <= rule.retainDisconnectedMs) continue;
      this.#entries.delete(id);
      removed = true;
      this.#logger.info("enrolled node record removed after its disconnection", {
        node_id: id,
        rule: entry.rule,
      });
    }
    if (removed) this.#changed();
  }

  /**
   * Takes a new file config's rules: keeps each record its rule still admits, rebuilt from the
   * new template; drops the others (logged). Does not call `onChange`: the caller swaps in the
   * whole new snapshot.
   */
  rebase(file: EdgeConfig): void {
    this.#config = file;
    const listed = file.nodes;
    const kept: NodeRecord[] = [];
    // Connected records first, so that a lowered max_nodes drops disconnected ones.
    const order = [...this.#entries.values()].sort((a, b) =>
      Number(a.state === "disconnected") - Number(b.state === "disconnected") ||
      a.enrolledAtMs - b.enrolledAtMs
    );
    const perRule = new Map<string, number>();
    for (const entry of order) {
      const id = entry.id;
      const rule = file.enrollment.find((r) => r.name === entry.rule);
      let why: string | undefined;
      if (!rule) why = "its enrollment rule was removed";
      else if (listed.some((n) => n.id === id)) why = "the id is now listed under nodes";
      else if (!matchesPattern(rule.nodeIds, id)) why = "the rule's node_ids no longer admit it";
      else if ((perRule.get(rule.name) ?? 0) >= rule.maxNodes) why = "the rule's max_nodes";
      else {
        try {
          entry.record = enrolledRecord(rule, id, file.file);
          why = nameClash(entry.record, [...listed, ...kept]);
        } catch (err) {
          why = `its template no longer builds: ${(err as Error).message}`;
        }
      }
      if (why === undefined) {
        kept.push(entry.record);
        perRule.set(entry.rule, (perRule.get(entry.rule) ?? 0) + 1);
        continue;
      }
      this.#entries.delete(id);
      this.#logger.warn("enrolled node dropped by the new config", {
        node_id: id,
        rule: entry.rule,
        reason: why,
      });
    }
    this.#record();
  }

  #changed(): void {
    this.#record();
    this.#onChange();
  }

  /** Sets the enrolled-node gauge of every rule in force (0 for an empty rule). */
  #record(): void {
    const gauge = this.#metrics?.enrolledNodes;
    if (!gauge) return;
    gauge.reset();
    for (const rule of this.#config.enrollment) {
      const count = [...this.#entries.values()].filter((e) => e.rule === rule.name).length;
      gauge.labels(rule.name).set(count);
    }
  }
}

/** Why `record` cannot join `others`: its id, alias or a provider id is already taken. */
function nameClash(record: NodeRecord, others: readonly NodeRecord[]): string | undefined {
  const names = new Set(others.flatMap((n) => [n.id, n.alias]).filter((n) => n !== ""));
  for (const name of new Set([record.id, record.alias].filter((n) => n !== ""))) {
    if (names.has(name)) return `the name '${name}' is already another node's id or alias`;
  }
  const providers = new Set(others.flatMap((n) => n.providers.map((p) => p.id)));
  const taken = record.providers.find((p) => providers.has(p.id));
  return taken ? `provider id '${taken.id}' is already another node's` : undefined;
}

/**
 * The refusal of a claim on a kept record that does not show what its node enrolled with: the
 * node certificate, the node key; undefined when it shows both (or the record is bound to
 * neither).
 */
function heldBy(
  entry: Entry,
  claim: RegistrationClaim,
  nodeCertificate: boolean,
): Admission | undefined {
  const missing = [
    ...(entry.nodeCertificate && !nodeCertificate ? ["certificate naming iop://node/<id>"] : []),
    ...(entry.nodeKeyHash && !secretMatches(claim.nodeKey, entry.nodeKeyHash) ? ["node key"] : []),
  ];
  if (missing.length === 0) return undefined;
  return refused(
    "id_held",
    `node id '${entry.id}' is held by the node that enrolled under it (rule '${entry.rule}'): ` +
      `a registration under it must show that node's ${missing.join(" and ")} until its record ` +
      `goes (the rule's retain_disconnected_ms after it disconnected)`,
  );
}
