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
import { daprAnswer, HttpError, sendError, utf8Body } from '../http-errors.js';
import { daprTryLock, daprUnlock } from '../lock-operations.js';
import {
  type DaprLockBody,
  type DaprUnlockBody,
  daprLockSchema,
  daprUnlockSchema,
} from '../schemas.js';
import type { RouteContext } from './context.js';

/** Every path of Dapr's API starts with this. */
export const DAPR_PATH_PREFIX = '/v1.0-alpha1/';

/**
 * Register Dapr's lock and unlock routes, in a scope of their own: its body parser takes any
 * Content-Type as JSON and its error handler answers in Dapr's codes, leaving fencelock's
 * routes as they are. The operations are `lock-operations.ts`, shared with gRPC.
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
        try {
          const { success, grant } = await daprTryLock(ctx, {
            storeName: request.params.storeName,
            ...request.body,
          });
          if (grant !== null) {
            reply.header('fencelock-fencing-token', grant.fencingToken);
            reply.header('fencelock-ttl-ms', String(grant.ttlMs));
          }
          return { success };
        } catch (error) {
          throw daprAnswer(error as HttpError, 'lock');
        }
      },
    );

    scope.post<{ Params: { storeName: string }; Body: DaprUnlockBody }>(
      `${DAPR_PATH_PREFIX}unlock/:storeName`,
      { schema: daprUnlockSchema },
      async (request) => {
        try {
          return await daprUnlock(ctx, { storeName: request.params.storeName, ...request.body });
        } catch (error) {
          throw daprAnswer(error as HttpError, 'unlock');
        }
      },
    );
  });
}
