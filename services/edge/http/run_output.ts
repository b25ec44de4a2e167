/**
 * `GET /api/iop/nodes/{node}/runs/{runId}/output`: one run's whole output as its Node keeps it
 * (up to the Node's `history.output_cap_bytes`), as `text/plain`. 404 for an unknown node or a
 * run the node's history does not have, 503 when the node is configured but not connected. The
 * `X-IOP-Output-Truncated` header says whether the run printed more than was kept. Build and
 * deploy logs may hold secrets and any tenant's answers, so with API keys configured only an
 * operator tenant's key reads it (`tenants[].operator`; the `http.api_keys` tenant is one).
 * @module
 */
import type { Handler, MiddlewareHandler } from "hono";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { httpStatusOf, toIopError } from "../../../shared/errors.ts";
import type { OpsGateway, RunGateway } from "../ports.ts";
import { apiKeyAuth, operatorOnly } from "./auth.ts";

/** The path the route is mounted at. */
export const RUN_OUTPUT_PATH = "/api/iop/nodes/:node/runs/:runId/output";

/** What the route uses of the service layer. */
export type RunOutputGateway = RunGateway & Pick<OpsGateway, "nodeCommand">;

/**
 * The guards of an operator view (an accepted key, of an operator tenant), answering in plain
 * text: 401 without an accepted key, 403 for a tenant that is not an operator.
 */
export function operatorGuards(service: RunGateway): [MiddlewareHandler, MiddlewareHandler] {
  return [
    apiKeyAuth({
      tenants: () => service.config.tenants,
      unauthorized: (c, message) => c.text(`${message}\n`, 401),
    }),
    operatorOnly((c, message) => c.text(`${message}\n`, 403)),
  ];
}

/** The guards and the handler of {@linkcode RUN_OUTPUT_PATH}. */
export function runOutputRoute(
  service: RunOutputGateway,
): [MiddlewareHandler, MiddlewareHandler, Handler] {
  const handler: Handler = async function runOutput(c) {
    const node = c.req.param("node") ?? "";
    const runId = c.req.param("runId") ?? "";
    try {
      const result = await service.nodeCommand(node, { type: "run_output", runId });
      if (result.type !== "run_output" || !result.found) {
        return c.text(`Cannot find run '${runId}' in the history of node '${node}'\n`, 404);
      }
      return c.text(result.output, 200, {
        "X-IOP-Output-Truncated": String(result.truncated),
      });
    } catch (err) {
      const e = toIopError(err);
      return c.text(`${e.code}: ${e.message}\n`, httpStatusOf(e.code) as ContentfulStatusCode);
    }
  };
  return [...operatorGuards(service), handler];
}
