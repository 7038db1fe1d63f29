/**
 * fencelock's extensions under `/v1/locks/{key}` (the key URL-encoded): acquire with a wait,
 * renew, release and inspect. Every grant answers `{ key, owner, ownerId, fencingToken, ttlMs }`
 * with the fencing token as a decimal string and `ttlMs` as the engine applied it. Renew and
 * release need the owner name and the fencing token of the grant. With `permits` (1 to 10,000) an
 * acquire takes one permit of the semaphore `key` instead of the lock, and renew and release name
 * the same `permits`. With `mode: 'read'` an acquire takes a read grant (shared with other
 * readers); it is renewed and released like any grant, by owner and token. A refused renewal
 * counts in `fencelock_renew_failures_total`, not as a lost lease (see `Locker.renewForOwner`).
 *
 * Several keys at once, all or nothing: `POST /v1/locks/acquire-all` `{ keys, owner?, ttlMs,
 * waitMs?, mode? }` → `{ owner, grants }` (one grant per key, sorted by key), and
 * `POST /v1/locks/release-all` `{ owner, grants: [{ key, fencingToken }] }` → `{ outcomes }`.
 *
 * The held keys: `GET /v1/locks?prefix=…&limit=…&cursor=…` → `{ locks, cursor }`
 * (list-operation.ts).
 */
import type { FastifyInstance, FastifyReply } from 'fastify';
import { MULTI_KEY_BODY_LIMIT_BYTES } from '../body-limits.js';
import { type ListHeldRequest, listHeld } from '../list-operation.js';
import { acquire, acquireAll, inspect, release, releaseAll, renew } from '../lock-operations.js';
import {
  type AcquireAllBody,
  type AcquireBody,
  acquireAllSchema,
  acquireSchema,
  inspectSchema,
  listSchema,
  type ReleaseAllBody,
  type ReleaseBody,
  type RenewBody,
  releaseAllSchema,
  releaseSchema,
  renewSchema,
} from '../schemas.js';
import type { RouteContext } from './context.js';

type KeyParams = { Params: { key: string } };

/** Register the `/v1/locks` routes (the operations are `lock-operations.ts`). */
export function registerLockRoutes(app: FastifyInstance, ctx: RouteContext): void {
  app.post<KeyParams & { Body: AcquireBody }>(
    '/v1/locks/:key/acquire',
    { schema: acquireSchema(ctx.maxWaitMs) },
    async (request, reply) =>
      untilHungUp(reply, (signal) =>
        acquire(ctx, {
          key: request.params.key,
          owner: request.body.owner,
          ttlMs: request.body.ttlMs,
          waitMs: request.body.waitMs,
          permits: request.body.permits,
          mode: request.body.mode,
          lockDelayMs: request.body.lockDelayMs,
          signal,
        }),
      ),
  );

  app.post<{ Body: AcquireAllBody }>(
    '/v1/locks/acquire-all',
    { schema: acquireAllSchema(ctx.maxWaitMs), bodyLimit: MULTI_KEY_BODY_LIMIT_BYTES },
    async (request, reply) =>
      untilHungUp(reply, (signal) => acquireAll(ctx, { ...request.body, signal })),
  );

  app.post<{ Body: ReleaseAllBody }>(
    '/v1/locks/release-all',
    { schema: releaseAllSchema, bodyLimit: MULTI_KEY_BODY_LIMIT_BYTES },
    async (request) => releaseAll(ctx, request.body),
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

  app.get<{ Querystring: ListHeldRequest }>('/v1/locks', { schema: listSchema }, async (request) =>
    listHeld(ctx, request.query),
  );

  app.get<KeyParams & { Querystring: { owner?: string } }>(
    '/v1/locks/:key',
    { schema: inspectSchema },
    async (request) => inspect(ctx, { key: request.params.key, owner: request.query.owner }),
  );
}

/**
 * Run an acquire (or a campaign) with a signal aborted when the caller hangs up before its
 * answer: it stops waiting, and grants that still come are released when the owner name was made
 * up here, else left to their TTL (lock-operations.ts, election-operations.ts).
 */
export async function untilHungUp<T>(
  reply: FastifyReply,
  work: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  const gone = new AbortController();
  const onClose = () => gone.abort();
  reply.raw.once('close', onClose);
  try {
    return await work(gone.signal);
  } finally {
    reply.raw.off('close', onClose);
  }
}
