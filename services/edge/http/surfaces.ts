/**
 * Mounts the Edge's public API surfaces onto its HTTP app. Each surface is a Hono sub-app built
 * from the service layer; none reaches a backend except through a run on a Node.
 * @module
 */
import type { Hono } from "hono";
import type { Registry } from "prom-client";
import type { Logger } from "../../../shared/log.ts";
import type { EdgeService } from "../service.ts";

/** What every surface may use. */
export interface SurfaceDeps {
  service: EdgeService;
  registry: Registry;
  logger: Logger;
}

/** Adds every public surface to `app`. */
export function mountSurfaces(_app: Hono, _deps: SurfaceDeps): void {
}
