/**
 * The Lua scripts only the Redlock backend runs, one per operation in `scripts/*.lua`, each run
 * on one node of a vote through the Redis backend's typed loader (`defineScript`); grant,
 * release and withdraw begin with `line.lua`, the key's line of waiters on the node. Redlock also
 * runs single-node scripts as they are: `renew-many.lua` and `inspect.lua` for locks, and for a
 * semaphore's permits `semaphore-acquire.lua`, `-renew`, `-release` and `-abandon`; its own two
 * permit scripts (the withdrawal of a lost vote, the token's settling) begin with that backend's
 * `semaphore-line.lua`.
 */
import { defineScript } from '../redis/scripts.js';

/** This module's folder of scripts. */
const SCRIPTS = new URL('./scripts/', import.meta.url);

type LockKeys = readonly [lockKey: string, fenceKey: string];

/** The fragment of shared functions the line's scripts begin with. */
const LINE = ['line'];

/** The single-node backend's fragment the semaphore scripts begin with (relative to `SCRIPTS`). */
const SEMAPHORE_LINE = ['../../redis/scripts/semaphore-line'];

/**
 * Grant on one node, in the order of the key's line: `[1, node token]` (the node's last token +
 * 1, or its clock in whole ms, in µs, where the counter is gone), or `[0, ms]` where `ms` bounds
 * how long the key can stay unavailable to this contender without a change (the holder's PTTL,
 * or the head's remaining entry time). A waiting contender (`ticket`: the µs it started waiting,
 * on its clock) joins the line or keeps its place, its entry living `waiterTtlMs` past this
 * attempt; ticket `'0'`: a single attempt, never queued. The fence counter expires `fenceTtlMs`
 * after a grant.
 */
export const grantOnNodeScript = defineScript<
  readonly [lockKey: string, fenceKey: string, queueKey: string, waitersKey: string],
  readonly [owner: string, ttlMs: number, fenceTtlMs: number, ticket: string, waiterTtlMs: number],
  [1, string] | [0, number]
>('grant-on-node', SCRIPTS, LINE);

/**
 * Compare-and-delete on one node, then wake the head of the line on the key's channel (and take
 * the owner out of the line, where its entry was left): 1 released, 0 not held, -1 not owner.
 */
export const releaseOnNodeScript = defineScript<
  readonly [lockKey: string, queueKey: string, waitersKey: string, channel: string],
  readonly [owner: string, token: string],
  1 | 0 | -1
>('release-on-node', SCRIPTS, LINE);

/**
 * Withdraw on one node: delete this owner's key whatever its token (unless `keepGrant` is
 * `'1'`), and take it out of the line (unless `keepPlace` is `'1'`: then its entry is written
 * with `ticket`, living `waiterTtlMs`), waking the head where that freed the key for it. 1
 * deleted this owner's key, 0 nothing deleted.
 */
export const withdrawOnNodeScript = defineScript<
  readonly [lockKey: string, queueKey: string, waitersKey: string, channel: string],
  readonly [
    owner: string,
    keepGrant: '0' | '1',
    keepPlace: '0' | '1',
    ticket: string,
    waiterTtlMs: number,
  ],
  1 | 0
>('withdraw-on-node', SCRIPTS, LINE);

/**
 * After a grant on a quorum, write the combined token on one node and raise its counter to it
 * (expiring `fenceTtlMs` later): 1 this owner's key now carries the token, 0 not held by this
 * owner.
 */
export const settleTokenScript = defineScript<
  LockKeys,
  readonly [owner: string, token: string, fenceTtlMs: number],
  1 | 0
>('settle-token', SCRIPTS);

/** The keys of a semaphore's permit scripts that may change its line (semaphore-line.lua). */
type PermitLineKeys = readonly [
  holdersKey: string,
  tokensKey: string,
  permitsKey: string,
  queueKey: string,
  waitersKey: string,
  channel: string,
];

/**
 * A waiter lost the vote on a permit: on one node, drop its permit whatever the token, stand in
 * the semaphore's line with `ticket` (its entry living `waiterTtlMs`; not where the holders or
 * waiters use another count), and wake the waiters a dropped permit lets in, except this owner. 1
 * dropped this owner's permit, 0 none held here.
 */
export const withdrawPermitOnNodeScript = defineScript<
  PermitLineKeys,
  readonly [owner: string, permits: number, ticket: string, waiterTtlMs: number],
  1 | 0
>('withdraw-permit-on-node', SCRIPTS, SEMAPHORE_LINE);

/**
 * After a permit's grant on a quorum, write the combined token on one node (where this owner
 * holds a live permit) and raise the semaphore's fence counter to it (expiring `fenceTtlMs`
 * later): 1 settled, 0 no live permit of this owner here.
 */
export const settlePermitTokenScript = defineScript<
  readonly [holdersKey: string, tokensKey: string, fenceKey: string],
  readonly [owner: string, token: string, fenceTtlMs: number],
  1 | 0
>('settle-permit-token', SCRIPTS, SEMAPHORE_LINE);
