/**
 * All-or-nothing locks on several keys (Redisson's `RedissonMultiLock`, Curator's
 * `InterProcessMultiLock`, node-redlock's resource arrays), each key with its own lease and
 * fencing token. Keys are deduplicated and sorted, so every client sees them in one order.
 *
 * 1. A single attempt at every key at once: on a backend with `capabilities.attemptAll`, one
 *    engine operation that grants every key or none (`attempt-all.ts`); elsewhere an attempt per
 *    key, sent together (one round trip per engine when all are free).
 * 2. If any key is busy (or a Redlock vote was undecided): release everything taken, then take
 *    the keys in sorted order, waiting for each in its fair line.
 *
 * Owner-addressed multi-key acquires (`locker.acquireAllForOwner`, the sidecar's) run the same
 * algorithm over `OwnerGrant`s (`takeAll`), with an attempt per key in the first round: the
 * engine's one-operation round (`attemptAll`) makes leases, and owner grants keep the per-key
 * round, which a busy key costs a release of what was taken.
 *
 * A client waits only while holding keys smaller than the one it waits for (the resource
 * ordering rule of Havender, 1968, which Curator's multi-lock also follows), so no cycle of
 * waiters, hence no deadlock, can form, in whatever order callers list their keys. No attempt is
 * ever undone to start again, so there is no livelock either; and each wait keeps its place in
 * the key's line, so nobody starves.
 */

import type { ReleaseOutcome } from '../core/backend.js';
import { monotonicNow } from '../core/clock.js';
import type { Held } from '../core/hold.js';
import type { Lease } from '../core/lease.js';
import type { Lock } from '../core/lock.js';
import { InvalidArgumentError, LockLostError, QuorumError } from '../errors.js';
import { type LockOptions, validateKey } from '../options.js';
import { attemptAll } from './attempt-all.js';

/** Options of `acquireAll` / `withLocks`: a lock's, without reentrancy or a session. */
export type MultiLockOptions = Omit<LockOptions, 'reentrant' | 'session'>;

/** The option names a multi-key acquire takes. */
export const MULTI_LOCK_OPTION_NAMES: ReadonlySet<string> = new Set([
  'ttlMs',
  'waitMs',
  'autoRenew',
  'maxHoldMs',
  'mode',
  'signal',
  'retry',
  'lockDelayMs',
]);

/** Most keys one multi-key acquire may take. */
export const MAX_MULTI_KEYS = 1_000;

/**
 * Check the keys of a multi-key acquire: an array of 1 to `MAX_MULTI_KEYS` valid keys (a string
 * is refused, not split into a lock per character).
 * @returns the keys deduplicated and sorted (by UTF-16 code units, the same on every client).
 * @throws InvalidArgumentError naming `keys` or `keys[i]`.
 */
export function validateKeys(keys: unknown): string[] {
  if (!Array.isArray(keys)) {
    throw new InvalidArgumentError('keys', 'an array of keys', keys);
  }
  if (keys.length === 0 || keys.length > MAX_MULTI_KEYS) {
    throw new InvalidArgumentError('keys', `1 to ${MAX_MULTI_KEYS} keys`, `${keys.length} keys`);
  }
  // Every index, holes of a sparse array too (`map` would skip them and keep them holes).
  const valid = new Set<string>();
  for (let i = 0; i < keys.length; i++) valid.add(validateKey(keys[i], `keys[${i}]`));
  return [...valid].sort();
}

/**
 * The leases of one all-or-nothing acquire, one per key in key order. Use `signal` to stop work
 * when any of them is lost, give each resource the fencing token of its own key, and
 * `release()` (or `await using`) when done.
 */
export class MultiLease implements AsyncDisposable {
  /** One lease per key, sorted by key. */
  readonly leases: readonly Lease[];
  #signal: AbortSignal | undefined;

  /** @internal made by `locker.acquireAll`. */
  constructor(leases: readonly Lease[]) {
    this.leases = Object.freeze([...leases]);
  }

  /** The keys, deduplicated and sorted. */
  get keys(): readonly string[] {
    return this.leases.map((lease) => lease.key);
  }

  /** The lease of `key`, or undefined when `key` is not one of this acquire's. */
  lease(key: string): Lease | undefined {
    return this.leases.find((lease) => lease.key === key);
  }

  /** True while every lease is held and valid. */
  get isHeld(): boolean {
    return this.leases.every((lease) => lease.isHeld);
  }

  /** Aborted as soon as any lease is lost, with that lease's `LockLostError` as `reason`. */
  get signal(): AbortSignal {
    this.#signal ??= AbortSignal.any(this.leases.map((lease) => lease.signal));
    return this.#signal;
  }

  /**
   * Release every lease (compare-and-delete each, in parallel).
   * @returns each lease's outcome, in key order.
   * @throws BackendError when an engine cannot answer (after every release was tried).
   */
  async release(): Promise<ReleaseOutcome[]> {
    const settled = await Promise.allSettled(this.leases.map((lease) => lease.release()));
    const failed = settled.find((s) => s.status === 'rejected');
    if (failed) throw failed.reason;
    return settled.map((s) => (s as PromiseFulfilledResult<ReleaseOutcome>).value);
  }

  /** `await using all = await locker.acquireAll(keys)` releases every lease at scope exit. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}

/** The leases of `all` as `Held` (for `withLocks`): released together, lost when any is. */
export function heldMultiLease(all: MultiLease): Held {
  return {
    get signal() {
      return all.signal;
    },
    async releaseChecked() {
      const outcomes = await all.release();
      for (const [i, lease] of all.leases.entries()) {
        // A lease that ran out while the callback ran is declared lost by release().
        if (lease.signal.aborted) return lease.signal.reason as LockLostError;
        const outcome = outcomes[i]!;
        if (outcome !== 'released') {
          return new LockLostError(lease.key, lease.fencingToken, outcome, {
            operation: 'release',
          });
        }
      }
      return undefined;
    },
    async releaseQuietly() {
      await Promise.allSettled(all.leases.map((lease) => lease.release()));
    },
  };
}

/** A lock handle on `key` that waits at most `waitMs` (validated options of the acquire). */
export type MultiLockHandle = (key: string, waitMs?: number) => Lock;

/**
 * How one multi-key acquire takes and gives back the grant of a single key: a `Lease`
 * (`acquireAll`) or an `OwnerGrant` (`acquireAllForOwner`). `takeAll` runs the algorithm of the
 * module's docstring over it, whatever the grant is.
 */
export interface KeyGrants<G> {
  /** One attempt at `key`: its grant, or null when another owner holds it. */
  tryAcquire(key: string): Promise<G | null>;
  /** Wait for `key` at most `waitMs` ms (`0`: one attempt); rejects with `LockTimeoutError`. */
  acquire(key: string, waitMs: number): Promise<G>;
  /** Give `grant` back (compare-and-delete; best effort, its failure is ignored). */
  release(grant: G): Promise<unknown>;
  /**
   * The first round as one engine operation, where there is one (`attempt-all.ts`): every
   * grant in the order of `keys`, null when a key is held (nothing held), undefined when the
   * engine cannot (the round is then an attempt per key). Absent: always an attempt per key.
   */
  attemptAll?(keys: readonly string[]): Promise<G[] | null | undefined>;
}

/**
 * Acquire every key of `keys` (already validated, sorted) or none: see the module's docstring.
 * @param handle makes the lock handle of one key with the acquire's options.
 * @param waitMs the whole acquire's wait bound, ms (`Infinity`: none).
 * @param once true for `tryAcquireAll`: a single round of attempts; null when any key is busy.
 * @throws LockTimeoutError (of the key it waited for) when `waitMs` passes or the signal aborts.
 * @throws BackendError, QuorumError, PermitsMismatchError as a single acquire does; nothing stays
 *   held.
 */
export async function acquireAll(
  keys: readonly string[],
  handle: MultiLockHandle,
  waitMs: number,
  once: boolean,
): Promise<MultiLease | null> {
  const leases = await takeAll(keys, leaseGrants(handle), waitMs, once);
  return leases === null ? null : new MultiLease(leases);
}

/** The grants of `acquireAll`: leases of `handle`, the first round as one operation if it can. */
function leaseGrants(handle: MultiLockHandle): KeyGrants<Lease> {
  return {
    tryAcquire: (key) => handle(key).tryAcquire(),
    acquire: (key, waitMs) => handle(key, waitMs).acquire(),
    release: (lease) => lease.release(),
    attemptAll: (keys) => attemptAll(keys.map((key) => handle(key))),
  };
}

/**
 * The algorithm of the module's docstring over any grant type: every key of `keys` (validated,
 * distinct, sorted) or none.
 * @param waitMs the whole acquire's wait bound, ms (`Infinity`: none).
 * @param once a single round of attempts only (`tryAcquireAll`): null when any key is busy.
 * @returns one grant per key, in the order of `keys`; null (`once`) when a key is busy.
 * @throws LockTimeoutError (of the key it waited for) when `waitMs` passes or the signal aborts.
 * @throws what a single acquire throws (BackendError, QuorumError…); nothing stays held.
 */
export async function takeAll<G>(
  keys: readonly string[],
  grants: KeyGrants<G>,
  waitMs: number,
  once: boolean,
): Promise<G[] | null> {
  const deadline = monotonicNow() + waitMs;
  const held = new Map<string, G>();
  try {
    // One engine operation where the backend has one, else an attempt per key.
    const together =
      keys.length > 1 && grants.attemptAll ? await grants.attemptAll(keys) : undefined;
    if (together) return together;
    if (together === undefined) {
      if (await tryEach(keys, grants, held, once)) return keys.map((key) => held.get(key)!);
      await releaseAll(grants, held);
    }
    if (once) return null;
    // In key order, each waited for while holding only smaller keys (the resource ordering
    // that excludes a cycle of waiters).
    for (const key of keys) {
      const remainingMs = Math.max(0, deadline - monotonicNow());
      held.set(key, await grants.acquire(key, remainingMs));
    }
    return keys.map((key) => held.get(key)!);
  } catch (error) {
    await releaseAll(grants, held);
    throw error;
  }
}

/**
 * A single attempt at each of `keys` at once; the granted ones go into `held`.
 * @param strict true for `tryAcquireAll`: an undecided vote (Redlock's `QuorumError`) is thrown;
 *   false: it only makes the round fail, and the waiting acquires that follow retry it.
 * @returns whether every key was granted.
 * @throws the first engine error (after every attempt settled; the granted ones stay in `held`).
 */
async function tryEach<G>(
  keys: readonly string[],
  grants: KeyGrants<G>,
  held: Map<string, G>,
  strict: boolean,
): Promise<boolean> {
  const answers = await Promise.allSettled(keys.map((key) => grants.tryAcquire(key)));
  let all = true;
  let failure: { reason: unknown } | undefined;
  for (const [i, answer] of answers.entries()) {
    if (answer.status === 'fulfilled' && answer.value !== null) {
      held.set(keys[i]!, answer.value);
      continue;
    }
    all = false;
    if (answer.status === 'rejected' && (strict || !(answer.reason instanceof QuorumError))) {
      failure ??= answer;
    }
  }
  if (failure) throw failure.reason;
  return all;
}

/** Give back and forget every grant in `held`, best effort, in parallel. */
async function releaseAll<G>(grants: KeyGrants<G>, held: Map<string, G>): Promise<void> {
  const taken = [...held.values()];
  held.clear();
  await Promise.allSettled(taken.map((grant) => grants.release(grant)));
}
