/**
 * fencelock's extensions under `/v1/locks/{key}` (the key URL-encoded): acquire with a wait,
 * renew, release and inspect. Every grant answers `{ key, owner, ownerId, fencingToken, ttlMs }`
 * with the fencing token as a decimal string and `ttlMs` as the engine applied it. Renew and
 * release need the owner name and the fencing token of the grant. With `permits` (1 to 10,000) an
 * acquire takes one permit of the semaphore `key` instead of the lock, and renew and release name
 * the same `permits`. A refused renewal counts in
 * `fencelock_renew_failures_total`, not as a lost lease (see `Locker.renewForOwner`).
 */
import type { FastifyInstance } from 'fastify';
import { acquire, inspect, release, renew } from '../lock-operations.js';
import {
  type AcquireBody,
  acquireSchema,
  inspectSchema,
  type ReleaseBody,
  type RenewBody,
  releaseSchema,
  renewSchema,
} from '../schemas.js';
import type { RouteContext } from './context.js';

type KeyParams = { Params: { key: string } };

/** Register the `/v1/locks/{key}` routes (the operations are `lock-operations.ts`). */
export function registerLockRoutes(app: FastifyInstance, ctx: RouteContext): void {
  app.post<KeyParams & { Body: AcquireBody }>(
    '/v1/locks/:key/acquire',
    { schema: acquireSchema(ctx.maxWaitMs) },
    async (request, reply) => {
      // The caller hung up before its answer: stop waiting. A grant that still comes is released
      // when the owner name was made up here, else left to its TTL (lock-operations.ts).
      const gone = new AbortController();
      const onClose = () => gone.abort();
      reply.raw.once('close', onClose);
      try {
        return await acquire(ctx, {
          key: request.params.key,
          owner: request.body.owner,
          ttlMs: request.body.ttlMs,
          waitMs: request.body.waitMs,
          permits: request.body.permits,
          signal: gone.signal,
        });
      } finally {
        reply.raw.off('close', onClose);
      }
    },
  );

  app.post<KeyParams & { Body: RenewBody }>(
    '/v1/locks/:key/renew',
    { schema: renewSchema },
    async (request) => renew(ctx, { key: request.params.key, ...request.body }),
  );

  app.post<KeyParams & { Body: ReleaseBody }>(
    '/v1/locks/:key/release',
    { schema: releaseSchema },
    async (request) => release(ctx, { key: request.params.key, ...request.body }),
  );

  app.get<KeyParams & { Querystring: { owner?: string } }>(
    '/v1/locks/:key',
    { schema: inspectSchema },
    async (request) => inspect(ctx, { key: request.params.key, owner: request.query.owner }),
  );
}
