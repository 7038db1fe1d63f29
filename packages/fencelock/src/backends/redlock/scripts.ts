/**
 * The Lua scripts only the Redlock backend runs, one per operation in `scripts/*.lua`, each run
 * on one node of a vote through the Redis backend's typed loader (`defineScript`). Redlock also
 * runs two of the single-node scripts as they are: `renew-many.lua` and `inspect.lua`.
 */
import { defineScript } from '../redis/scripts.js';

/** This module's folder of scripts. */
const SCRIPTS = new URL('./scripts/', import.meta.url);

type LockKeys = readonly [lockKey: string, fenceKey: string];

/**
 * Grant on one node: `[1, node token]` (the node's last token + 1, or its clock in whole ms, in
 * µs, where the counter is gone), or `[0, holder PTTL]` when another owner holds it. The fence
 * counter expires `fenceTtlMs` later.
 */
export const grantOnNodeScript = defineScript<
  LockKeys,
  readonly [owner: string, ttlMs: number, fenceTtlMs: number],
  [1, string] | [0, number]
>('grant-on-node', SCRIPTS);

/** Compare-and-delete on one node: 1 released, 0 not held, -1 not owner. */
export const releaseOnNodeScript = defineScript<
  readonly [lockKey: string],
  readonly [owner: string, token: string],
  1 | 0 | -1
>('release-on-node', SCRIPTS);

/** Withdraw on one node, whatever the token: 1 deleted this owner's key, 0 nothing to delete. */
export const withdrawOnNodeScript = defineScript<
  readonly [lockKey: string],
  readonly [owner: string],
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
