/**
 * The `x-iop-session` header: how an OpenAI or Ollama client names the session a run continues
 * (a CLI agent's conversation lives on the node that ran it), and learns the one it started.
 * @module
 */
import type { RunGateway } from "../ports.ts";
import type { ResolvedModel } from "./model_resolver.ts";
import { newSessionId } from "../sessions.ts";

/** The request and response header that carries a session id. */
export const SESSION_HEADER = "x-iop-session";

/**
 * The session a request runs in: the one its header names (checked by the service layer), or
 * for a CLI profile a new one, so the first turn already has an id the client can read back and
 * continue. Model runs are stateless: no session (and no affinity entry) unless the client
 * sends one.
 */
export function sessionFor(
  request: Request,
  model: ResolvedModel,
  service: Pick<RunGateway, "keepsSessions">,
): string {
  const named = request.headers.get(SESSION_HEADER)?.trim() ?? "";
  if (named !== "") return named;
  return model.route === "direct" && service.keepsSessions(model.adapter) ? newSessionId() : "";
}

/** Response headers that hand the session id back; none when the run has no session. */
export function sessionHeaders(sessionId: string): Record<string, string> {
  return sessionId ? { [SESSION_HEADER]: sessionId } : {};
}
