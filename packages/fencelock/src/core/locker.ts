/**
 * The Locker: one backend, one watchdog, lock defaults, and the leases it has granted.
 */
import { randomBytes } from 'node:crypto';
import { BackendError, InvalidArgumentError } from '../errors.js';
import {
  type LockOptions,
  type ResolvedLockOptions,
  resolveLockOptions,
  validateKey,
  validateTtl,
} from '../options.js';
import { type CampaignOptions, Election } from '../primitives/election.js';
import {
  acquireAll,
  heldMultiLease,
  type KeyGrants,
  MULTI_LOCK_OPTION_NAMES,
  type MultiLease,
  type MultiLockOptions,
  takeAll,
  validateKeys,
} from '../primitives/multi-lock.js';
import {
  resolveSemaphoreOptions,
  Semaphore,
  type SemaphoreOptions,
} from '../primitives/semaphore.js';
import type {
  Backend,
  LeaseRef,
  ListedLock,
  ListPage,
  LockInfo,
  ProclaimOutcome,
  ReleaseOutcome,
} from './backend.js';
import { heldLease, holdWhile } from './hold.js';
import type { Lease, LeaseContext } from './lease.js';
import {
  checkListOptions,
  checkListPageOptions,
  type ListOptions,
  type ListPageOptions,
  listHeld,
  listOnePage,
} from './listing.js';
import { Lock, type LockContext } from './lock.js';
import {
  type OwnerAcquireAllOptions,
  type OwnerAcquireOptions,
  type OwnerGrant,
  type OwnerGrantContext,
  type OwnerReleaseRef,
  type OwnerRenewOutcome,
  ownerAllLockOptions,
  ownerLockOptions,
  proclaimForOwner,
  releaseForOwner,
  renewForOwner,
} from './owner-grants.js';
import { runHolding, scopeKeyOf } from './reentry.js';
import { Session } from './session.js';
import { Watchdog } from './watchdog.js';

/** The campaign options `locker.election` takes as defaults. */
const ELECTION_DEFAULT_NAMES: ReadonlySet<string> = new Set([
  'ttlMs',
  'waitMs',
  'autoRenew',
  'maxHoldMs',
  'retry',
  'lockDelayMs',
]);

/** Longest time `close()` waits for withdrawals still in flight, ms. */
const CLEANUP_WAIT_MS = 2_000;

/** Per-call options of `withLock` / `acquire` (the same as a lock's). */
export type AcquireOptions = LockOptions;

/** Options of `openSession`. */
export interface SessionOptions {
  /** Requested session TTL, ms; the engine may grant more. @default the locker's `ttlMs` */
  readonly ttlMs?: number;
}

export type {
  OwnerAcquireAllOptions,
  OwnerAcquireOptions,
  OwnerGrant,
  OwnerReleaseRef,
  OwnerRenewOutcome,
};

/**
 * Hands out locks on one store. Create with `createLocker(store, options)`; `close()` when done.
 */
export class Locker implements AsyncDisposable {
  readonly #load: () => Promise<Backend>;
  #backend: Promise<Backend> | undefined;
  /** The backend once loaded, for callers that need no await (the acquire fast path). */
  #loaded: Backend | undefined;
  /** Pending engine calls of acquires, stopped when the locker closes (see `onClosing`). */
  readonly #closingStops = new Set<() => void>();
  readonly #defaults: ResolvedLockOptions;
  readonly #ctx: LockContext;
  readonly #ownerCtx: OwnerGrantContext;
  /** What every lease of this locker shares (made once the backend is known). */
  #leaseCtx: LeaseContext | undefined;
  readonly #watchdog = new Watchdog();
  readonly #leases = new Set<Lease>();
  /** Sessions opened by `openSession` and not yet ended. */
  readonly #sessions = new Set<Session>();
  readonly #closing = new AbortController();
  readonly #cleanups = new Set<Promise<unknown>>();
  #closed = false;

  /**
   * @param backend the store, or a loader that builds it on first use (a store URL's backend
   *   module, its engine client and its connection are only touched by the first operation).
   * @param defaults validated lock defaults.
   * @param driftFactor validated drift factor.
   * @param store the store's name in events (see `LockerOptions.name`).
   */
  constructor(
    backend: Backend | (() => Promise<Backend>),
    defaults: ResolvedLockOptions,
    driftFactor: number,
    store: string,
  ) {
    this.#load = typeof backend === 'function' ? backend : async () => backend;
    if (typeof backend !== 'function') {
      this.#loaded = backend;
      this.#backend = Promise.resolve(backend);
    }
    this.#defaults = defaults;
    this.#ctx = {
      backend: () => this.#getBackend(),
      loadedBackend: () => this.#loaded,
      onClosing: (stop) => {
        if (this.#closing.signal.aborted) return noop;
        this.#closingStops.add(stop);
        return () => this.#closingStops.delete(stop);
      },
      watchdog: this.#watchdog,
      driftFactor,
      store,
      scopePrefix: `${randomBytes(6).toString('hex')}\0`,
      closing: this.#closing.signal,
      track: (cleanup) => {
        const settled = cleanup.then(
          () => undefined,
          () => undefined,
        );
        this.#cleanups.add(settled);
        void settled.then(() => this.#cleanups.delete(settled));
      },
      onGrant: (lease) => this.#leases.add(lease),
      onEnd: (lease) => this.#leases.delete(lease),
      leaseContext: (loaded) => {
        if (this.#leaseCtx?.backend !== loaded) {
          const { watchdog, onEnd } = this.#ctx;
          this.#leaseCtx = { backend: loaded, store, watchdog, driftFactor, onEnd };
        }
        return this.#leaseCtx;
      },
    };
    this.#ownerCtx = { backend: () => this.#getBackend(), store, driftFactor };
  }

  /**
   * The store's name in events and metrics (their `store` field and label): the `name` option of
   * `createLocker`, else the store URL without user info and parameters, else the backend's name.
   */
  get name(): string {
    return this.#ctx.store;
  }

  /** Leases granted by this locker and not yet released or lost. */
  get activeLeases(): number {
    return this.#leases.size;
  }

  /**
   * A handle on `key` with these options merged over the locker's defaults.
   * @throws InvalidArgumentError for a bad key or option (no network call is made).
   */
  lock(key: string, options?: LockOptions): Lock {
    this.#assertOpen();
    const validKey = validateKey(key);
    return new Lock(
      this.#ctx,
      validKey,
      this.#checkSession(resolveLockOptions(this.#defaults, options)),
    );
  }

  /**
   * A leader election on `name` (see `Election`): `campaign(value)` waits in line until this
   * candidate leads and answers with a `Leadership` whose fencing token is the term; `leader()`
   * and `observe()` read who leads. The election's object on the engine is apart from the lock
   * and the semaphore of the same key.
   * @param options campaign defaults over the locker's (`ttlMs`, `waitMs`, `autoRenew`,
   *   `maxHoldMs`, `retry`, `lockDelayMs`).
   * @throws InvalidArgumentError for a bad name or option (no network call is made; a store
   *   without elections is refused at the first use).
   */
  election(name: string, options?: Omit<CampaignOptions, 'signal' | 'session'>): Election {
    this.#assertOpen();
    const validName = validateKey(name, 'name');
    const defaults = resolveLockOptions(this.#defaults, options, ELECTION_DEFAULT_NAMES);
    return new Election(validName, defaults, {
      handle: (resolved, candidacy) => {
        this.#assertOpen();
        return new Lock(this.#ctx, validName, this.#checkSession(resolved), undefined, candidacy);
      },
      backend: () => this.#getBackend(),
      closing: this.#closing.signal,
    });
  }

  /**
   * Check the `session` of resolved options: one this locker opened and has not closed.
   * @throws InvalidArgumentError naming `session`.
   */
  #checkSession(resolved: ResolvedLockOptions): ResolvedLockOptions {
    const { session } = resolved;
    if (session === undefined) return resolved;
    if (!(session instanceof Session)) {
      throw new InvalidArgumentError('session', 'a session from locker.openSession()', session);
    }
    if (!this.#sessions.has(session)) {
      throw new InvalidArgumentError(
        'session',
        'an open session of this locker',
        session.isOpen ? `session ${session.id} of another locker` : 'a closed session',
      );
    }
    return resolved;
  }

  /**
   * A counting semaphore on `key`: at most `options.permits` holders at once, each permit a
   * `Lease` with its own fencing token (see `Semaphore`).
   * @param options `permits` (required, 1 to 10,000) and per-permit defaults over the locker's
   *   (`ttlMs`, `waitMs`, `autoRenew`, `maxHoldMs`, `signal`, `retry`).
   * @throws InvalidArgumentError for a bad key, permit count or option (no network call is made;
   *   a store without semaphores is refused at the first acquire).
   */
  semaphore(key: string, options: SemaphoreOptions): Semaphore {
    this.#assertOpen();
    const validKey = validateKey(key);
    const { permits, defaults } = resolveSemaphoreOptions(this.#defaults, options);
    return new Semaphore(validKey, permits, defaults, (resolved) => {
      this.#assertOpen();
      return new Lock(this.#ctx, validKey, resolved, permits);
    });
  }

  /**
   * Open a session: one engine session (etcd lease, ZooKeeper session) kept alive in the
   * background, for the locks acquired with `{ session }`. They all end when it is closed or
   * lost (etcd's `concurrency.Session`). `close()` of the locker closes its sessions too.
   * @returns the session, once the engine granted it (its `ttlMs` is the granted TTL).
   * @throws InvalidArgumentError for a bad `ttlMs`, or on a store without sessions (Redis,
   *   SQLite), before any network call.
   * @throws BackendError when the engine cannot answer.
   */
  async openSession(options?: SessionOptions): Promise<Session> {
    this.#assertOpen();
    if (options !== undefined && (typeof options !== 'object' || options === null)) {
      throw new InvalidArgumentError('options', 'an options object', options);
    }
    for (const name of Object.keys(options ?? {})) {
      if (name !== 'ttlMs') throw new InvalidArgumentError(`options.${name}`, 'ttlMs', name);
    }
    const requested = options?.ttlMs === undefined ? this.#defaults.ttlMs : options.ttlMs;
    const backend = await this.#getBackend();
    const ttlMs = validateTtl(requested, 'ttlMs', backend.maxTtlMs);
    if (!backend.capabilities.sessions || backend.openSession === undefined) {
      throw new InvalidArgumentError(
        'store',
        'a store with sessions (etcd, zookeeper)',
        backend.name,
      );
    }
    const engine = await backend.openSession(ttlMs);
    if (this.#closed) {
      await engine.close();
      this.#assertOpen();
    }
    const session = new Session(engine, (ended) => this.#sessions.delete(ended));
    if (session.isOpen) this.#sessions.add(session);
    return session;
  }

  /**
   * Wait for `key` and return the lease; `await using lease = await locker.acquire(key)`.
   * @throws InvalidArgumentError, LockTimeoutError, BackendError (see `Lock.acquire`).
   */
  acquire(key: string, options?: LockOptions): Promise<Lease> {
    // Not async, so that the answer is the lock's own promise (a promise and a turn fewer); a
    // bad argument rejects it all the same.
    try {
      return this.lock(key, options).acquire();
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * One attempt at `key`: the lease, or null when it is held by another owner.
   * @throws InvalidArgumentError, BackendError
   */
  tryAcquire(key: string, options?: LockOptions): Promise<Lease | null> {
    // Not async, for the same reason as `acquire`.
    try {
      return this.lock(key, options).tryAcquire();
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Run `fn(lease)` while holding `key`, then release (always, also when `fn` throws).
   * Inside `fn`, a nested acquire of `key` with `reentrant: true` reuses the lease.
   * @returns what `fn` returns.
   * @throws `fn`'s own error, rethrown after release.
   * @throws LockLostError as soon as the lease is lost (`lease.signal` aborts with the same
   *   error; `fn` should watch it and stop), and also when `fn` finished but the lease ran out
   *   meanwhile or the engine no longer had it at release.
   * @throws InvalidArgumentError, LockTimeoutError, BackendError from acquiring.
   */
  async withLock<T>(
    key: string,
    fn: (lease: Lease) => Promise<T> | T,
    options?: LockOptions,
  ): Promise<T> {
    if (typeof fn !== 'function') throw new InvalidArgumentError('fn', 'a function', fn);
    const lock = this.lock(key, options);
    const lease = await lock.acquire();
    const scopeKey = scopeKeyOf(this.#ctx.scopePrefix, lock.options.mode, key);
    return holdWhile(heldLease(lease), () => runHolding(scopeKey, lease, () => fn(lease)));
  }

  /**
   * Lock every key of `keys` or none (Redisson's MultiLock, Curator's InterProcessMultiLock),
   * each with its own lease and fencing token: see `MultiLease` and primitives/multi-lock.ts.
   * Keys are deduplicated and sorted; while any key is busy, nothing else is held, so clients
   * locking overlapping sets in any order never deadlock.
   * @param keys an array of 1 to 1,000 keys (a string is refused).
   * @param options a lock's options without `reentrant` or `session`; `waitMs` and `signal`
   *   bound the whole acquire, `mode` applies to every key.
   * @throws InvalidArgumentError for bad keys or options, before any network call.
   * @throws LockTimeoutError (naming the key it waited for) when `waitMs` passes or `signal`
   *   aborts first; nothing stays held.
   * @throws BackendError (QuorumError on Redlock) when an engine cannot answer.
   */
  acquireAll(keys: readonly string[], options?: MultiLockOptions): Promise<MultiLease> {
    try {
      return this.#acquireAll(keys, options, false) as Promise<MultiLease>;
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * One round of attempts on every key of `keys`: all the leases, or null (holding nothing) when
   * any key is held by another owner.
   * @throws as `acquireAll`, except LockTimeoutError.
   */
  tryAcquireAll(keys: readonly string[], options?: MultiLockOptions): Promise<MultiLease | null> {
    try {
      return this.#acquireAll(keys, options, true);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Run `fn(all)` while holding every key of `keys`, then release them all (also when `fn`
   * throws).
   * @returns what `fn` returns.
   * @throws LockLostError as soon as any lease is lost (`all.signal` aborts with it), or when
   *   `fn` finished but a lease ran out meanwhile.
   * @throws `fn`'s own error, rethrown after release; as `acquireAll` otherwise.
   */
  async withLocks<T>(
    keys: readonly string[],
    fn: (all: MultiLease) => Promise<T> | T,
    options?: MultiLockOptions,
  ): Promise<T> {
    if (typeof fn !== 'function') throw new InvalidArgumentError('fn', 'a function', fn);
    const all = (await this.#acquireAll(keys, options, false)) as MultiLease;
    return holdWhile(heldMultiLease(all), () => fn(all));
  }

  /** The checks of a multi-key acquire (synchronous, before any network call), then the run. */
  #acquireAll(
    keys: readonly string[],
    options: MultiLockOptions | undefined,
    once: boolean,
  ): Promise<MultiLease | null> {
    this.#assertOpen();
    const sorted = validateKeys(keys);
    const resolved = resolveLockOptions(this.#defaults, options, MULTI_LOCK_OPTION_NAMES);
    const handle = (key: string, waitMs?: number) => {
      this.#assertOpen();
      return new Lock(this.#ctx, key, waitMs === undefined ? resolved : { ...resolved, waitMs });
    };
    return acquireAll(sorted, handle, resolved.waitMs, once);
  }

  /**
   * What the engine says about `key` now: holder (owner, token, remaining TTL) and last token.
   * @throws InvalidArgumentError, BackendError
   */
  async inspect(key: string): Promise<LockInfo> {
    this.#assertOpen();
    const k = validateKey(key);
    return (await this.#getBackend()).inspect(k);
  }

  /**
   * The held keys of the store whose names start with `options.prefix`: for each, its mode
   * (`write`, `read`, or `permits` for a semaphore), its holders (owner, fencing token, TTL
   * left) and how many wait. An async iterable that reads the engine a page at a time
   * (`pageSize`, 100 by default; each page bounded work on the engine, how per engine in
   * docs/primitives/listing.md); each entry is a consistent snapshot of its key, the listing as a
   * whole is not (keys taken or freed meanwhile may or may not appear). Stops after `limit`
   * entries, or with the reason of `signal` once it aborts.
   *
   * ```ts
   * for await (const held of locker.list({ prefix: 'jobs:' })) console.log(held.key, held.holders);
   * ```
   * @throws InvalidArgumentError at once for bad options; at the first iteration for a store
   *   that cannot list (`capabilities.list`); BackendError when the engine cannot answer.
   */
  list(options?: ListOptions): AsyncIterable<ListedLock> {
    this.#assertOpen();
    return listHeld(() => this.#getBackend(), checkListOptions(options));
  }

  /**
   * One page of `list()`, for callers that hand pages out themselves (the sidecar's
   * `GET /v1/locks`): up to `pageSize` entries and the `cursor` to pass for the next page (null
   * after the last). A page may hold fewer entries than `pageSize`, or none, while the cursor is
   * not null (the engine walked that far and found nothing to list). A cursor is good for the
   * store that made it, with the same prefix, only.
   * @throws InvalidArgumentError for bad options (before any engine call) or a cursor this store
   *   did not make; for a store that cannot list; BackendError when the engine cannot answer.
   */
  async listPage(options?: ListPageOptions): Promise<ListPage> {
    this.#assertOpen();
    return listOnePage(() => this.#getBackend(), checkListPageOptions(options));
  }

  /**
   * Owner-addressed acquire, for entry points that keep no lock state of their own (the
   * sidecar): wait for `key` on behalf of `owner` (chosen by the caller) through the same wait
   * loop as `acquire` (event-driven where the engine notifies, bounded by `waitMs`), and answer
   * with the grant instead of a `Lease`. Nothing is tracked in this process: no watchdog, no
   * reentrancy, and `close()` does not release it; it ends `ttlMs` after the grant unless renewed
   * with `renewForOwner`, and any locker on the same store can renew, release or inspect it.
   * The engine treats a repeated acquire by the current holder as idempotent: it answers with
   * the same fencing token and restarts the TTL. A grant the engine makes after the caller gave
   * up (timeout, abort) is not withdrawn, because the same owner may already be acquiring again
   * and would lose that grant with it: it runs out by its TTL. On etcd and ZooKeeper, where it
   * would live as long as the session, it is withdrawn unless another acquire of the same key
   * and owner has started in this locker meanwhile.
   * On ZooKeeper and etcd the grant lives in this locker's engine session, so it ends when the
   * locker closes, and only this locker can renew it.
   * @param owner 32 to 128 lowercase hex digits (>= 128 bits), naming one holder of this one
   *   key: do not use the same owner id on two keys at once (etcd and ZooKeeper track a contender
   *   by its owner id; the sidecar derives its ids from the caller's name and the key).
   * @returns `{ key, owner, fencingToken, ttlMs }` (`ttlMs` as the engine applied it).
   * @throws InvalidArgumentError for a bad key, owner or option (`ttlMs` is required), before any
   *   network call.
   * @throws LockTimeoutError when `waitMs` passes or `signal` aborts first.
   * @throws BackendError (QuorumError on Redlock) when the engine cannot answer.
   */
  async acquireForOwner(
    key: string,
    owner: string,
    options: OwnerAcquireOptions,
  ): Promise<OwnerGrant> {
    const lock = this.#ownerLock(key, owner, options);
    return (await lock.acquireForOwner(owner, 'until-deadline')) as OwnerGrant;
  }

  /**
   * One owner-addressed attempt (see `acquireForOwner`): the grant, or null when another owner
   * holds `key`.
   * @throws InvalidArgumentError, BackendError (QuorumError on Redlock)
   */
  async tryAcquireForOwner(
    key: string,
    owner: string,
    options: OwnerAcquireOptions,
  ): Promise<OwnerGrant | null> {
    return this.#ownerLock(key, owner, options).acquireForOwner(owner, 'one');
  }

  /**
   * Owner-addressed all-or-nothing acquire of several keys (see `acquireForOwner` for what an
   * owner grant is, and `acquireAll` for the algorithm): one round of single attempts at every
   * key at once; if any key is busy, release what was taken, then take the keys in sorted order,
   * each waited for in its line, so that callers listing overlapping keys in any order never
   * deadlock. The first round is an attempt per key even where the engine could make them in
   * one operation (`capabilities.attemptAll`, which only `acquireAll`'s leases use): a busy key
   * costs the release of what that round took. Grants made after the caller gave up follow the
   * rules of `acquireForOwner`; what this acquire holds when it fails is released (compare-and-
   * delete by owner and token), so do not run two acquires with the same owner ids at once.
   * @param keys an array of 1 to 1,000 keys (a string is refused), deduplicated and sorted.
   * @param ownerOf the owner id of each key (32 to 128 lowercase hex digits), a distinct id per
   *   key: etcd and ZooKeeper track a contender by its owner id (the sidecar derives each from
   *   the caller's name and the key). Called once per key, before any network call.
   * @param options `ttlMs` (required), `waitMs` and `signal` bounding the whole acquire, `retry`,
   *   and `mode` for every key (`'read'`: read grants).
   * @returns one grant `{ key, owner, fencingToken, ttlMs, mode? }` per key, sorted by key.
   * @throws InvalidArgumentError for bad keys, owner ids or options (a store without read locks
   *   for `mode: 'read'`), before any network call.
   * @throws LockTimeoutError (naming the key it waited for) when `waitMs` passes or `signal`
   *   aborts first; nothing stays held.
   * @throws BackendError (QuorumError on Redlock) when an engine cannot answer; nothing stays
   *   held.
   */
  acquireAllForOwner(
    keys: readonly string[],
    ownerOf: (key: string) => string,
    options: OwnerAcquireAllOptions,
  ): Promise<OwnerGrant[]> {
    try {
      return this.#acquireAllForOwner(keys, ownerOf, options, false) as Promise<OwnerGrant[]>;
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * One round of owner-addressed attempts at every key of `keys` (see `acquireAllForOwner`):
   * every grant, sorted by key, or null (holding nothing) when any key is held by another owner.
   * `waitMs` is ignored.
   * @throws as `acquireAllForOwner`, except LockTimeoutError.
   */
  tryAcquireAllForOwner(
    keys: readonly string[],
    ownerOf: (key: string) => string,
    options: OwnerAcquireAllOptions,
  ): Promise<OwnerGrant[] | null> {
    try {
      return this.#acquireAllForOwner(keys, ownerOf, options, true);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** The checks of an owner-addressed multi-key acquire (synchronous), then the run. */
  #acquireAllForOwner(
    keys: readonly string[],
    ownerOf: (key: string) => string,
    options: OwnerAcquireAllOptions,
    once: boolean,
  ): Promise<OwnerGrant[] | null> {
    this.#assertOpen();
    const sorted = validateKeys(keys);
    const checked = ownerAllLockOptions(this.#defaults, sorted, ownerOf, options);
    const handle = (key: string, waitMs?: number) => {
      this.#assertOpen();
      const { options: resolved } = checked;
      return new Lock(this.#ctx, key, waitMs === undefined ? resolved : { ...resolved, waitMs });
    };
    const grants: KeyGrants<OwnerGrant> = {
      tryAcquire: (key) => handle(key).acquireForOwner(checked.owners.get(key)!, 'one'),
      acquire: async (key, waitMs) =>
        (await handle(key, waitMs).acquireForOwner(
          checked.owners.get(key)!,
          'until-deadline',
        )) as OwnerGrant,
      release: (grant) =>
        releaseForOwner(this.#ownerCtx, {
          key: grant.key,
          owner: grant.owner,
          fencingToken: grant.fencingToken,
          ...(grant.mode ? { mode: grant.mode } : {}),
        }),
    };
    return takeAll(sorted, grants, checked.options.waitMs, once);
  }

  /**
   * Owner-addressed renewal: extend the lease of `key` to `ttlMs` from now, only while `owner`
   * still holds it with `fencingToken` (compare-and-set on the engine). Publishes a `renew` event.
   * A refusal is not published as `lost`: the caller's claim that it held that grant cannot be
   * checked (a token names no owner once its lease is gone), and a renewal racing its own
   * release is refused too.
   * @returns `{ outcome: 'renewed', ttlMs }` or `{ outcome: 'not-held' | 'not-owner' }`.
   * @throws InvalidArgumentError for a bad key, owner, token or `ttlMs`, before any network call.
   * @throws BackendError when the engine cannot answer.
   */
  async renewForOwner(lease: LeaseRef, ttlMs: number): Promise<OwnerRenewOutcome> {
    this.#assertOpen();
    return renewForOwner(this.#ownerCtx, lease, ttlMs);
  }

  /**
   * Owner-addressed release: compare-and-delete of `owner` and `fencingToken` on the engine;
   * never deletes another owner's lease. Without `fencingToken`, the current holder is read
   * first and released only if it is `owner`. Publishes a `release` event (without `holdMs`)
   * when a release reaches the engine.
   * @returns `released`, `not-held` (no holder) or `not-owner` (another owner or grant holds it).
   * @throws InvalidArgumentError for a bad key, owner or token, before any network call.
   * @throws BackendError when the engine cannot answer.
   */
  async releaseForOwner(lease: OwnerReleaseRef): Promise<ReleaseOutcome> {
    this.#assertOpen();
    return releaseForOwner(this.#ownerCtx, lease);
  }

  /**
   * Owner-addressed proclaim: replace the value of the leadership `lease` (acquired with
   * `acquireForOwner(name, owner, { election: { value } })`) by compare-and-set of owner and
   * term on the engine, as `Leadership.proclaim` does.
   * @param lease `{ key, owner, fencingToken }` of the leadership (`fencingToken` is the term).
   * @returns `proclaimed`, or `not-held` / `not-owner` when it no longer leads (nothing stored).
   * @throws InvalidArgumentError for a bad key, owner, term or value, or on a store without
   *   elections, before any network call.
   * @throws BackendError when the engine cannot answer.
   */
  async proclaimForOwner(lease: LeaseRef, value: string): Promise<ProclaimOutcome> {
    this.#assertOpen();
    return proclaimForOwner(this.#ownerCtx, lease, value);
  }

  /** The backend in use (loads it if given as a URL). */
  backend(): Promise<Backend> {
    return this.#getBackend();
  }

  /**
   * Cancel pending acquires (they reject with `LockTimeoutError`), stop the watchdog, release
   * every lease still held (best effort, each by compare-and-delete), close the sessions opened
   * with `openSession` (orphaned ones too: their TTL no longer matters), wait up to 2 s for
   * withdrawals in flight, and close the backend's own connections. Idempotent.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#closing.abort();
    for (const stop of [...this.#closingStops]) stop();
    this.#closingStops.clear();
    this.#watchdog.stop();
    const leases = [...this.#leases];
    await Promise.allSettled(
      leases.map(async (lease) => {
        while (lease.holdCount > 0) await lease.release();
      }),
    );
    this.#leases.clear();
    await Promise.allSettled([...this.#sessions].map((session) => session.close()));
    // Withdrawals of given-up attempts must reach the engine before it is closed; a silent
    // engine does not hold close() longer than this (those keys then expire by their TTL).
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all(this.#cleanups),
      new Promise((resolve) => {
        timer = setTimeout(resolve, CLEANUP_WAIT_MS);
      }),
    ]);
    clearTimeout(timer);
    const backend = await this.#backend?.catch(() => undefined);
    await backend?.close();
  }

  /** `await using locker = createLocker(…)` closes the locker at scope exit. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /** A lock handle for an owner-addressed acquire: no watchdog, reentrancy, cap or session. */
  #ownerLock(key: string, owner: string, options: OwnerAcquireOptions): Lock {
    this.#assertOpen();
    const resolved = ownerLockOptions(this.#defaults, key, owner, options);
    return new Lock(
      this.#ctx,
      resolved.key,
      resolved.options,
      resolved.permits,
      resolved.candidacy,
    );
  }

  #assertOpen(): void {
    if (this.#closed) throw new InvalidArgumentError('locker', 'an open locker', 'closed');
  }

  async #getBackend(): Promise<Backend> {
    this.#backend ??= this.#load();
    try {
      const backend = await this.#backend;
      this.#loaded = backend;
      return backend;
    } catch (error) {
      if (error instanceof InvalidArgumentError || error instanceof BackendError) throw error;
      const code = (error as { code?: string }).code;
      const missing = code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND';
      // Node names the package it could not find: "Cannot find package 'pg' imported from …".
      const name = /Cannot find (?:package|module) '([^'/]+(?:\/[^'/]+)?)'/.exec(
        (error as Error)?.message ?? '',
      )?.[1];
      const client = name?.startsWith('@') || name?.includes('/') === false ? name : undefined;
      throw new BackendError(
        'store',
        missing
          ? `load (install the engine client: npm install ${client ?? 'ioredis / better-sqlite3@12 / etcd3 / zookeeper / pg'})`
          : 'load',
        error,
      );
    }
  }
}

function noop(): void {}
