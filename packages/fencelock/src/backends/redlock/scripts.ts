/**
 * The Lua scripts only the Redlock backend runs, one per operation in `scripts/*.lua`, each run
 * on one node of a vote through the Redis backend's typed loader (`defineScript`). Redlock also
 * runs two of the single-node scripts as they are: `renew-many.lua` and `inspect.lua`.
 */
import { defineScript } from '../redis/scripts.js';

/** This module's folder of scripts. */
const SCRIPTS = new URL('./scripts/', import.meta.url);

type LockKeys = readonly [lockKey: string, fenceKey: string];
type LineKeys = readonly [lockKey: string, channel: string, queueKey: string, waitersKey: string];

/**
 * Grant on one node, to the head of the key's line (ordered by `place`): `[1, node token]` (the
 * node's last token + 1, or its clock in whole ms, in µs, where the counter is gone), or
 * `[0, ms]`: the holder's PTTL, or the head's remaining entry time when the key is free but
 * another waiter is first. `waiterTtlMs` 0: a single attempt, never queued. The fence counter
 * expires `fenceTtlMs` later.
 */
export const grantOnNodeScript = defineScript<
  readonly [lockKey: string, fenceKey: string, queueKey: string, waitersKey: string],
  readonly [owner: string, ttlMs: number, fenceTtlMs: number, waiterTtlMs: number, place: number],
  [1, string] | [0, number]
>('grant-on-node', SCRIPTS);

/**
 * Compare-and-delete on one node, then publish the head of the line: 1 released, 0 not held,
 * -1 not owner.
 */
export const releaseOnNodeScript = defineScript<
  LineKeys,
  readonly [owner: string, token: string],
  1 | 0 | -1
>('release-on-node', SCRIPTS);

/**
 * What a withdrawal takes away on a node: `all` (the key, whatever its token, and the line
 * entry), `grant` (the key; the owner goes back to its `place` in line), `line` (the entry only).
 */
export type Withdrawn = 'all' | 'grant' | 'line';

/** Withdraw on one node: 1 deleted this owner's key, 0 nothing deleted. */
export const withdrawOnNodeScript = defineScript<
  LineKeys,
  readonly [owner: string, what: Withdrawn, place: number, waiterTtlMs: number],
  1 | 0
>('withdraw-on-node', SCRIPTS);

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
