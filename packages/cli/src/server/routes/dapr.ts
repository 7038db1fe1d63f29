/**
 * Dapr's distributed-lock API (alpha1), request and response shapes as Dapr defines them, so
 * Dapr clients work unchanged:
 * - `POST /v1.0-alpha1/lock/{storeName}` `{ resourceId, lockOwner, expiryInSeconds }` →
 *   200 `{ success }` (one attempt, no waiting). A grant also sets the headers
 *   `fencelock-fencing-token` (decimal) and `fencelock-ttl-ms` (the TTL the engine applied).
 * - `POST /v1.0-alpha1/unlock/{storeName}` `{ resourceId, lockOwner }` → 200 `{ status }`:
 *   0 released, 1 the lock does not exist, 2 it belongs to another owner.
 * Errors as Dapr's HTTP API answers them (its runtime's predefined error messages), in
 * `{ errorCode, message }` bodies: another store name → 400 `ERR_LOCK_STORE_NOT_FOUND`; bad
 * input (a missing, empty or mistyped field, a non-positive `expiryInSeconds`, malformed JSON)
 * → 400 `ERR_MALFORMED_REQUEST`, with the `field` named as on fencelock's routes; an engine
 * failure → 500 `ERR_TRY_LOCK` on lock, 500 `ERR_UNLOCK` with `status: 3` on unlock.
 * Like Dapr (`UniversalHTTPHandler`: protojson with `DiscardUnknown`), these routes read the
 * body as JSON whatever its Content-Type (a bare `curl -d` sends
 * `application/x-www-form-urlencoded`), take an empty body as `{}`, and ignore unknown fields.
 * Unlike protojson, a number sent as a string (`"60"`) is refused (failure scenario T06,
 * test/integration/handed/t06-invalid-ttl.test.ts).
 * `resourceId` is the lock key; `lockOwner` maps to a backend owner id (see `owner.ts`).
 */
import type { FastifyInstance } from 'fastify';
import type { ReleaseOutcome } from 'fencelock';
import { daprAnswer, fromLockError, HttpError, sendError, utf8Body } from '../http-errors.js';
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

/** Every path of Dapr's API starts with this. */
export const DAPR_PATH_PREFIX = '/v1.0-alpha1/';

/** Dapr's unlock status codes. */
export const UNLOCK_STATUS: Readonly<Record<ReleaseOutcome, number>> = Object.freeze({
  released: 0,
  'not-held': 1,
  'not-owner': 2,
});

/**
 * Register Dapr's lock and unlock routes, in a scope of their own: its body parser takes any
 * Content-Type as JSON and its error handler answers in Dapr's codes, leaving fencelock's
 * routes as they are.
 */
export function registerDaprRoutes(app: FastifyInstance, ctx: RouteContext): void {
  app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    const parseJson = scope.getDefaultJsonParser('error', 'error');
    scope.addContentTypeParser('*', { parseAs: 'buffer' }, (request, body: Buffer, done) => {
      const text = utf8Body(body);
      if (text instanceof HttpError) done(text, undefined);
      // Dapr leaves the request empty when the body is (then refuses its empty fields).
      else if (text.length === 0) done(null, {});
      else void parseJson(request, text, done); // answers through `done`
    });
    scope.setErrorHandler((error, request, reply) =>
      sendError(reply, daprAnswer(ctx.answer(error, request))),
    );

    scope.post<{ Params: { storeName: string }; Body: DaprLockBody }>(
      `${DAPR_PATH_PREFIX}lock/:storeName`,
      { schema: daprLockSchema },
      async (request, reply) => {
        assertStore(ctx, request.params.storeName);
        const { resourceId, lockOwner, expiryInSeconds } = request.body;
        try {
          const grant = await ctx.locker.tryAcquireForOwner(
            resourceId,
            ownerIdFor(lockOwner, resourceId),
            { ttlMs: expiryInSeconds * 1000 },
          );
          if (grant !== null) {
            reply.header('fencelock-fencing-token', grant.fencingToken.toString());
            reply.header('fencelock-ttl-ms', String(grant.ttlMs));
          }
          return { success: grant !== null };
        } catch (error) {
          throw daprAnswer(
            fromLockError(error, DAPR_FIELDS, ctx.allowed, ctx.shutdown.aborted),
            'lock',
          );
        }
      },
    );

    scope.post<{ Params: { storeName: string }; Body: DaprUnlockBody }>(
      `${DAPR_PATH_PREFIX}unlock/:storeName`,
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
          throw daprAnswer(
            fromLockError(error, DAPR_FIELDS, ctx.allowed, ctx.shutdown.aborted),
            'unlock',
          );
        }
      },
    );
  });
}

/** 400 `ERR_LOCK_STORE_NOT_FOUND` for a store name this sidecar does not serve, as Dapr. */
function assertStore(ctx: RouteContext, storeName: string): void {
  if (storeName !== ctx.storeName) {
    throw new HttpError(400, {
      errorCode: 'ERR_LOCK_STORE_NOT_FOUND',
      message: `lock store ${JSON.stringify(storeName)} not found (this sidecar serves ${JSON.stringify(ctx.storeName)})`,
    });
  }
}
