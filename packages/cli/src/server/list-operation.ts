/**
 * The sidecar's listing of held locks (`GET /v1/locks`, gRPC `fencelock.v1.Locks/List`): up to
 * `limit` held keys under `prefix`, from `cursor` on, read through `locker.listPage`, and the
 * cursor to ask for the rest. A request reads at most `MAX_PAGES_PER_REQUEST` pages of the store
 * (a store may answer short or empty pages: PostgreSQL walks its key index, Redis scans), so it
 * is bounded work even when little under the prefix is held; the answer can then hold fewer than
 * `limit` keys with a cursor that is not null, and the caller asks again with it.
 */
import { MAX_LIST_PAGE_SIZE } from 'fencelock';
import { type ListedLockJson, listedLockJson } from '../listed-lock-json.js';
import { fromLockError, invalidField } from './http-errors.js';
import type { LockOperationsContext } from './lock-operations.js';

/** Pages of the store one request reads at most. */
export const MAX_PAGES_PER_REQUEST = 10;
/** Keys per answer when the request names no `limit`. */
export const DEFAULT_LIST_LIMIT = 100;

/** A listing request, as the transports hand it over (strings from a query string). */
export interface ListHeldRequest {
  readonly prefix?: string | undefined;
  /** 1 to `MAX_LIST_PAGE_SIZE`, a number or its decimal text; absent: `DEFAULT_LIST_LIMIT`. */
  readonly limit?: string | number | undefined;
  /** The `cursor` of a previous answer; absent or '' for the first. */
  readonly cursor?: string | undefined;
}

export interface ListHeldAnswer {
  readonly locks: readonly ListedLockJson[];
  /** Where the next answer starts; null once the store has nothing more under the prefix. */
  readonly cursor: string | null;
}

/**
 * List held keys.
 * @throws HttpError `ERR_INVALID_ARGUMENT` (field `prefix`, `limit`, `cursor`, or `store` for a
 *   store that cannot list), `ERR_BACKEND`, `ERR_SHUTTING_DOWN`.
 */
export async function listHeld(
  ctx: LockOperationsContext,
  request: ListHeldRequest,
): Promise<ListHeldAnswer> {
  const limit = limitOf(ctx, request.limit);
  const locks: ListedLockJson[] = [];
  let cursor: string | null =
    request.cursor === undefined || request.cursor === '' ? null : request.cursor;
  try {
    for (let page = 0; page < MAX_PAGES_PER_REQUEST && locks.length < limit; page++) {
      const answer = await ctx.locker.listPage({
        prefix: request.prefix ?? '',
        cursor,
        pageSize: limit - locks.length,
        signal: ctx.shutdown,
      });
      locks.push(...answer.entries.map(listedLockJson));
      cursor = answer.cursor;
      if (cursor === null) break;
    }
  } catch (error) {
    throw fromLockError(error, {}, ctx.allowed, ctx.shutdown.aborted);
  }
  return { locks, cursor };
}

function limitOf(ctx: LockOperationsContext, raw: string | number | undefined): number {
  if (raw === undefined || raw === '') return DEFAULT_LIST_LIMIT;
  const value = typeof raw === 'number' ? raw : /^\d{1,7}$/.test(raw) ? Number(raw) : Number.NaN;
  if (!Number.isSafeInteger(value) || value < 1 || value > MAX_LIST_PAGE_SIZE) {
    throw invalidField('limit', ctx.allowed('limit'), raw);
  }
  return value;
}
