/**
 * fencelock's extensions under `/v1/locks/{key}` (the key URL-encoded): acquire with a wait,
 * renew, release and inspect. Every grant answers `{ key, owner, ownerId, fencingToken, ttlMs }`
 * with the fencing token as a decimal string and `ttlMs` as the engine applied it. Renew and
 * release need the owner name and the fencing token of the grant. A refused renewal counts in
 * `fencelock_renew_failures_total`, not as a lost lease (see `Locker.renewForOwner`).
 */
import type { FastifyInstance } from 'fastify';
import { fromLockError, HttpError } from '../http-errors.js';
import { newOwnerName, ownerIdFor } from '../owner.js';
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

/** Core argument names are the field names here. */
const FIELDS: Readonly<Record<string, string>> = {};

/** Register the `/v1/locks/{key}` routes. */
export function registerLockRoutes(app: FastifyInstance, ctx: RouteContext): void {
  const fail = (error: unknown) => fromLockError(error, FIELDS, ctx.allowed, ctx.shutdown.aborted);

  app.post<KeyParams & { Body: AcquireBody }>(
    '/v1/locks/:key/acquire',
    { schema: acquireSchema(ctx.maxWaitMs) },
    async (request, reply) => {
      const { key } = request.params;
      const owner = request.body.owner ?? newOwnerName();
      const ownerId = ownerIdFor(owner, key);
      const waitMs = request.body.waitMs ?? 0;
      // The caller hung up before its answer: stop waiting. A grant that still comes is left to
      // its TTL (the caller may be retrying with the same owner, whose grant it would be).
      const gone = new AbortController();
      const onClose = () => gone.abort();
      reply.raw.once('close', onClose);
      try {
        const options = {
          ttlMs: request.body.ttlMs,
          signal: AbortSignal.any([gone.signal, ctx.shutdown]),
        };
        const grant =
          waitMs === 0
            ? await ctx.locker.tryAcquireForOwner(key, ownerId, options)
            : await ctx.locker.acquireForOwner(key, ownerId, { ...options, waitMs });
        if (grant === null) {
          throw new HttpError(409, {
            errorCode: 'ERR_LOCK_BUSY',
            message: `"${key}" is held by another owner`,
          });
        }
        return {
          key,
          owner,
          ownerId,
          fencingToken: grant.fencingToken.toString(),
          ttlMs: grant.ttlMs,
        };
      } catch (error) {
        throw fail(error);
      } finally {
        reply.raw.off('close', onClose);
      }
    },
  );

  app.post<KeyParams & { Body: RenewBody }>(
    '/v1/locks/:key/renew',
    { schema: renewSchema },
    async (request) => {
      const { key } = request.params;
      const { owner, fencingToken, ttlMs } = request.body;
      const ownerId = ownerIdFor(owner, key);
      let result: Awaited<ReturnType<typeof ctx.locker.renewForOwner>>;
      try {
        result = await ctx.locker.renewForOwner(
          { key, owner: ownerId, fencingToken: BigInt(fencingToken) },
          ttlMs,
        );
      } catch (error) {
        throw fail(error);
      }
      if (result.outcome !== 'renewed') throw refused(result.outcome, 'renew', key);
      return { key, owner, ownerId, fencingToken, ttlMs: result.ttlMs };
    },
  );

  app.post<KeyParams & { Body: ReleaseBody }>(
    '/v1/locks/:key/release',
    { schema: releaseSchema },
    async (request) => {
      const { key } = request.params;
      const { owner, fencingToken } = request.body;
      let outcome: Awaited<ReturnType<typeof ctx.locker.releaseForOwner>>;
      try {
        outcome = await ctx.locker.releaseForOwner({
          key,
          owner: ownerIdFor(owner, key),
          fencingToken: BigInt(fencingToken),
        });
      } catch (error) {
        throw fail(error);
      }
      if (outcome !== 'released') throw refused(outcome, 'release', key);
      return { key, outcome };
    },
  );

  app.get<KeyParams & { Querystring: { owner?: string } }>(
    '/v1/locks/:key',
    { schema: inspectSchema },
    async (request) => {
      const { key } = request.params;
      let info: Awaited<ReturnType<typeof ctx.locker.inspect>>;
      try {
        info = await ctx.locker.inspect(key);
      } catch (error) {
        throw fail(error);
      }
      const holder =
        info.holder === null
          ? null
          : {
              ownerId: info.holder.owner,
              fencingToken: info.holder.fencingToken.toString(),
              ttlMs: Math.max(0, Math.round(info.holder.ttlMs)),
            };
      const { owner } = request.query;
      return {
        key,
        holder,
        lastFencingToken: info.lastFencingToken.toString(),
        ...(owner === undefined ? {} : { heldByOwner: holder?.ownerId === ownerIdFor(owner, key) }),
      };
    },
  );
}

/** 404 `ERR_LOCK_NOT_HELD` (nobody holds the key) or 409 `ERR_NOT_LOCK_OWNER` (someone else). */
function refused(outcome: 'not-held' | 'not-owner', operation: string, key: string): HttpError {
  return outcome === 'not-held'
    ? new HttpError(404, {
        errorCode: 'ERR_LOCK_NOT_HELD',
        outcome,
        message: `${operation} of "${key}": the key has no holder (the lease expired or was released)`,
      })
    : new HttpError(409, {
        errorCode: 'ERR_NOT_LOCK_OWNER',
        outcome,
        message: `${operation} of "${key}": the key is held by another owner or another grant`,
      });
}
