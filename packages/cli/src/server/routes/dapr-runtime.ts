/**
 * The parts of Dapr's runtime API its SDKs call besides the lock API, answered as Dapr answers
 * them (docs.dapr.io, "Metadata API reference" and "Health API reference"):
 * - `GET /v1.0/metadata` → 200 with the app id, the runtime version, and the lock store as a
 *   component (`name` the store name, `type` `lock.fencelock`, `version` `v1`). Dapr's SDKs
 *   probe this route before their first call and need a non-empty 2xx answer.
 * - `GET /v1.0/healthz` and `GET /v1.0/healthz/outbound` → 204 while the sidecar serves, 500
 *   `ERR_HEALTH_NOT_READY` once it shuts down (`notReady`, from the app's shutdown hook). Both
 *   are open without a token (`OPEN_PATHS`).
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { HttpError } from '../http-errors.js';

/** Dapr's health probes. */
export const DAPR_HEALTH_PATHS = ['/v1.0/healthz', '/v1.0/healthz/outbound'] as const;

/** The answer of Dapr's health probes once the sidecar shuts down (Dapr's own code for it). */
export const notReady = (): HttpError =>
  new HttpError(500, {
    errorCode: 'ERR_HEALTH_NOT_READY',
    message: 'the sidecar is shutting down',
  });

/** The component type under which the lock store is listed in `GET /v1.0/metadata`. */
export const LOCK_COMPONENT_TYPE = 'lock.fencelock';

/** What the metadata route reports. */
export interface RuntimeInfo {
  /** Dapr's app id. */
  readonly appId: string;
  /** Reported as `runtimeVersion`: `fencelock <version of @fencelock/cli>`. */
  readonly runtimeVersion: string;
  /** Store name of the lock component. */
  readonly storeName: string;
}

/** Register Dapr's metadata and health routes. */
export function registerDaprRuntimeRoutes(app: FastifyInstance, info: RuntimeInfo): void {
  const metadata = {
    id: info.appId,
    runtimeVersion: info.runtimeVersion,
    enabledFeatures: [],
    actors: [],
    components: [
      { name: info.storeName, type: LOCK_COMPONENT_TYPE, version: 'v1', capabilities: [] },
    ],
    extended: {},
    subscriptions: [],
    httpEndpoints: [],
  };
  app.get('/v1.0/metadata', async () => metadata);

  const health = async (_request: FastifyRequest, reply: FastifyReply) => reply.code(204).send();
  for (const path of DAPR_HEALTH_PATHS) app.get(path, health);
}
