/**
 * The Control Plane's in-memory edge registry: the connection view of every edge that attached
 * since start (connected or not), each edge's last self-reported status, and a ring of its
 * recent relayed events. Stored values are Control Plane contract messages, so everything here
 * is something an Edge reported; nothing is persisted, and an Edge re-pointed elsewhere leaves
 * nothing behind that it needs.
 * @module
 */
import { clone, create } from "@bufbuild/protobuf";
import {
  type EdgeCommandRequest,
  type EdgeSelector,
  type EdgeStatusRequest,
  EdgeStatusRequestSchema,
  type EdgeStatusResponse,
  type EdgeView,
  EdgeViewSchema,
  type FleetEvent,
  FleetEventSchema,
  type NodeAnswer,
  type NodeQuery,
  type RelayedEvent,
} from "../../proto/gen/iop/v1/control_pb.ts";
import { IopError } from "../../shared/errors.ts";

/** What the registry needs from the transport to reach one attached edge. */
export interface EdgeLinkPort {
  /**
   * Asks the edge for a fresh status report, or with `request.nodeQuery` a read-only question
   * about one of its nodes (answered in the response's `nodeAnswer`).
   */
  requestStatus(timeoutMs: number, request?: EdgeStatusRequest): Promise<EdgeStatusResponse>;
  /** Sends a command; its progress and result come back through the command center. */
  sendCommand(request: EdgeCommandRequest): Promise<void>;
  close(reason: string): void;
}

/** The facts an edge announced in its hello (its credential excluded). */
export interface EdgeIntroduction {
  edgeId: string;
  version: string;
  capabilities: string[];
  labels: Record<string, string>;
}

/** One attachment of an edge; detaching an old attachment does not touch a newer one. */
export interface EdgeAttachment {
  readonly edgeId: string;
  readonly link: EdgeLinkPort;
}

interface Entry {
  view: EdgeView;
  events: RelayedEvent[];
  attachment: EdgeAttachment | undefined;
}

/** Options of {@linkcode EdgeRegistry}. */
export interface EdgeRegistryOptions {
  /** Relayed events kept per edge. */
  eventsPerEdge: number;
  /** Defaults to Date.now. */
  now?: () => number;
}

/** The edge registry. */
export class EdgeRegistry {
  readonly #entries = new Map<string, Entry>();
  readonly #listeners = new Set<(event: FleetEvent) => void>();
  readonly #options: EdgeRegistryOptions;
  readonly #now: () => number;

  constructor(options: EdgeRegistryOptions) {
    this.#options = options;
    this.#now = options.now ?? Date.now;
  }

  /** Subscribes to connection changes, status reports and relayed events. */
  subscribe(listener: (event: FleetEvent) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Records an accepted hello; an older attachment of the same edge is closed. */
  attach(intro: EdgeIntroduction, link: EdgeLinkPort): EdgeAttachment {
    const now = BigInt(this.#now());
    const previous = this.#entries.get(intro.edgeId);
    const attachment: EdgeAttachment = { edgeId: intro.edgeId, link };
    const view = create(EdgeViewSchema, {
      edgeId: intro.edgeId,
      connected: true,
      version: intro.version,
      capabilities: intro.capabilities,
      labels: intro.labels,
      connectedAtMs: now,
      lastSeenMs: now,
      ...(previous?.view.status ? { status: previous.view.status } : {}),
    });
    this.#entries.set(intro.edgeId, { view, events: previous?.events ?? [], attachment });
    previous?.attachment?.link.close("replaced by a new connection of the same edge");
    this.#emit(intro.edgeId, { case: "link", value: "connected" });
    return attachment;
  }

  /** Marks the edge disconnected, unless a newer attachment replaced this one. */
  detach(attachment: EdgeAttachment, reason: string): boolean {
    const entry = this.#entries.get(attachment.edgeId);
    if (!entry || entry.attachment !== attachment) return false;
    entry.attachment = undefined;
    entry.view.connected = false;
    entry.view.disconnectReason = reason;
    this.#emit(attachment.edgeId, { case: "link", value: "disconnected" });
    return true;
  }

  /** Notes a sign of life from the edge. */
  touch(edgeId: string): void {
    const entry = this.#entries.get(edgeId);
    if (entry) entry.view.lastSeenMs = BigInt(this.#now());
  }

  /** Stores the edge's latest status report. */
  recordStatus(edgeId: string, status: EdgeStatusResponse): void {
    const entry = this.#entries.get(edgeId);
    if (!entry) return;
    entry.view.status = status;
    this.#emit(edgeId, { case: "status", value: status });
  }

  /** Appends a relayed event to the edge's ring. */
  recordEvent(edgeId: string, event: RelayedEvent): void {
    const entry = this.#entries.get(edgeId);
    if (!entry) return;
    entry.events.push(event);
    if (entry.events.length > this.#options.eventsPerEdge) entry.events.shift();
    this.#emit(edgeId, { case: "relayed", value: event });
  }

  /** Every known edge, ordered by id; copies, so callers cannot change the registry. */
  list(): EdgeView[] {
    return [...this.#entries.keys()].sort().map((id) =>
      clone(EdgeViewSchema, this.#entries.get(id)!.view)
    );
  }

  /** One edge's view, or undefined. */
  get(edgeId: string): EdgeView | undefined {
    const entry = this.#entries.get(edgeId);
    return entry ? clone(EdgeViewSchema, entry.view) : undefined;
  }

  /** The edge's recent relayed events, oldest first, at most `limit`. */
  events(edgeId: string, limit = this.#options.eventsPerEdge): RelayedEvent[] | undefined {
    const entry = this.#entries.get(edgeId);
    return entry ? entry.events.slice(-limit) : undefined;
  }

  /** The link of a connected edge. */
  link(edgeId: string): EdgeLinkPort | undefined {
    return this.#entries.get(edgeId)?.attachment?.link;
  }

  /** Number of connected edges. */
  get connectedCount(): number {
    return [...this.#entries.values()].filter((e) => e.attachment).length;
  }

  /** Asks a connected edge for a fresh status and stores it. */
  async refresh(edgeId: string, timeoutMs: number): Promise<EdgeView> {
    const link = this.link(edgeId);
    if (!link) {
      throw new IopError(
        this.#entries.has(edgeId) ? "UNAVAILABLE" : "NOT_FOUND",
        this.#entries.has(edgeId)
          ? `Cannot refresh edge '${edgeId}' as it is not connected`
          : `Cannot find edge '${edgeId}'`,
      );
    }
    this.recordStatus(edgeId, await link.requestStatus(timeoutMs));
    return this.get(edgeId)!;
  }

  /**
   * Asks a connected edge a read-only question about one of its nodes (its history, a run's
   * output); nothing is stored. UNAVAILABLE when the edge is not connected or predates node
   * queries (it answers with a status report instead).
   */
  async queryNode(edgeId: string, query: NodeQuery, timeoutMs: number): Promise<NodeAnswer> {
    const link = this.link(edgeId);
    if (!link) {
      throw new IopError(
        this.#entries.has(edgeId) ? "UNAVAILABLE" : "NOT_FOUND",
        this.#entries.has(edgeId)
          ? `Cannot ask edge '${edgeId}' about a node as it is not connected`
          : `Cannot find edge '${edgeId}'`,
      );
    }
    const response = await link.requestStatus(
      timeoutMs,
      create(EdgeStatusRequestSchema, { nodeQuery: query }),
    );
    if (!response.nodeAnswer) {
      throw new IopError(
        "UNAVAILABLE",
        `Cannot ask edge '${edgeId}' about a node as its version does not answer node queries`,
      );
    }
    return response.nodeAnswer;
  }

  /**
   * Resolves a selector to edge ids: `all` means every connected edge; ids are taken as given
   * (unknown or disconnected ones get a failed result later); labels must all match.
   */
  select(selector: EdgeSelector): string[] {
    if (selector.all) {
      return [...this.#entries.values()].filter((e) => e.attachment).map((e) => e.view.edgeId)
        .sort();
    }
    const ids = new Set(selector.edgeIds.filter((id) => id !== ""));
    const labels = Object.entries(selector.labels);
    if (labels.length > 0) {
      for (const entry of this.#entries.values()) {
        if (labels.every(([k, v]) => entry.view.labels[k] === v)) ids.add(entry.view.edgeId);
      }
    }
    return [...ids].sort();
  }

  #emit(edgeId: string, event: FleetEvent["event"]): void {
    const fleetEvent = create(FleetEventSchema, { edgeId, event });
    for (const listener of this.#listeners) {
      try {
        listener(fleetEvent);
      } catch {
        // One broken subscriber must not starve the others; subscribers log their own errors.
      }
    }
  }
}
