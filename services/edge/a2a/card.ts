/**
 * Agent cards: what a client reads before it talks to an agent. One card per published agent
 * (config `agents` of kind `a2a`); the JSON-RPC interface serves A2A 1.0 and 0.3 at one URL.
 * @module
 */
import type { AgentRecord } from "../config.ts";

/** Where the Edge publishes an agent's card and JSON-RPC endpoint, relative to its base URL. */
export function agentPaths(agentId: string): { card: string; rpc: string } {
  const rpc = `/a2a/${encodeURIComponent(agentId)}`;
  return { card: `${rpc}/.well-known/agent-card.json`, rpc };
}

/**
 * Builds the card of `agent`. `legacy` adds the 0.3 top-level fields (`url`,
 * `protocolVersion`, `preferredTransport`) for clients that did not ask for 1.0; a 1.0 client
 * still finds `supportedInterfaces` in it.
 */
export function buildAgentCard(
  agent: AgentRecord,
  options: { baseUrl: string; version: string; legacy: boolean; bearerAuth: boolean },
): Record<string, unknown> {
  const url = `${options.baseUrl}${agentPaths(agent.id).rpc}`;
  const description = agent.description ||
    `Runs ${agent.adapter}/${agent.target} on an IOP node for each task`;
  const skills = agent.skills.length > 0
    ? agent.skills.map((s) => ({
      id: s.id,
      name: s.name,
      description: s.description || description,
      tags: s.tags,
    }))
    : [{ id: agent.id, name: agent.name, description, tags: [agent.adapter, agent.target] }];
  const card: Record<string, unknown> = {
    name: agent.name,
    description,
    supportedInterfaces: [
      { url, protocolBinding: "JSONRPC", protocolVersion: "1.0" },
      { url, protocolBinding: "JSONRPC", protocolVersion: "0.3" },
    ],
    provider: { organization: "IOP", url: options.baseUrl },
    version: options.version,
    capabilities: { streaming: true, pushNotifications: false, extendedAgentCard: false },
    defaultInputModes: ["text/plain", "application/json"],
    defaultOutputModes: ["text/plain"],
    skills,
  };
  if (options.bearerAuth) Object.assign(card, bearerSecurity(options.legacy));
  if (!options.legacy) return card;
  return { protocolVersion: "0.3.0", url, preferredTransport: "JSONRPC", ...card };
}

const BEARER_HELP =
  "An API key of this Edge (config http.api_keys), as Authorization: Bearer <key>";

/** How a card declares that JSON-RPC calls need a bearer key, in 1.0 and in 0.3 form. */
function bearerSecurity(legacy: boolean): Record<string, unknown> {
  const v1 = {
    securitySchemes: {
      bearer: { httpAuthSecurityScheme: { scheme: "Bearer", description: BEARER_HELP } },
    },
    securityRequirements: [{ schemes: { bearer: { list: [] } } }],
  };
  if (!legacy) return v1;
  return {
    ...v1,
    securitySchemes: {
      bearer: {
        ...v1.securitySchemes.bearer,
        type: "http",
        scheme: "bearer",
        description: BEARER_HELP,
      },
    },
    security: [{ bearer: [] }],
  };
}
