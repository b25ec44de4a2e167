/**
 * The A2A surface of the Edge as two web-standard handlers, mounted by `http/surfaces.ts`:
 *
 * - `GET /.well-known/agent-card.json` — the default agent's card (the first agent of kind a2a);
 * - `GET /a2a/<agent-id>/.well-known/agent-card.json` — each agent's card;
 * - `POST /a2a/<agent-id>` — the agent's JSON-RPC endpoint (A2A 1.0 and 0.3); `POST /a2a`
 *   serves the default agent.
 *
 * A card request with `A2A-Version: 1.x` gets a pure 1.0 card; any other also carries the 0.3
 * fields. Agents are looked up in the config in force, so a reload publishes new ones.
 *
 * Cards are public. JSON-RPC is served as the calling tenant: a tenant whose `agents` patterns
 * do not match the agent gets exactly the 404 an unknown agent gets, so it cannot tell the two
 * apart; its tasks are its own (`task_manager.ts`).
 * @module
 */
import type { Logger } from "../../../shared/log.ts";
import type { AgentRecord, EdgeConfig } from "../config.ts";
import { tenantDirectory } from "../tenants/directory.ts";
import { mayUseAgent, type TenantRecord } from "../tenants/tenant.ts";
import { buildAgentCard } from "./card.ts";
import { handleRpc } from "./dispatcher.ts";
import type { A2aTaskManager } from "./task_manager.ts";

/** What the A2A surface needs. */
export interface A2aSurfaceOptions {
  config: () => EdgeConfig;
  tasks: A2aTaskManager;
  logger: Logger;
  /** Version string cards publish. */
  version: string;
}

/** The A2A request handlers. */
export interface A2aSurface {
  /** Serves an agent card; `agentId` absent means the default agent. */
  card(request: Request, agentId?: string): Response;
  /**
   * Serves a JSON-RPC request of `caller` (the tenant `apiKeyAuth` identified); `agentId`
   * undefined means the default agent.
   */
  rpc(request: Request, agentId: string | undefined, caller: TenantRecord): Promise<Response>;
}

/** Builds the A2A surface. */
export function createA2aSurface(options: A2aSurfaceOptions): A2aSurface {
  const find = (agentId: string | undefined): AgentRecord | undefined => {
    const agents = options.config().agents.filter((a) => a.kind === "a2a");
    return agentId === undefined ? agents[0] : agents.find((a) => a.id === agentId);
  };
  const notFound = (agentId: string | undefined) =>
    agentId === undefined
      ? "This Edge publishes no A2A agent"
      : `This Edge publishes no A2A agent '${agentId}'`;
  return {
    card(request, agentId) {
      const agent = find(agentId);
      if (!agent) return Response.json({ error: notFound(agentId) }, { status: 404 });
      const publicUrl = options.config().a2a.publicUrl.replace(/\/+$/, "");
      const version = request.headers.get("A2A-Version")?.trim() ?? "";
      return Response.json(buildAgentCard(agent, {
        baseUrl: publicUrl || new URL(request.url).origin,
        version: options.version,
        legacy: !version.startsWith("1"),
        bearerAuth: tenantDirectory(options.config().tenants).keysRequired,
      }));
    },
    async rpc(request, agentId, caller) {
      const agent = find(agentId);
      if (!agent || !mayUseAgent(caller, agent.id)) {
        return Response.json({
          jsonrpc: "2.0",
          id: null,
          error: { code: -32600, message: notFound(agentId) },
        }, { status: 404 });
      }
      return await handleRpc(request, {
        agent,
        caller,
        tasks: options.tasks,
        logger: options.logger,
        stallTimeoutMs: options.config().runs.stallTimeoutMs,
        keepAliveMs: options.config().http.sseKeepaliveMs,
        windowBytes: options.config().runs.windowBytes,
      });
    },
  };
}
