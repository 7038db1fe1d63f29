/**
 * The sidecar's leader-election operations, shared by its transports (`routes/elections.ts`, the
 * election methods of `fencelock.v1.Locks` in `grpc/election-methods.ts`), as `lock-operations.ts`
 * is for locks. An election is the library's (`locker.election`, owner-addressed through
 * `acquireForOwner(name, ownerId, { election: { value } })`): the oldest live candidate of a name
 * leads, its grant's fencing token is its term (a decimal string here), and it publishes a value.
 * A caller names itself with an owner name; its owner id as a candidate is `candidateIdFor(owner,
 * name)`, never the id of the same name's lock (`ownerIdFor`). Each operation checks all of its
 * input before the store is asked anything and throws an `HttpError` with the sidecar's error
 * codes: a campaign that is not granted is answered as an acquire that is not (`ERR_LOCK_BUSY`,
 * `ERR_LOCK_TIMEOUT`), a refused renew, proclaim or resign as a refused renew or release of a
 * lock (`ERR_LOCK_NOT_HELD`, `ERR_NOT_LOCK_OWNER`, with `outcome`). No state is kept here.
 */
import { type ElectionLeader, validateElectionValue, validateKey } from 'fencelock';
import { fromLockError, HttpError, invalidField } from './http-errors.js';
import {
  callerSignal,
  checkOwner,
  type LockOperationsContext,
  lockDelay,
} from './lock-operations.js';
import { candidateIdFor, newOwnerName } from './owner.js';

/** A leadership as the sidecar answers a campaign or a renewal; the term as a decimal string. */
export interface LeadershipAnswer {
  /** The election's name. */
  readonly name: string;
  /** The owner name. */
  readonly owner: string;
  /** The backend owner id of the candidate, derived from the owner name and the election's name. */
  readonly ownerId: string;
  /** The leader's term: the fencing token of its grant, a decimal string. */
  readonly term: string;
  /** Lease length the engine applied, ms. */
  readonly ttlMs: number;
  /** The value published (answered by a campaign; a renewal does not read it). */
  readonly value?: string;
}

/** The leader of an election as the engine holds it, or null when nobody leads. */
export interface LeaderAnswer {
  readonly name: string;
  readonly leader: {
    readonly ownerId: string;
    readonly term: string;
    readonly value: string;
    /** Remaining lease, whole ms. */
    readonly ttlMs: number;
    /** The candidates in the election, the leader among them (>= 1). */
    readonly candidates: number;
  } | null;
}

/** The answer of a proclaim or a resign that was done. */
export interface ElectionOutcomeAnswer {
  readonly name: string;
  readonly outcome: 'proclaimed' | 'released';
}

/** The core's argument names as the election routes' fields. */
const FIELDS: Readonly<Record<string, string>> = {
  key: 'name',
  'election.value': 'value',
  fencingToken: 'term',
};

const TERM = /^[1-9][0-9]{0,38}$/;

/**
 * Stand as a candidate of election `name` for `owner` (a random name when absent) publishing
 * `value`, and wait until it leads: up to `waitMs` (absent: the sidecar's longest wait; 0: one
 * attempt). `signal` ends the wait (the caller went away): the candidate leaves the line, and a
 * grant that came meanwhile is resigned when the owner name was made up here, else left to its
 * TTL (as `acquire` does).
 * @throws HttpError `ERR_INVALID_ARGUMENT` (`name`, `owner`, `value`, `ttlMs`, `waitMs`, or
 *   `store` on a store without elections), `ERR_LOCK_BUSY` (one attempt), `ERR_LOCK_TIMEOUT`,
 *   `ERR_BACKEND` / `ERR_QUORUM`, `ERR_SHUTTING_DOWN`.
 */
export async function campaign(
  ctx: LockOperationsContext,
  request: {
    readonly name: string;
    readonly owner?: string | undefined;
    readonly value: unknown;
    readonly ttlMs: number;
    readonly waitMs?: number | undefined;
    readonly lockDelayMs?: number | undefined;
    readonly signal?: AbortSignal | undefined;
  },
): Promise<LeadershipAnswer> {
  const { name } = request;
  checkName(ctx, name);
  const owner = request.owner ?? newOwnerName();
  checkOwner(ctx, 'owner', owner);
  const value = checkedValue(ctx, request.value);
  const waitMs = checkedWaitMs(ctx, request.waitMs);
  try {
    const ownerId = candidateIdFor(owner, name);
    const signal = callerSignal(ctx, request.signal);
    const options = { ttlMs: request.ttlMs, signal, election: { value }, ...lockDelay(request) };
    const grant =
      waitMs === 0
        ? await ctx.locker.tryAcquireForOwner(name, ownerId, options)
        : await ctx.locker.acquireForOwner(name, ownerId, { ...options, waitMs });
    if (grant === null) {
      throw new HttpError(409, {
        errorCode: 'ERR_LOCK_BUSY',
        message: `election "${name}" has another leader, or candidates in line before this one`,
      });
    }
    if (request.signal?.aborted && request.owner === undefined) {
      // As in `acquire`: nobody could ever resign a leadership under a made-up name.
      await ctx.locker
        .releaseForOwner({
          key: name,
          owner: ownerId,
          fencingToken: grant.fencingToken,
          election: true,
        })
        .catch(() => undefined);
      throw new HttpError(409, {
        errorCode: 'ERR_LOCK_TIMEOUT',
        message: `the caller went away before it led election "${name}"; the leadership was resigned`,
      });
    }
    return {
      name,
      owner,
      ownerId,
      term: grant.fencingToken.toString(),
      ttlMs: grant.ttlMs,
      value,
    };
  } catch (error) {
    throw fromLockError(error, FIELDS, ctx.allowed, ctx.shutdown.aborted);
  }
}

/**
 * Extend the leadership of `owner` in election `name` to `ttlMs` from now, while it leads with
 * `term`.
 * @throws HttpError `ERR_LOCK_NOT_HELD` / `ERR_NOT_LOCK_OWNER` (with `outcome`),
 *   `ERR_INVALID_ARGUMENT`, `ERR_BACKEND`.
 */
export async function renewLeadership(
  ctx: LockOperationsContext,
  request: {
    readonly name: string;
    readonly owner: string;
    readonly term: string;
    readonly ttlMs: number;
  },
): Promise<LeadershipAnswer> {
  const { name, owner, term, ttlMs } = request;
  checkName(ctx, name);
  checkOwner(ctx, 'owner', owner);
  checkTerm(ctx, term);
  const ownerId = candidateIdFor(owner, name);
  let result: Awaited<ReturnType<LockOperationsContext['locker']['renewForOwner']>>;
  try {
    result = await ctx.locker.renewForOwner(
      { key: name, owner: ownerId, fencingToken: BigInt(term), election: true },
      ttlMs,
    );
  } catch (error) {
    throw fromLockError(error, FIELDS, ctx.allowed, ctx.shutdown.aborted);
  }
  if (result.outcome !== 'renewed') throw refused(result.outcome, 'renew', name);
  return { name, owner, ownerId, term, ttlMs: result.ttlMs };
}

/**
 * Replace the value the leader `owner` publishes in election `name`, by compare-and-set of its
 * owner id and `term` on the engine: a leader that lost its grant cannot overwrite its
 * successor's value.
 * @throws HttpError `ERR_LOCK_NOT_HELD` / `ERR_NOT_LOCK_OWNER` (with `outcome`; nothing stored),
 *   `ERR_INVALID_ARGUMENT`, `ERR_BACKEND`.
 */
export async function proclaim(
  ctx: LockOperationsContext,
  request: {
    readonly name: string;
    readonly owner: string;
    readonly term: string;
    readonly value: unknown;
  },
): Promise<ElectionOutcomeAnswer> {
  const { name, owner, term } = request;
  checkName(ctx, name);
  checkOwner(ctx, 'owner', owner);
  checkTerm(ctx, term);
  const value = checkedValue(ctx, request.value);
  let outcome: Awaited<ReturnType<LockOperationsContext['locker']['proclaimForOwner']>>;
  try {
    outcome = await ctx.locker.proclaimForOwner(
      { key: name, owner: candidateIdFor(owner, name), fencingToken: BigInt(term) },
      value,
    );
  } catch (error) {
    throw fromLockError(error, FIELDS, ctx.allowed, ctx.shutdown.aborted);
  }
  if (outcome !== 'proclaimed') throw refused(outcome, 'proclaim', name);
  return { name, outcome };
}

/**
 * Step down: compare-and-delete of the leadership of `owner` in election `name` by owner id and
 * `term`, so that the next candidate in line leads at once.
 * @throws HttpError `ERR_LOCK_NOT_HELD` / `ERR_NOT_LOCK_OWNER` (with `outcome`),
 *   `ERR_INVALID_ARGUMENT`, `ERR_BACKEND`.
 */
export async function resign(
  ctx: LockOperationsContext,
  request: { readonly name: string; readonly owner: string; readonly term: string },
): Promise<ElectionOutcomeAnswer> {
  const { name, owner, term } = request;
  checkName(ctx, name);
  checkOwner(ctx, 'owner', owner);
  checkTerm(ctx, term);
  let outcome: Awaited<ReturnType<LockOperationsContext['locker']['releaseForOwner']>>;
  try {
    outcome = await ctx.locker.releaseForOwner({
      key: name,
      owner: candidateIdFor(owner, name),
      fencingToken: BigInt(term),
      election: true,
    });
  } catch (error) {
    throw fromLockError(error, FIELDS, ctx.allowed, ctx.shutdown.aborted);
  }
  if (outcome !== 'released') throw refused(outcome, 'resign', name);
  return { name, outcome };
}

/**
 * The leader of election `name` as the engine holds it now (one engine read).
 * @throws HttpError `ERR_INVALID_ARGUMENT` (`name`, or `store` on a store without elections),
 *   `ERR_BACKEND`.
 */
export async function leader(
  ctx: LockOperationsContext,
  request: { readonly name: string },
): Promise<LeaderAnswer> {
  const { name } = request;
  checkName(ctx, name);
  try {
    return leaderAnswer(name, await ctx.locker.election(name).leader());
  } catch (error) {
    throw fromLockError(error, FIELDS, ctx.allowed, ctx.shutdown.aborted);
  }
}

/**
 * The leaders of election `name` as they change (`election.observe`): first the current one (or
 * null), then each change (a new leader, a new value, nobody). Ends, leaving no watch on the
 * engine, when `signal` aborts (the caller went away), the sidecar shuts down, or the consumer
 * stops iterating. A transport reads the first answer before it commits to a stream, so bad
 * input and a store without elections are answered as errors of the request.
 * @throws HttpError `ERR_INVALID_ARGUMENT` (`name`, `store`), `ERR_BACKEND`.
 */
export async function* observeLeaders(
  ctx: LockOperationsContext,
  request: { readonly name: string; readonly signal: AbortSignal },
): AsyncGenerator<LeaderAnswer, void, undefined> {
  const { name } = request;
  checkName(ctx, name);
  try {
    const leaders = ctx.locker
      .election(name)
      .observe({ signal: callerSignal(ctx, request.signal) });
    for await (const current of leaders) yield leaderAnswer(name, current);
  } catch (error) {
    throw fromLockError(error, FIELDS, ctx.allowed, ctx.shutdown.aborted);
  }
}

function leaderAnswer(name: string, current: ElectionLeader | null): LeaderAnswer {
  return {
    name,
    leader:
      current === null
        ? null
        : {
            ownerId: current.owner,
            term: current.term.toString(),
            value: current.value,
            ttlMs: Math.max(0, Math.round(current.ttlMs)),
            candidates: current.candidates,
          },
  };
}

/** An election's name: a lock key's rule (the library's), checked before the store is asked. */
function checkName(ctx: LockOperationsContext, name: unknown): asserts name is string {
  try {
    validateKey(name);
  } catch {
    throw invalidField('name', ctx.allowed('name'), name);
  }
}

/** A leader's term: a fencing token as a decimal string. */
function checkTerm(ctx: LockOperationsContext, term: unknown): asserts term is string {
  if (typeof term !== 'string' || !TERM.test(term)) {
    throw invalidField('term', ctx.allowed('term'), term);
  }
}

/** A candidate's value, by the library's rule (`validateElectionValue`), checked before any engine call. */
function checkedValue(ctx: LockOperationsContext, value: unknown): string {
  try {
    return validateElectionValue(value as string);
  } catch {
    throw invalidField('value', ctx.allowed('value'), value);
  }
}

/** A campaign's wait bound: 0 (one attempt) to the sidecar's `--max-wait` (the default), ms. */
function checkedWaitMs(ctx: LockOperationsContext, waitMs: number | undefined): number {
  const ms = waitMs ?? ctx.maxWaitMs;
  if (!Number.isFinite(ms) || ms < 0 || ms > ctx.maxWaitMs) {
    throw invalidField('waitMs', ctx.allowed('waitMs'), ms);
  }
  return ms;
}

/** `ERR_LOCK_NOT_HELD` (nobody leads) or `ERR_NOT_LOCK_OWNER` (another candidate or term does). */
function refused(outcome: 'not-held' | 'not-owner', operation: string, name: string): HttpError {
  return outcome === 'not-held'
    ? new HttpError(404, {
        errorCode: 'ERR_LOCK_NOT_HELD',
        outcome,
        message: `${operation} of election "${name}": nobody leads it (the leadership expired or was resigned)`,
      })
    : new HttpError(409, {
        errorCode: 'ERR_NOT_LOCK_OWNER',
        outcome,
        message: `${operation} of election "${name}": another candidate leads it, or another term`,
      });
}
