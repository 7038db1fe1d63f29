/**
 * The sidecar's lock operations, shared by its transports: the HTTP routes (`routes/dapr.ts`,
 * `routes/locks.ts`) and the gRPC services (`grpc/`) call these and only map requests and
 * answers. Each operation checks its input (the checks the HTTP schemas also make, for callers
 * whose messages have no schema: protobuf fields are never missing, only empty), calls the
 * Locker's owner-addressed operations, and throws an `HttpError` carrying the sidecar's error
 * code (`ERR_LOCK_BUSY`, `ERR_INVALID_ARGUMENT` with the field in fencelock's HTTP spelling…),
 * which each transport turns into its own answer. No lock state is kept here.
 */
import { type Locker, MAX_MULTI_KEYS, MAX_PERMITS, validateKey } from 'fencelock';
import { fromLockError, HttpError, invalidField } from './http-errors.js';
import { isWellFormedOwnerName, newOwnerName, ownerIdFor } from './owner.js';
import { MAX_EXPIRY_SECONDS, MAX_OWNER_CHARS } from './schemas.js';

/** What the operations need from the sidecar. */
export interface LockOperationsContext {
  /** The locker every operation calls. */
  readonly locker: Locker;
  /** Store name accepted by Dapr's calls. */
  readonly storeName: string;
  /** Longest `waitMs` a caller may ask for, ms. */
  readonly maxWaitMs: number;
  /** Aborted when the sidecar starts shutting down: waiting acquires end with `ERR_SHUTTING_DOWN`. */
  readonly shutdown: AbortSignal;
  /** The allowed range of a request field, for `ERR_INVALID_ARGUMENT` answers. */
  readonly allowed: (field: string) => string;
}

/** A grant (or renewal) as the sidecar answers it; the fencing token as a decimal string. */
export interface GrantAnswer {
  readonly key: string;
  /** The owner name. */
  readonly owner: string;
  /** The backend owner id derived from the name and the key. */
  readonly ownerId: string;
  readonly fencingToken: string;
  /** Lease length the engine applied, ms. */
  readonly ttlMs: number;
  /** For a semaphore's permit, the semaphore's permit count; absent for a lock. */
  readonly permits?: number;
  /** `'read'` for a read grant (answered by acquires); absent for a write grant or a permit. */
  readonly mode?: 'read';
}

/** The answer of a multi-key acquire: the owner name, and one grant per key, sorted by key. */
export interface AcquireAllAnswer {
  readonly owner: string;
  readonly grants: readonly GrantAnswer[];
}

/** The outcome of releasing one grant of a multi-key release. */
export interface ReleaseAllOutcome {
  readonly key: string;
  readonly outcome: 'released' | 'not-held' | 'not-owner';
}

/** The engine's view of a key. */
export interface InspectAnswer {
  readonly key: string;
  readonly holder: {
    readonly ownerId: string;
    readonly fencingToken: string;
    /** Remaining lease, whole ms. */
    readonly ttlMs: number;
  } | null;
  readonly lastFencingToken: string;
  /** Present when the request named an owner. */
  readonly heldByOwner?: boolean;
}

/** fencelock's field names are the core's argument names. */
const FIELDS: Readonly<Record<string, string>> = {};

/** Core argument names as Dapr's fields. */
const DAPR_FIELDS: Readonly<Record<string, string>> = {
  key: 'resourceId',
  owner: 'lockOwner',
  ttlMs: 'expiryInSeconds',
};

/** Dapr's unlock status codes, by release outcome. */
export const UNLOCK_STATUS = Object.freeze({
  released: 0,
  'not-held': 1,
  'not-owner': 2,
} as const);

const FENCING_TOKEN = /^[1-9][0-9]{0,38}$/;

/**
 * Take `key` for `owner` (a random name when absent), waiting up to `waitMs` (0: one attempt).
 * `signal` ends the wait (the caller went away); nothing is granted to a caller that gave up,
 * but a grant the engine made meanwhile is left to its TTL (see `Locker.acquireForOwner`).
 * @throws HttpError `ERR_INVALID_ARGUMENT`, `ERR_LOCK_BUSY` (one attempt), `ERR_LOCK_TIMEOUT`,
 *   `ERR_BACKEND` / `ERR_QUORUM`, `ERR_SHUTTING_DOWN`.
 */
export async function acquire(
  ctx: LockOperationsContext,
  request: {
    readonly key: string;
    readonly owner?: string | undefined;
    readonly ttlMs: number;
    readonly waitMs?: number | undefined;
    readonly signal?: AbortSignal | undefined;
    /** A semaphore's permit count: one of its permits instead of the lock. */
    readonly permits?: number | undefined;
    /** `'read'`: a read grant; `'write'` or absent: the lock (or the permit). */
    readonly mode?: unknown;
    /** Lock-delay of a write grant, ms (`LockOptions.lockDelayMs`); absent: none. */
    readonly lockDelayMs?: number | undefined;
  },
): Promise<GrantAnswer> {
  const { key } = request;
  const owner = request.owner ?? newOwnerName();
  checkOwner(ctx, 'owner', owner);
  const permits = checkedPermits(ctx, request.permits);
  const mode = checkedMode(ctx, request.mode);
  const waitMs = checkedWaitMs(ctx, request.waitMs);
  try {
    const ownerId = ownerIdFor(owner, key);
    const signal = callerSignal(ctx, request.signal);
    const options = { ttlMs: request.ttlMs, signal, ...permits, ...mode, ...lockDelay(request) };
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
    if (request.signal?.aborted && request.owner === undefined) {
      // The caller went away as the grant came, and the owner name was made up here, so nobody
      // could ever release it: release it now. A named owner's grant stays (its TTL ends it), as
      // the caller may be retrying under that name and the retry would be this same grant.
      await ctx.locker
        .releaseForOwner({
          key,
          owner: ownerId,
          fencingToken: grant.fencingToken,
          ...permits,
          ...mode,
        })
        .catch(() => undefined);
      throw new HttpError(409, {
        errorCode: 'ERR_LOCK_TIMEOUT',
        message: `the caller went away before "${key}" was granted; the grant was released`,
      });
    }
    return {
      key,
      owner,
      ownerId,
      fencingToken: grant.fencingToken.toString(),
      ttlMs: grant.ttlMs,
      ...permits,
      ...mode,
    };
  } catch (error) {
    throw fromLockError(error, FIELDS, ctx.allowed, ctx.shutdown.aborted);
  }
}

/**
 * Take every key of `keys` or none for `owner` (a random name when absent), each with its own
 * grant and fencing token (`Locker.acquireAllForOwner`: one round of single attempts; if a key is
 * busy, release what was taken and take the keys in sorted order, each waited for). Keys are
 * deduplicated and sorted; each key's owner id is derived from the name and that key. All input
 * is checked before the store is asked anything. `signal` ends the wait as for `acquire`; grants
 * the engine makes for a caller that went away are released when the owner name was made up
 * here, else left to their TTL.
 * @returns the owner name and one grant per key, sorted by key.
 * @throws HttpError `ERR_INVALID_ARGUMENT` (`keys`, `keys[i]`, `owner`, `ttlMs`, `waitMs`, `mode`),
 *   `ERR_LOCK_BUSY` (one round: a key is held), `ERR_LOCK_TIMEOUT` (naming the key waited for),
 *   `ERR_BACKEND` / `ERR_QUORUM`, `ERR_SHUTTING_DOWN`; nothing stays held.
 */
export async function acquireAll(
  ctx: LockOperationsContext,
  request: {
    readonly keys: unknown;
    readonly owner?: string | undefined;
    readonly ttlMs: number;
    readonly waitMs?: number | undefined;
    readonly mode?: unknown;
    readonly lockDelayMs?: number | undefined;
    readonly signal?: AbortSignal | undefined;
  },
): Promise<AcquireAllAnswer> {
  const keys = checkedKeys(ctx, request.keys);
  const owner = request.owner ?? newOwnerName();
  checkOwner(ctx, 'owner', owner);
  const mode = checkedMode(ctx, request.mode);
  const waitMs = checkedWaitMs(ctx, request.waitMs);
  try {
    const ownerOf = (key: string) => ownerIdFor(owner, key);
    const options = {
      ttlMs: request.ttlMs,
      signal: callerSignal(ctx, request.signal),
      ...mode,
      ...lockDelay(request),
    };
    const grants =
      waitMs === 0
        ? await ctx.locker.tryAcquireAllForOwner(keys, ownerOf, options)
        : await ctx.locker.acquireAllForOwner(keys, ownerOf, { ...options, waitMs });
    if (grants === null) {
      throw new HttpError(409, {
        errorCode: 'ERR_LOCK_BUSY',
        message: `${keys.length === 1 ? 'the key is' : `at least one of the ${keys.length} keys is`} held by another owner; none was taken`,
      });
    }
    if (request.signal?.aborted && request.owner === undefined) {
      // As in `acquire`: nobody could ever release grants under a made-up name.
      await Promise.allSettled(
        grants.map(({ key, owner: ownerId, fencingToken }) =>
          ctx.locker.releaseForOwner({ key, owner: ownerId, fencingToken, ...mode }),
        ),
      );
      throw new HttpError(409, {
        errorCode: 'ERR_LOCK_TIMEOUT',
        message: `the caller went away before ${keys.length} keys were granted; the grants were released`,
      });
    }
    return {
      owner,
      grants: grants.map((grant) => ({
        key: grant.key,
        owner,
        ownerId: grant.owner,
        fencingToken: grant.fencingToken.toString(),
        ttlMs: grant.ttlMs,
        ...mode,
      })),
    };
  } catch (error) {
    throw fromLockError(error, FIELDS, ctx.allowed, ctx.shutdown.aborted);
  }
}

/**
 * Release several grants of `owner`, each by compare-and-delete of its key's owner id and its
 * fencing token (in parallel; read grants as write grants). Every grant is checked before the
 * store is asked anything; keys must be distinct.
 * @returns each grant's outcome (`released`, `not-held`, `not-owner`), sorted by key.
 * @throws HttpError `ERR_INVALID_ARGUMENT` (`owner`, `grants`, `grants[i].key`,
 *   `grants[i].fencingToken`), `ERR_BACKEND` (after every release was tried).
 */
export async function releaseAll(
  ctx: LockOperationsContext,
  request: {
    readonly owner: string;
    readonly grants: unknown;
  },
): Promise<{ readonly outcomes: readonly ReleaseAllOutcome[] }> {
  const { owner } = request;
  checkOwner(ctx, 'owner', owner);
  const { grants } = request;
  if (!Array.isArray(grants) || grants.length === 0 || grants.length > MAX_MULTI_KEYS) {
    throw invalidField('grants', ctx.allowed('grants'), grants);
  }
  const targets = new Map<string, bigint>();
  for (const [i, grant] of grants.entries()) {
    if (typeof grant !== 'object' || grant === null) {
      throw invalidField(`grants[${i}]`, ctx.allowed('grants'), grant);
    }
    const { key, fencingToken } = grant as { key?: unknown; fencingToken?: unknown };
    checkKey(ctx, `grants[${i}].key`, key);
    checkFencingToken(ctx, fencingToken, `grants[${i}].fencingToken`);
    if (targets.has(key)) {
      throw invalidField('grants', ctx.allowed('grants'), `"${key}" twice`);
    }
    targets.set(key, BigInt(fencingToken));
  }
  const keys = [...targets.keys()].sort();
  const settled = await Promise.allSettled(
    keys.map((key) =>
      ctx.locker.releaseForOwner({
        key,
        owner: ownerIdFor(owner, key),
        fencingToken: targets.get(key)!,
      }),
    ),
  );
  const failed = settled.find((s) => s.status === 'rejected');
  if (failed) throw fromLockError(failed.reason, FIELDS, ctx.allowed, ctx.shutdown.aborted);
  return {
    outcomes: keys.map((key, i) => ({
      key,
      outcome: (settled[i] as PromiseFulfilledResult<ReleaseAllOutcome['outcome']>).value,
    })),
  };
}

/**
 * Extend the lease of `key` to `ttlMs` from now, while `owner` holds it with `fencingToken`.
 * @throws HttpError `ERR_LOCK_NOT_HELD` / `ERR_NOT_LOCK_OWNER` (with `outcome`),
 *   `ERR_INVALID_ARGUMENT`, `ERR_BACKEND`.
 */
export async function renew(
  ctx: LockOperationsContext,
  request: {
    readonly key: string;
    readonly owner: string;
    readonly fencingToken: string;
    readonly ttlMs: number;
    readonly permits?: number | undefined;
  },
): Promise<GrantAnswer> {
  const { key, owner, fencingToken, ttlMs } = request;
  checkOwner(ctx, 'owner', owner);
  checkFencingToken(ctx, fencingToken);
  const permits = checkedPermits(ctx, request.permits);
  let result: Awaited<ReturnType<Locker['renewForOwner']>>;
  const ownerId = ownerIdFor(owner, key);
  try {
    result = await ctx.locker.renewForOwner(
      { key, owner: ownerId, fencingToken: BigInt(fencingToken), ...permits },
      ttlMs,
    );
  } catch (error) {
    throw fromLockError(error, FIELDS, ctx.allowed, ctx.shutdown.aborted);
  }
  if (result.outcome !== 'renewed') throw refused(result.outcome, 'renew', key);
  return { key, owner, ownerId, fencingToken, ttlMs: result.ttlMs, ...permits };
}

/**
 * Compare-and-delete of `key` by `owner` and `fencingToken`.
 * @throws HttpError `ERR_LOCK_NOT_HELD` / `ERR_NOT_LOCK_OWNER` (with `outcome`),
 *   `ERR_INVALID_ARGUMENT`, `ERR_BACKEND`.
 */
export async function release(
  ctx: LockOperationsContext,
  request: {
    readonly key: string;
    readonly owner: string;
    readonly fencingToken: string;
    readonly permits?: number | undefined;
  },
): Promise<{ readonly key: string; readonly outcome: 'released' }> {
  const { key, owner, fencingToken } = request;
  checkOwner(ctx, 'owner', owner);
  checkFencingToken(ctx, fencingToken);
  const permits = checkedPermits(ctx, request.permits);
  let outcome: Awaited<ReturnType<Locker['releaseForOwner']>>;
  try {
    outcome = await ctx.locker.releaseForOwner({
      key,
      owner: ownerIdFor(owner, key),
      fencingToken: BigInt(fencingToken),
      ...permits,
    });
  } catch (error) {
    throw fromLockError(error, FIELDS, ctx.allowed, ctx.shutdown.aborted);
  }
  if (outcome !== 'released') throw refused(outcome, 'release', key);
  return { key, outcome };
}

/**
 * The engine's view of `key`; with `owner`, whether that owner holds it.
 * @throws HttpError `ERR_INVALID_ARGUMENT`, `ERR_BACKEND`.
 */
export async function inspect(
  ctx: LockOperationsContext,
  request: { readonly key: string; readonly owner?: string | undefined },
): Promise<InspectAnswer> {
  const { key, owner } = request;
  if (owner !== undefined) checkOwner(ctx, 'owner', owner);
  let info: Awaited<ReturnType<Locker['inspect']>>;
  try {
    info = await ctx.locker.inspect(key);
  } catch (error) {
    throw fromLockError(error, FIELDS, ctx.allowed, ctx.shutdown.aborted);
  }
  const holder =
    info.holder === null
      ? null
      : {
          ownerId: info.holder.owner,
          fencingToken: info.holder.fencingToken.toString(),
          ttlMs: Math.max(0, Math.round(info.holder.ttlMs)),
        };
  return {
    key,
    holder,
    lastFencingToken: info.lastFencingToken.toString(),
    ...(owner === undefined ? {} : { heldByOwner: holder?.ownerId === ownerIdFor(owner, key) }),
  };
}

/**
 * Dapr's TryLock: one attempt at `resourceId` for `lockOwner`, for `expiryInSeconds`. Checks in
 * Dapr's order (its runtime's lock API): the expiry, the resource id, the owner, then the store
 * name. A repeated lock by the holder succeeds with the same grant (it restarts the TTL).
 * @returns `success`, and the grant when there is one (for transports that can carry it).
 * @throws HttpError `ERR_INVALID_ARGUMENT` (fields named as Dapr's), `ERR_LOCK_STORE_NOT_FOUND`,
 *   and the engine's failures in fencelock's codes (the transport words them as Dapr's
 *   `ERR_TRY_LOCK`).
 */
export async function daprTryLock(
  ctx: LockOperationsContext,
  request: {
    readonly storeName: string;
    readonly resourceId: string;
    readonly lockOwner: string;
    readonly expiryInSeconds: number;
  },
): Promise<{ readonly success: boolean; readonly grant: GrantAnswer | null }> {
  const { storeName, resourceId, lockOwner, expiryInSeconds } = request;
  if (
    !Number.isInteger(expiryInSeconds) ||
    expiryInSeconds < 1 ||
    expiryInSeconds > MAX_EXPIRY_SECONDS
  ) {
    throw invalidField('expiryInSeconds', ctx.allowed('expiryInSeconds'), expiryInSeconds);
  }
  checkDaprTarget(ctx, resourceId, lockOwner, storeName);
  try {
    const ownerId = ownerIdFor(lockOwner, resourceId);
    const grant = await ctx.locker.tryAcquireForOwner(resourceId, ownerId, {
      ttlMs: expiryInSeconds * 1000,
    });
    return {
      success: grant !== null,
      grant:
        grant === null
          ? null
          : {
              key: resourceId,
              owner: lockOwner,
              ownerId,
              fencingToken: grant.fencingToken.toString(),
              ttlMs: grant.ttlMs,
            },
    };
  } catch (error) {
    throw fromLockError(error, DAPR_FIELDS, ctx.allowed, ctx.shutdown.aborted);
  }
}

/**
 * Dapr's Unlock: release `resourceId` if `lockOwner` holds it.
 * @returns Dapr's status: 0 released, 1 the lock does not exist, 2 it belongs to another owner.
 * @throws HttpError as `daprTryLock` (the transport words engine failures as `ERR_UNLOCK`).
 */
export async function daprUnlock(
  ctx: LockOperationsContext,
  request: { readonly storeName: string; readonly resourceId: string; readonly lockOwner: string },
): Promise<{ readonly status: 0 | 1 | 2 }> {
  const { storeName, resourceId, lockOwner } = request;
  checkDaprTarget(ctx, resourceId, lockOwner, storeName);
  try {
    const outcome = await ctx.locker.releaseForOwner({
      key: resourceId,
      owner: ownerIdFor(lockOwner, resourceId),
    });
    return { status: UNLOCK_STATUS[outcome] };
  } catch (error) {
    throw fromLockError(error, DAPR_FIELDS, ctx.allowed, ctx.shutdown.aborted);
  }
}

/** Dapr's checks of the resource id and the owner, then of the store name (its order). */
function checkDaprTarget(
  ctx: LockOperationsContext,
  resourceId: string,
  lockOwner: string,
  storeName: string,
): void {
  if (typeof resourceId !== 'string' || resourceId.length === 0) {
    throw invalidField('resourceId', ctx.allowed('resourceId'), resourceId);
  }
  checkOwner(ctx, 'lockOwner', lockOwner);
  if (storeName !== ctx.storeName) {
    throw new HttpError(400, {
      errorCode: 'ERR_LOCK_STORE_NOT_FOUND',
      message: `lock store ${JSON.stringify(storeName)} not found (this sidecar serves ${JSON.stringify(ctx.storeName)})`,
    });
  }
}

/** An owner name: a well-formed string of 1 to MAX_OWNER_CHARS characters. */
export function checkOwner(ctx: LockOperationsContext, field: string, name: unknown): void {
  if (!isWellFormedOwnerName(name) || name.length === 0 || name.length > MAX_OWNER_CHARS) {
    throw invalidField(field, ctx.allowed(field), name);
  }
}

/**
 * A semaphore's permit count, as the option object to spread into the Locker's calls: `{}` for
 * the lock (absent, or 0 where protobuf cannot leave a field out).
 */
function checkedPermits(
  ctx: LockOperationsContext,
  permits: number | undefined,
): { permits?: number } {
  if (permits === undefined || permits === 0) return {};
  if (!Number.isInteger(permits) || permits < 1 || permits > MAX_PERMITS) {
    throw invalidField('permits', ctx.allowed('permits'), permits);
  }
  return { permits };
}

function checkFencingToken(
  ctx: LockOperationsContext,
  token: unknown,
  field = 'fencingToken',
): asserts token is string {
  if (typeof token !== 'string' || !FENCING_TOKEN.test(token)) {
    throw invalidField(field, ctx.allowed('fencingToken'), token);
  }
}

/** A lock key (the library's rule), for a request field that is not checked by a schema. */
function checkKey(ctx: LockOperationsContext, field: string, key: unknown): asserts key is string {
  try {
    validateKey(key);
  } catch {
    throw invalidField(field, ctx.allowed('key'), key);
  }
}

/**
 * The keys of a multi-key acquire: an array (a string is refused, not taken as a key per
 * character) of 1 to `MAX_MULTI_KEYS` keys, each checked; the library deduplicates and sorts.
 */
function checkedKeys(ctx: LockOperationsContext, keys: unknown): string[] {
  if (!Array.isArray(keys) || keys.length === 0 || keys.length > MAX_MULTI_KEYS) {
    throw invalidField('keys', ctx.allowed('keys'), keys);
  }
  for (const [i, key] of keys.entries()) checkKey(ctx, `keys[${i}]`, key);
  return keys as string[];
}

/**
 * The lock mode, as the option object to spread into the Locker's calls: `{}` for `write` (or
 * absent), `{ mode: 'read' }` for a read grant.
 */
function checkedMode(ctx: LockOperationsContext, mode: unknown): { mode?: 'read' } {
  if (mode === undefined || mode === 'write') return {};
  if (mode === 'read') return { mode: 'read' };
  throw invalidField('mode', ctx.allowed('mode'), mode);
}

/**
 * The lock-delay of a request as the option to spread into the Locker's calls: `{}` when absent.
 * The library checks it (range, not with permits or a read grant, the store's capability).
 */
export function lockDelay(request: { readonly lockDelayMs?: number | undefined }): {
  lockDelayMs?: number;
} {
  return request.lockDelayMs === undefined ? {} : { lockDelayMs: request.lockDelayMs };
}

/** A wait bound: 0 (one attempt, the default) to the sidecar's `--max-wait`, ms. */
function checkedWaitMs(ctx: LockOperationsContext, waitMs: number | undefined): number {
  const ms = waitMs ?? 0;
  if (!Number.isFinite(ms) || ms < 0 || ms > ctx.maxWaitMs) {
    throw invalidField('waitMs', ctx.allowed('waitMs'), ms);
  }
  return ms;
}

/** The caller's signal joined with the shutdown's. */
export function callerSignal(
  ctx: LockOperationsContext,
  signal: AbortSignal | undefined,
): AbortSignal {
  return signal === undefined ? ctx.shutdown : AbortSignal.any([signal, ctx.shutdown]);
}

/** `ERR_LOCK_NOT_HELD` (nobody holds the key) or `ERR_NOT_LOCK_OWNER` (someone else does). */
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
