/**
 * The Lock handle: one key with fixed options. It runs the pre-checks of a lease acquire (open
 * session, TTL, mode, the read-write rules, reentrancy), builds the attempt request, and hands
 * the wait to the acquire loop (`acquire-loop.ts`), answering with a `Lease`; owner-addressed
 * acquires (`owner-grants.ts`) run the same loop answered with an `OwnerGrant`.
 */
import { randomFillSync } from 'node:crypto';
import { InvalidArgumentError } from '../errors.js';
import { type ResolvedLockOptions, validateTtl } from '../options.js';
import { AcquireLoop, type AttemptCount, type Withdrawal } from './acquire-loop.js';
import type { AttemptRequest, Backend, Granted } from './backend.js';
import { AcquireCancellation } from './cancellation.js';
import { assertElectionGranted, type Candidacy } from './candidacy.js';
import { monotonicNow } from './clock.js';
import { publish } from './events.js';
import { Lease, type LeaseContext, type LeaseGrant } from './lease.js';
import { assertLockDelayGranted, lockDelayOf } from './lock-delay.js';
import { type OwnerGrant, ownerGrantOf, ownerWithdrawal } from './owner-grants.js';
import { assertPermitsGranted } from './permits.js';
import { reenterHeld, scopeKeyOf } from './reentry.js';
import { assertModeGranted, heldWriterFor } from './rwlock.js';

/** What a lock handle needs from its locker. */
export interface LockContext extends Omit<LeaseContext, 'backend'> {
  /** The backend, once loaded (loading it makes no network call). */
  readonly backend: () => Promise<Backend>;
  /** The backend if it is loaded already (no promise, no await), else undefined. */
  readonly loadedBackend: () => Backend | undefined;
  /** Aborted when the locker closes: pending acquires stop waiting and grant nothing. */
  readonly closing: AbortSignal;
  /**
   * Call `stop` once when the locker closes; returns the function that unregisters it. Cheaper
   * than an abort listener per call on `closing` (no EventTarget, no AbortSignal.any).
   */
  readonly onClosing: (stop: () => void) => () => void;
  /** Keep a background clean-up (a withdrawal) for `close()` to wait on; never rejects. */
  readonly track: (cleanup: Promise<unknown>) => void;
  /** Called with every new lease (not with reentered ones). */
  readonly onGrant: (lease: Lease) => void;
  /** Prefix that makes reentrancy scopes per locker. */
  readonly scopePrefix: string;
  /** The context of leases on `backend`: one object shared by all of them, not one per lease. */
  readonly leaseContext: (backend: Backend) => LeaseContext;
}

/** Bytes of CSPRNG output fetched at once for owner ids (256 ids per fill). */
const OWNER_POOL_BYTES = 4096;
const OWNER_ID_BYTES = 16;
const ownerPool = Buffer.alloc(OWNER_POOL_BYTES);
let ownerPoolOffset = OWNER_POOL_BYTES;

/**
 * A new owner id: 128 random bits as hex. The bits come from the CSPRNG (`randomFillSync`) in
 * batches of 4 KiB; each byte is handed out once, and the batch is refilled when used up, so ids
 * stay as unguessable as one `randomBytes(16)` each, at a fraction of its cost per id.
 */
export function newOwnerId(): string {
  if (ownerPoolOffset + OWNER_ID_BYTES > OWNER_POOL_BYTES) {
    randomFillSync(ownerPool);
    ownerPoolOffset = 0;
  }
  const start = ownerPoolOffset;
  ownerPoolOffset += OWNER_ID_BYTES;
  return ownerPool.toString('hex', start, start + OWNER_ID_BYTES);
}

/**
 * A handle on one key with fixed options. Create with `locker.lock(key, options)`. A handle
 * may be acquired many times in sequence; with `reentrant: true`, acquiring it while it holds a
 * live lease returns that lease with its hold count incremented.
 */
export class Lock {
  /** The locked key. */
  readonly key: string;
  /** The options in force, defaults applied. */
  readonly options: ResolvedLockOptions;
  /** A semaphore's permit count (`locker.semaphore`); undefined for a lock. */
  readonly permits: number | undefined;
  /** A candidate's campaign (`locker.election`); undefined for a lock or a semaphore. */
  readonly candidacy: Candidacy | undefined;
  readonly #ctx: LockContext;
  #lease: Lease | null = null;

  /**
   * @internal use `locker.lock()` (or `locker.semaphore()`, whose permits are acquired through a
   * handle made with `permits`, or `locker.election()`, whose campaigns go through a handle made
   * with a `candidacy`: no reentrancy, no read mode).
   */
  constructor(
    ctx: LockContext,
    key: string,
    options: ResolvedLockOptions,
    permits?: number,
    candidacy?: Candidacy,
  ) {
    this.#ctx = ctx;
    this.key = key;
    this.options = options;
    this.permits = permits;
    this.candidacy = candidacy;
  }

  /** A lock's handle (neither a semaphore's nor an election's): reentrancy and modes apply. */
  get #plain(): boolean {
    return this.permits === undefined && this.candidacy === undefined;
  }

  /** True while this handle's latest lease is held and valid. */
  get isHeld(): boolean {
    return this.#lease?.isHeld ?? false;
  }

  /** This handle's latest lease, held or not; null before the first grant. */
  get lease(): Lease | null {
    return this.#lease;
  }

  /**
   * Wait until the lock is granted and return the lease.
   * @throws LockTimeoutError when `waitMs` passes or `signal` aborts first (`cause` has the
   *   abort reason or the last engine error).
   * @throws InvalidArgumentError when `ttlMs` exceeds the engine's maximum (before any network call).
   * @throws BackendError when the engine cannot answer.
   * @throws QuorumError (Redlock) when no attempt reached a majority of nodes by the deadline;
   *   each failed vote is retried with backoff until then.
   */
  acquire(): Promise<Lease> {
    return this.#acquireLease('until-deadline') as Promise<Lease>;
  }

  /**
   * One attempt: the lease, or null when another owner holds the key.
   * @throws BackendError when the engine cannot answer.
   * @throws QuorumError (Redlock) when the vote reached no majority of nodes.
   */
  tryAcquire(): Promise<Lease | null> {
    return this.#acquireLease('one');
  }

  /**
   * @internal `locker.acquireForOwner` / `tryAcquireForOwner`: the same wait loop, for a
   * caller-chosen owner, answered with an `OwnerGrant` instead of a `Lease` (no watchdog, no
   * reentrancy, nothing tracked; withdrawal as `ownerWithdrawal` says). With `attempts: 'one'`,
   * null when the key is held.
   */
  async acquireForOwner(owner: string, attempts: AttemptCount): Promise<OwnerGrant | null> {
    const startedAt = monotonicNow();
    const backend = this.#ctx.loadedBackend() ?? (await this.#ctx.backend());
    const request = this.#request(this.#checkedRenewTtlMs(backend), owner, attempts, undefined);
    return this.#run(
      backend,
      request,
      attempts,
      startedAt,
      ownerWithdrawal(backend, request),
      (r) => ownerGrantOf(request, r),
      false,
    );
  }

  /**
   * A lease acquire. Not an async function: once the backend is loaded, the checks run at once
   * and the answer is the acquire loop's own promise (an uncontended acquire saves a promise and
   * a turn of the event loop); a check that fails rejects it all the same.
   */
  #acquireLease(attempts: AttemptCount): Promise<Lease | null> {
    const startedAt = monotonicNow();
    const backend = this.#ctx.loadedBackend();
    if (backend === undefined) return this.#loadThenAcquireLease(attempts, startedAt);
    try {
      return this.#startLease(backend, attempts, startedAt);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** The first acquire of a locker whose backend is not loaded yet (a store URL). */
  async #loadThenAcquireLease(attempts: AttemptCount, startedAt: number): Promise<Lease | null> {
    const backend = await this.#ctx.backend();
    return this.#startLease(backend, attempts, startedAt);
  }

  /**
   * The checks before any network call, reentry (a held lease answers at once), then the loop.
   * @throws InvalidArgumentError (synchronously) when a check fails.
   */
  #startLease(backend: Backend, attempts: AttemptCount, startedAt: number): Promise<Lease | null> {
    const renewTtlMs = this.#checkedRenewTtlMs(backend);
    const { mode } = this.options;
    const heldWriter = this.#plain
      ? heldWriterFor(this.#ctx.scopePrefix, this.key, mode)
      : undefined;
    if (this.options.reentrant && this.#plain) {
      const held = reenterHeld(
        scopeKeyOf(this.#ctx.scopePrefix, mode, this.key),
        this.key,
        this.#lease,
      );
      if (held) {
        publish('acquire', () => ({
          backend: backend.name,
          store: this.#ctx.store,
          key: this.key,
          owner: held.owner,
          outcome: 'reentered',
          fencingToken: held.fencingToken,
          waitMs: monotonicNow() - startedAt,
          attempts: 0,
          ttlMs: held.ttlMs,
        }));
        return Promise.resolve(held);
      }
    }
    const request = this.#request(renewTtlMs, newOwnerId(), attempts, heldWriter);
    return this.#run(
      backend,
      request,
      attempts,
      startedAt,
      new AbandonOnGiveUp(backend, request),
      (result, attemptStartedAt) =>
        this.#newLease(backend, result, request, renewTtlMs, attemptStartedAt),
      true,
    );
  }

  /**
   * @internal This handle's single attempt, for an engine operation that makes several at once
   * (`attempt-all.ts`): the request (after the checks `tryAcquire` makes, synchronously) and the
   * lease of its grant. Undefined for a reentrant handle, whose held lease answers without the
   * engine.
   * @throws InvalidArgumentError when a check fails.
   */
  singleAttempt(backend: Backend): SingleAttempt | undefined {
    if (this.options.reentrant) return undefined;
    const renewTtlMs = this.#checkedRenewTtlMs(backend);
    const heldWriter = this.#plain
      ? heldWriterFor(this.#ctx.scopePrefix, this.key, this.options.mode)
      : undefined;
    const request = this.#request(renewTtlMs, newOwnerId(), 'one', heldWriter);
    return {
      request,
      driftFactor: this.#ctx.driftFactor,
      store: this.#ctx.store,
      track: this.#ctx.track,
      stopped: () => this.#ctx.closing.aborted || this.options.signal?.aborted === true,
      lease: (granted, attemptStartedAt) =>
        this.#newLease(backend, granted, request, renewTtlMs, attemptStartedAt),
    };
  }

  /** @internal The backend of this handle's locker (loaded on first use; no network call). */
  backend(): Promise<Backend> {
    return this.#ctx.backend();
  }

  /**
   * Checks `backend` can take this handle's acquire before any network call (the session is open,
   * the TTL within the engine's maximum, the mode one it grants).
   * @returns the TTL the watchdog renews to, ms: the session's, else the validated `ttlMs`.
   */
  #checkedRenewTtlMs(backend: Backend): number {
    const { session, mode } = this.options;
    if (session !== undefined && !session.isOpen) {
      throw new InvalidArgumentError('session', 'an open session', 'closed');
    }
    const renewTtlMs = session?.ttlMs ?? validateTtl(this.options.ttlMs, 'ttlMs', backend.maxTtlMs);
    assertModeGranted(backend, mode);
    if (this.permits !== undefined) assertPermitsGranted(backend);
    if (this.candidacy !== undefined) assertElectionGranted(backend);
    if (lockDelayOf(this.options, this.permits) !== undefined) assertLockDelayGranted(backend);
    return renewTtlMs;
  }

  /** The attempt request: `ttlMs` (the TTL the watchdog renews to) capped by `maxHoldMs`. */
  #request(
    ttlMs: number,
    owner: string,
    attempts: AttemptCount,
    heldWriter: string | undefined,
  ): AttemptRequest {
    const { options } = this;
    const requestTtlMs =
      options.maxHoldMs === undefined ? ttlMs : Math.min(ttlMs, options.maxHoldMs);
    const lockDelayMs = lockDelayOf(options, this.permits);
    return {
      key: this.key,
      owner,
      ttlMs: requestTtlMs,
      mode: options.mode,
      autoRenew: options.autoRenew,
      willWait: attempts !== 'one',
      ...(options.session ? { session: options.session.engine } : {}),
      ...(heldWriter ? { heldWriter } : {}),
      ...(this.permits === undefined ? {} : { permits: this.permits }),
      ...(this.candidacy === undefined ? {} : { election: { value: this.candidacy.value } }),
      ...(lockDelayMs === undefined ? {} : { lockDelayMs }),
    };
  }

  #run<T>(
    backend: Backend,
    request: AttemptRequest,
    attempts: AttemptCount,
    startedAt: number,
    withdrawal: Withdrawal,
    grant: (result: Granted, attemptStartedAt: number) => T,
    confirmsHandoff: boolean,
  ): Promise<T | null> {
    const { options } = this;
    const ctx = this.#ctx;
    return new AcquireLoop({
      backend,
      store: ctx.store,
      request,
      attempts,
      startedAt,
      waitMs: options.waitMs,
      retry: options.retry,
      driftFactor: ctx.driftFactor,
      cancellation: new AcquireCancellation(options, ctx.closing, this.key, startedAt),
      withdrawal,
      track: ctx.track,
      onClosing: ctx.onClosing,
      grant,
      // A lease confirms a handed grant itself (a renewal at once); an owner grant has no lease.
      grantConfirmsHandoff: confirmsHandoff,
    }).run();
  }

  #newLease(
    backend: Backend,
    result: Granted,
    request: AttemptRequest,
    renewTtlMs: number,
    attemptStartedAt: number,
  ): Lease {
    const grant: LeaseGrant = {
      key: this.key,
      owner: request.owner,
      fencingToken: result.token,
      ttlMs: result.ttlMs,
      renewTtlMs,
      attemptStartedAt,
      autoRenew: this.options.autoRenew,
      maxHoldMs: this.options.maxHoldMs,
      lost: result.lost,
      validUntil: result.validUntil,
      atRisk: result.atRisk,
      handedOver: result.handedAt !== undefined,
      permits: this.permits,
      election: this.candidacy !== undefined,
      lockDelay: request.lockDelayMs !== undefined && request.lockDelayMs > 0,
    };
    const ctx = this.#ctx.leaseContext(backend);
    const lease = this.candidacy?.lease?.(ctx, grant) ?? new Lease(ctx, grant);
    this.#lease = lease;
    this.#ctx.onGrant(lease);
    return lease;
  }
}

/** A lock handle's single attempt, made by the caller (see `Lock.singleAttempt`). */
export interface SingleAttempt {
  readonly request: AttemptRequest;
  /** The locker's drift factor (a grant is believed valid until `ttlMs` less the drift). */
  readonly driftFactor: number;
  /** The locker's store label, for events. */
  readonly store: string;
  /** Keep a background clean-up for the locker's `close()` to wait on. */
  readonly track: (cleanup: Promise<unknown>) => void;
  /** Whether the caller gave up (its `signal`) or the locker closed: a grant is then no use. */
  readonly stopped: () => boolean;
  /** The lease of a grant of `request`, tracked by the locker like any other. */
  lease(granted: Granted, attemptStartedAt: number): Lease;
}

/**
 * Withdrawal of a lease acquire (the library's own owner, which no other acquire shares):
 * `abandon` on the engine, also when an answer given up on lands later, whatever it says.
 */
class AbandonOnGiveUp implements Withdrawal {
  readonly #backend: Backend;
  readonly #request: AttemptRequest;

  constructor(backend: Backend, request: AttemptRequest) {
    this.#backend = backend;
    this.#request = request;
  }

  now(): Promise<void> {
    return this.#backend.abandon(this.#request);
  }

  whenAnswered(pending: Promise<unknown>): Promise<void> {
    const now = () => this.now();
    return pending.then(now, now).catch(() => undefined);
  }

  end(): void {}
}
