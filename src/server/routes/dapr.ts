/**
 * Dapr's distributed-lock API (alpha1), request and response shapes as Dapr defines them, so
 * Dapr clients work unchanged:
 * - `POST /v1.0-alpha1/lock/{storeName}` `{ resourceId, lockOwner, expiryInSeconds }` →
 *   200 `{ success }` (one attempt, no waiting). A grant also sets the headers
 *   `fencelock-fencing-token` (decimal) and `fencelock-ttl-ms` (the TTL the engine applied).
 * - `POST /v1.0-alpha1/unlock/{storeName}` `{ resourceId, lockOwner }` → 200 `{ status }`:
 *   0 released, 1 the lock does not exist, 2 it belongs to another owner; an engine failure is
 *   503 with `status: 3`.
 * `resourceId` is the lock key; `lockOwner` maps to a backend owner id (see `owner.ts`).
 */
import type { FastifyInstance } from 'fastify';
import type { ReleaseOutcome } from '../../core/backend.js';
import { fromLockError, HttpError } from '../http-errors.js';
import { ownerIdFor } from '../owner.js';
import {
  type DaprLockBody,
  type DaprUnlockBody,
  daprLockSchema,
  daprUnlockSchema,
} from '../schemas.js';
import type { RouteContext } from './context.js';

/** Core argument names as Dapr's fields. */
const DAPR_FIELDS: Readonly<Record<string, string>> = {
  key: 'resourceId',
  ttlMs: 'expiryInSeconds',
};

/** Dapr's unlock status codes. */
export const UNLOCK_STATUS: Readonly<Record<ReleaseOutcome, number>> = Object.freeze({
  released: 0,
  'not-held': 1,
  'not-owner': 2,
});

/** Register Dapr's lock and unlock routes. */
export function registerDaprRoutes(app: FastifyInstance, ctx: RouteContext): void {
  app.post<{ Params: { storeName: string }; Body: DaprLockBody }>(
    '/v1.0-alpha1/lock/:storeName',
    { schema: daprLockSchema },
    async (request, reply) => {
      assertStore(ctx, request.params.storeName);
      const { resourceId, lockOwner, expiryInSeconds } = request.body;
      try {
        const grant = await ctx.locker.tryAcquireForOwner(
          resourceId,
          ownerIdFor(lockOwner, resourceId),
          {
            ttlMs: expiryInSeconds * 1000,
          },
        );
        if (grant !== null) {
          reply.header('fencelock-fencing-token', grant.fencingToken.toString());
          reply.header('fencelock-ttl-ms', String(grant.ttlMs));
        }
        return { success: grant !== null };
      } catch (error) {
        throw fromLockError(error, DAPR_FIELDS, ctx.allowed, ctx.shutdown.aborted);
      }
    },
  );

  app.post<{ Params: { storeName: string }; Body: DaprUnlockBody }>(
    '/v1.0-alpha1/unlock/:storeName',
    { schema: daprUnlockSchema },
    async (request) => {
      assertStore(ctx, request.params.storeName);
      const { resourceId, lockOwner } = request.body;
      try {
        const outcome = await ctx.locker.releaseForOwner({
          key: resourceId,
          owner: ownerIdFor(lockOwner, resourceId),
        });
        return { status: UNLOCK_STATUS[outcome] };
      } catch (error) {
        const answer = fromLockError(error, DAPR_FIELDS, ctx.allowed, ctx.shutdown.aborted);
        if (answer.statusCode < 500) throw answer;
        throw new HttpError(answer.statusCode, { ...answer.body, status: 3 });
      }
    },
  );
}

function assertStore(ctx: RouteContext, storeName: string): void {
  if (storeName !== ctx.storeName) {
    throw new HttpError(404, {
      errorCode: 'ERR_LOCK_STORE_NOT_FOUND',
      message: `lock store ${JSON.stringify(storeName)} not found (this sidecar serves ${JSON.stringify(ctx.storeName)})`,
    });
  }
}
