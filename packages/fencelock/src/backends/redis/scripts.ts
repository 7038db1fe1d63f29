/**
 * The Lua scripts of the Redis backend (and of the Redis fencing guard), one per operation in
 * `scripts/*.lua`, behind a typed loader: each script is hashed once, run by EVALSHA, and sent
 * with EVAL only when the server answers NOSCRIPT (after a restart or SCRIPT FLUSH). Shape after
 * redis-semaphore's `createEval`. The Redlock backend loads its own scripts with the same loader
 * and reuses `renew-many.lua`, `inspect.lua` and `list.lua`.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Cluster, Redis } from 'ioredis';

/** A Lua script with `K` keys and `A` arguments, answering `R`. */
export interface Script<K extends readonly string[], A extends readonly (string | number)[], R> {
  readonly name: string;
  readonly sha1: string;
  readonly source: string;
  run(client: Redis | Cluster, keys: K, args: A): Promise<R>;
}

/** This module's folder of scripts. */
const SCRIPTS = new URL('./scripts/', import.meta.url);

/**
 * Load `<name>.lua` from `folder` (a `file:` URL ending in `/`; default: this module's
 * `scripts/`), after the fragments named in `preludes` (`<prelude>.lua` from the same folder:
 * local functions several scripts share), so that one script is sent and hashed.
 */
export function defineScript<
  K extends readonly string[],
  A extends readonly (string | number)[],
  R,
>(name: string, folder: URL = SCRIPTS, preludes: readonly string[] = []): Script<K, A, R> {
  const source = [...preludes, name]
    .map((file) => readFileSync(new URL(`${file}.lua`, folder), 'utf8'))
    .join('\n');
  const sha1 = createHash('sha1').update(source).digest('hex');
  return {
    name,
    sha1,
    source,
    run(client, keys, args) {
      // No async frame of its own: one promise and one reaction per call on the hot path.
      return (client.evalsha(sha1, keys.length, ...keys, ...args) as Promise<R>).catch(
        (error: unknown) => {
          if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
          return client.eval(source, keys.length, ...keys, ...args) as Promise<R>;
        },
      );
    },
  };
}

type LockKeys = readonly [lockKey: string, fenceKey: string];

/**
 * Keys or arguments `T`, optionally followed by `O`: the trailing lock-delay key and argument a
 * caller written before lock-delay leaves out (the script then neither checks nor records one).
 */
export type Optional<T extends readonly unknown[], O extends readonly unknown[]> =
  | T
  | readonly [...T, ...O];

/**
 * Renew: 1 renewed, 0 not held, -1 not owner. The lock's delay key (optional for callers from
 * before lock-delay) is extended with the grant, to ttlMs + its D.
 */
export const renewScript = defineScript<
  Optional<readonly [lockKey: string], readonly [delayKey: string]>,
  readonly [owner: string, token: string, ttlMs: number],
  1 | 0 | -1
>('renew');
/**
 * Renew many leases at once: `keys` are the n lock keys, then (optional for callers from before
 * lock-delay) their n delay keys in the same order; `args` for each lock its `<owner>:<token>`
 * and TTL in ms; one code per lock as `renewScript`'s. Every key must be on one node (not a
 * Cluster).
 */
export const renewManyScript = defineScript<
  readonly string[],
  readonly (string | number)[],
  (1 | 0 | -1)[]
>('renew-many');
/**
 * The keys of the lock scripts that grant (`lock-line.lua` says what each holds): the lease, its
 * fence counter, the line of waiters, the readers, and the writer's lock-delay (optional for
 * callers from before lock-delay: without it no delay is checked or recorded; the backend always
 * passes it).
 */
export type QueueKeys = Optional<
  readonly [
    lockKey: string,
    fenceKey: string,
    queueKey: string,
    waitersKey: string,
    readersKey: string,
    readerTokensKey: string,
  ],
  readonly [delayKey: string]
>;

/**
 * Grant a writer in arrival order (single node): `[1, token]`, or `[0, ms]` where `ms` bounds
 * how long the key can stay unavailable to this contender without a change (the holder's PTTL,
 * the lock-delay left, the queue head's remaining entry time, or the time until the last
 * reader's grant ends). `waiterTtlMs` 0: a single attempt, never queued. The token is max(last
 * token + 1, server clock in µs); the fence counter expires `fenceTtlMs` after the grant
 * (fence-counter.ts). Readers cost it one EXISTS, only when no writer holds the key.
 * `lockDelayMs` (absent or 0: none) is recorded with the grant, or with the waiter's entry for a
 * hand-over (lock-line.lua's delay key).
 */
export const queuedAcquireScript = defineScript<
  QueueKeys,
  Optional<
    readonly [owner: string, ttlMs: number, waiterTtlMs: number, fenceTtlMs: number],
    readonly [lockDelayMs: number]
  >,
  [1, string] | [0, number]
>('queued-acquire', SCRIPTS, ['lock-line', 'write-line']);
/**
 * Grant a read lock in arrival order (Curator's read-write rule: a reader waits only for writers
 * holding the key or ahead of it in the line): `[1, token]`, `[0, ms]` as `queuedAcquireScript`,
 * or `[-2]` when a downgrade (`heldWriter`, the owner of the caller's write lock; '' for none)
 * finds another writer holding the key or waiting (nothing of the attempt is kept). Each reader
 * gets its own token from the key's one sequence.
 */
export const readAcquireScript = defineScript<
  QueueKeys,
  readonly [
    owner: string,
    ttlMs: number,
    waiterTtlMs: number,
    fenceTtlMs: number,
    heldWriter: string,
  ],
  [1, string] | [0, number] | [-2]
>('read-acquire', SCRIPTS, ['lock-line', 'read-line']);
/**
 * Single attempts at several locks, all granted or none (`attemptAll`): each lock's seven
 * `QueueKeys` in turn (its delay key included); `args` its mode, ttlMs and fence counter
 * lifetime, then per lock its owner, `heldWriter` ('' for none) and lock-delay (ms, 0 for none). Each lock is decided by the rule of `queuedAcquireScript` or
 * `readAcquireScript` for a single attempt (never queued) before any is granted. One reply per
 * lock: every one `[1, token]`; or none granted, each lock `[0, ms]` / `[-2]` as its single attempt
 * would refuse, or `[-1]` when it was free but another lock refused. Every key must be on one node
 * (one hash slot on a Cluster).
 */
export const attemptAllScript = defineScript<
  readonly string[],
  readonly (string | number)[],
  ([1, string] | [0, number] | [-1] | [-2])[]
>('attempt-all', SCRIPTS, ['lock-line', 'read-line', 'write-line']);
/**
 * The keys of the scripts that may hand a free key to the head of its line; the delay key is
 * optional for callers from before lock-delay (the backend always passes it).
 */
type HandOffKeys = Optional<
  readonly [
    lockKey: string,
    fenceKey: string,
    channel: string,
    queueKey: string,
    waitersKey: string,
    readersKey: string,
    readerTokensKey: string,
  ],
  readonly [delayKey: string]
>;

/**
 * Release a writer's or a reader's grant by owner and token (single node, queued): 1 released, 0
 * not held, -1 not owner. The writer's release of its live grant deletes its lock-delay. A key
 * that no writer holds any more is then handed on (`line-handoff.lua`) unless it is in a
 * lock-delay: a writer at the head of the line is granted (with the lock-delay its entry
 * carries) for a first TTL of min(its ttlMs, `firstTtlCapMs`), once no reader holds it, and
 * `<owner>:<token>:<first TTL>` published on the key's channel; readers at the head are woken by
 * their owner ids.
 */
export const queuedReleaseScript = defineScript<
  HandOffKeys,
  readonly [owner: string, token: string, firstTtlCapMs: number, fenceGraceMs: number],
  1 | 0 | -1
>('queued-release', SCRIPTS, ['lock-line', 'line-handoff']);
/**
 * Abandon (single node, queued): leave the line and, unless `keepGrant` is '1', delete this
 * owner's grant (as the writer, with its lock-delay, or a reader); 1 deleted a grant of this
 * owner, 0 nothing deleted.
 * A key this frees (or left free by the head that leaves) is handed on as `queuedReleaseScript`
 * does.
 */
export const queuedAbandonScript = defineScript<
  HandOffKeys,
  readonly [owner: string, keepGrant: '0' | '1', firstTtlCapMs: number, fenceGraceMs: number],
  1 | 0
>('queued-abandon', SCRIPTS, ['lock-line', 'line-handoff']);
/**
 * Renew a lease of either mode, one call each (readers are not in `renewManyScript`'s lock keys):
 * the writer's key (and its lock-delay), or the owner's live reader entry, when owner and token
 * match; 1 renewed, 0 not held, -1 not owner.
 */
export const readRenewScript = defineScript<
  Optional<
    readonly [lockKey: string, readersKey: string, readerTokensKey: string],
    readonly [delayKey: string]
  >,
  readonly [owner: string, token: string, ttlMs: number],
  1 | 0 | -1
>('read-renew', SCRIPTS, ['lock-line', 'read-line']);
/**
 * Inspect a lock with readers: `[writer "<owner>:<token>" | null, writer PTTL, last token | null,
 * earliest reader | null, its token | null, its ms left, highest reader token | null]`.
 */
export const inspectLockScript = defineScript<
  readonly [lockKey: string, fenceKey: string, readersKey: string, readerTokensKey: string],
  readonly [],
  [string | null, number, string | null, string | null, string | null, number, string | null]
>('inspect-lock', SCRIPTS, ['lock-line']);
/** The keys of the semaphore scripts that read or change its holders (semaphore-line.lua). */
type PermitKeys = readonly [holdersKey: string, tokensKey: string, permitsKey: string];
/** …and of those that may wake waiters too. */
type PermitLineKeys = readonly [
  ...PermitKeys,
  queueKey: string,
  waitersKey: string,
  channel: string,
];

/**
 * Grant one permit of a semaphore in arrival order: `[1, token]`; `[0, ms]` not granted (`ms`
 * bounds how long nothing may change); `[-1, permits]` when the key's holders or waiters use
 * another permit count. `waiterTtlMs` 0: a single attempt, never queued; `ticket` '0': the
 * server's clock orders the line. Shared by the single-node and Redlock backends.
 */
export const semaphoreAcquireScript = defineScript<
  readonly [...PermitKeys, queueKey: string, waitersKey: string, fenceKey: string],
  readonly [
    owner: string,
    ttlMs: number,
    permits: number,
    waiterTtlMs: number,
    fenceTtlMs: number,
    ticket: string,
  ],
  [1, string] | [0, number] | [-1, number]
>('semaphore-acquire', SCRIPTS, ['semaphore-line']);
/** Release one permit, waking the waiters it lets in: 1 released, 0 not held, -1 not owner. */
export const semaphoreReleaseScript = defineScript<
  PermitLineKeys,
  readonly [owner: string, token: string],
  1 | 0 | -1
>('semaphore-release', SCRIPTS, ['semaphore-line']);
/** Renew one permit: 1 renewed, 0 not held, -1 not owner. */
export const semaphoreRenewScript = defineScript<
  PermitKeys,
  readonly [owner: string, token: string, ttlMs: number],
  1 | 0 | -1
>('semaphore-renew', SCRIPTS, ['semaphore-line']);
/** Withdraw a contender: leave the line and, unless `keepGrant` is '1', drop its permit. */
export const semaphoreAbandonScript = defineScript<
  PermitLineKeys,
  readonly [owner: string, keepGrant: '0' | '1'],
  1 | 0
>('semaphore-abandon', SCRIPTS, ['semaphore-line']);
/**
 * Read several locks and semaphores for one `list` page, each object atomically and read-only:
 * five keys per object and its kind in `args` (`'w'` found by its writer key, `'r'` by its
 * readers, `'p'` a semaphore by its holders); one reply per object, `[0]` without a live holder
 * (list.lua says the shapes). Every key must be on one node (one hash slot on a Cluster). Works on
 * a Redlock node's layout too (its line is a sorted set).
 */
export const listScript = defineScript<
  readonly string[],
  readonly string[],
  (
    | [0]
    | [1, string, number, number]
    | [2, (string | number)[], number]
    | [3, (string | number)[], number, number]
  )[]
>('list', SCRIPTS, ['live-line']);
/**
 * The keys of the election scripts that may grant or hand over (election-line.lua); the delay
 * key is optional for callers from before lock-delay (the backend always passes it).
 */
type ElectionLineKeys = Optional<
  readonly [
    leaderKey: string,
    termKey: string,
    queueKey: string,
    waitersKey: string,
    channel: string,
  ],
  readonly [delayKey: string]
>;
/** lock-line.lua (the clock) and election-line.lua precede every election script that needs them. */
const ELECTION_LINE = ['lock-line', 'election-line'];

/**
 * A candidate's attempt at an election: `[1, term]`, or `[0, ms]` as `queuedAcquireScript`
 * answers (`waiterTtlMs` 0: a single attempt, never queued; nobody is granted in a lock-delay).
 * The grant stores `value` and records `lockDelayMs` (absent or 0: none); the term is max(last
 * term + 1, server clock in µs) from a counter that never expires.
 */
export const electionAcquireScript = defineScript<
  ElectionLineKeys,
  Optional<
    readonly [owner: string, ttlMs: number, waiterTtlMs: number, value: string],
    readonly [lockDelayMs: number]
  >,
  [1, string] | [0, number]
>('election-acquire', SCRIPTS, ELECTION_LINE);
/**
 * Renew a leader's grant (and its lock-delay: the optional delay key, to ttlMs + its D) by owner
 * and term: 1 renewed, 0 not held, -1 not owner.
 */
export const electionRenewScript = defineScript<
  Optional<readonly [leaderKey: string], readonly [delayKey: string]>,
  readonly [owner: string, term: string, ttlMs: number],
  1 | 0 | -1
>('election-renew');
/** Replace the leader's value by owner and term: 1 proclaimed, 0 not held, -1 not owner. */
export const electionProclaimScript = defineScript<
  readonly [leaderKey: string, channel: string],
  readonly [owner: string, term: string, value: string],
  1 | 0 | -1
>('election-proclaim');
/**
 * Resign by owner and term (deleting the grant's lock-delay), handing the election to the head
 * of the line (first TTL of min(its ttlMs, `firstTtlCapMs`)): 1 released, 0 not held, -1 not
 * owner.
 */
export const electionReleaseScript = defineScript<
  ElectionLineKeys,
  readonly [owner: string, term: string, firstTtlCapMs: number],
  1 | 0 | -1
>('election-release', SCRIPTS, ELECTION_LINE);
/**
 * Withdraw a candidate: leave the line and, unless `keepGrant` is '1', delete its grant; 1
 * deleted a grant, 0 not. An election this leaves without a leader is handed over.
 */
export const electionAbandonScript = defineScript<
  ElectionLineKeys,
  readonly [owner: string, keepGrant: '0' | '1', firstTtlCapMs: number],
  1 | 0
>('election-abandon', SCRIPTS, ELECTION_LINE);
/**
 * The leader, read-only: `["<owner>:<term>:<value>", PTTL, candidates]` (the leader and the live
 * entries of the line), or `[]` when nobody leads.
 */
export const electionLeaderScript = defineScript<
  readonly [leaderKey: string, queueKey: string, waitersKey: string],
  readonly [],
  [] | [string, number, number]
>('election-leader', SCRIPTS, ['live-line']);
/** Inspect: `[value | null, PTTL, last token | null]` (null once the fence counter expired). */
export const inspectScript = defineScript<
  LockKeys,
  readonly [],
  [string | null, number, string | null]
>('inspect');
/** Fenced write (the Redis fencing guard): `[1, token]` written, `[0, current token]` refused. */
export const fencedWriteScript = defineScript<
  readonly [resourceKey: string],
  readonly [token: string, value: string],
  [1 | 0, string]
>('fenced-write');
/**
 * Fenced compare-and-set (the Redis fencing guard): `[1, token]` written, `[0, current token]`
 * refused as stale, `[-1, current token, current value]` refused because the value differs
 * (`[-1]` when the resource was never written).
 */
export const fencedCompareAndSetScript = defineScript<
  readonly [resourceKey: string],
  readonly [token: string, expectPresent: '0' | '1', expected: string, value: string],
  [1 | 0, string] | [-1] | [-1, string, string]
>('fenced-compare-and-set');
