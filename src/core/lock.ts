/**
 * The Lock handle and the wait loop the core owns for every backend: attempt, then wait on what
 * the backend offers (a release notification or the predecessor's deletion) bounded by a
 * full-jitter backoff, the holder's remaining TTL and the caller's deadline; withdraw on
 * timeout, abort or error. The loop shape is Curator's `LockInternals.internalLockLoop`.
 */
import { randomFillSync } from 'node:crypto';
import { BackendError, FencelockError, InvalidArgumentError, LockTimeoutError } from '../errors.js';
import { type ResolvedLockOptions, validateTtl } from '../options.js';
import type { AttemptRequest, AttemptResult, Backend } from './backend.js';
import { assertLongerThanDrift, driftMs, monotonicNow } from './clock.js';
import { publish } from './events.js';
import { Lease, type LeaseContext } from './lease.js';
import { heldInContext } from './reentry.js';
import { backoffDelayMs, sleep } from './retry.js';
import { upgradeRefused } from './rwlock.js';

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
}

/**
 * A grant made to a caller-chosen owner (`locker.acquireForOwner`): no `Lease` object, no
 * watchdog, nothing kept in this process. The engine ends it `ttlMs` after the grant unless the
 * owner renews it (`locker.renewForOwner`); any process on the same store can renew, release or
 * inspect it by key, owner and fencing token.
 */
export interface OwnerGrant {
  /** Locked key. */
  readonly key: string;
  /** The owner id the caller chose (hex, >= 128 bits). */
  readonly owner: string;
  /** Fencing token of the grant; the same token when the owner already held the key. */
  readonly fencingToken: bigint;
  /** Lease length the engine applied, ms (may be rounded up to the engine's granularity). */
  readonly ttlMs: number;
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
  readonly #ctx: LockContext;
  #lease: Lease | null = null;

  /** @internal use `locker.lock()`. */
  constructor(ctx: LockContext, key: string, options: ResolvedLockOptions) {
    this.#ctx = ctx;
    this.key = key;
    this.options = options;
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
    return this.#acquire(false) as Promise<Lease>;
  }

  /**
   * @internal `locker.acquireForOwner` / `tryAcquireForOwner`: the same wait loop, for a
   * caller-chosen owner, answered with an `OwnerGrant` instead of a `Lease` (no watchdog, no
   * reentrancy, nothing tracked). `once`: one attempt, null when the key is held.
   */
  acquireForOwner(owner: string, once: boolean): Promise<OwnerGrant | null> {
    return this.#acquire(once, owner) as Promise<OwnerGrant | null>;
  }

  /**
   * One attempt: the lease, or null when another owner holds the key.
   * @throws BackendError when the engine cannot answer.
   * @throws QuorumError (Redlock) when the vote reached no majority of nodes.
   */
  tryAcquire(): Promise<Lease | null> {
    return this.#acquire(true) as Promise<Lease | null>;
  }

  /** The wait loop; with `fixedOwner`, an owner-addressed acquire answered with an OwnerGrant. */
  async #acquire(once: boolean, fixedOwner?: string): Promise<Lease | OwnerGrant | null> {
    const startedAt = monotonicNow();
    const backend = this.#ctx.loadedBackend() ?? (await this.#ctx.backend());
    const options = this.options;
    const { session } = options;
    if (session !== undefined && !session.isOpen) {
      throw new InvalidArgumentError('session', 'an open session', 'closed');
    }
    const ttlMs = session?.ttlMs ?? validateTtl(options.ttlMs, 'ttlMs', backend.maxTtlMs);
    const { modes } = backend.capabilities;
    if (!modes.includes(options.mode)) {
      throw new InvalidArgumentError(
        'mode',
        `one of ${modes.join(', ')} (the ${backend.name} store has no ${options.mode} locks)`,
        options.mode,
      );
    }
    const scopeKey = `${this.#ctx.scopePrefix}${options.mode}\0${this.key}`;
    // Read-write locks (Curator's InterProcessReadWriteLock): inside a held write lock a read
    // lock of the same key is granted past it (downgrade); a write lock requested inside a held
    // read lock would wait for itself forever (upgrade), so it is refused at once.
    // An owner-addressed acquire belongs to no async context: these rules are for leases.
    const other =
      fixedOwner === undefined
        ? heldInContext(
            `${this.#ctx.scopePrefix}${options.mode === 'read' ? 'write' : 'read'}\0${this.key}`,
          )
        : undefined;
    const heldWriter = options.mode === 'read' && other?.isHeld ? other.owner : undefined;
    if (options.mode === 'write' && other?.isHeld) throw upgradeRefused(this.key);
    if (options.reentrant && fixedOwner === undefined) {
      const held = heldInContext(scopeKey) ?? this.#lease;
      if (held?.key === this.key && held.reenter()) {
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
        return held;
      }
    }
    const request: AttemptRequest = {
      key: this.key,
      owner: fixedOwner ?? newOwnerId(),
      ttlMs: options.maxHoldMs === undefined ? ttlMs : Math.min(ttlMs, options.maxHoldMs),
      mode: options.mode,
      autoRenew: options.autoRenew,
      willWait: !once,
      ...(session ? { session: session.engine } : {}),
      ...(heldWriter ? { heldWriter } : {}),
    };
    // No grant could ever be believed valid: without this, acquire would abandon every grant
    // and retry forever.
    assertLongerThanDrift(
      request.ttlMs,
      this.#ctx.driftFactor,
      request.ttlMs < ttlMs ? 'maxHoldMs' : 'ttlMs',
    );
    const deadline = once ? startedAt : startedAt + options.waitMs;
    // One signal of this call's own for "stop waiting": the caller's, or the locker closing.
    // (Listeners go on it, not on the shared closing signal, which would collect one per call.)
    // Made only when needed: at once when the caller gave a signal or a session, else at the
    // first wait; an uncontended acquire creates no AbortSignal and adds no abort listener.
    let ownSignal: AbortSignal | undefined;
    const waitSignal = (): AbortSignal => {
      ownSignal ??= AbortSignal.any(
        [options.signal, this.#ctx.closing, session?.signal].filter((s) => s !== undefined),
      );
      return ownSignal;
    };
    if (options.signal !== undefined || session !== undefined) waitSignal();
    const closing = this.#ctx.closing;
    const aborted = (): boolean =>
      closing.aborted || options.signal?.aborted === true || session?.signal.aborted === true;
    let attempts = 0;
    /** Attempts the engine answered (granted or not) before the deadline. */
    let answered = 0;
    /** Whether an attempt found the key held by another owner. */
    let sawHolder = false;
    const timeoutError = (details?: { reason?: string; engineAnswered?: boolean }) =>
      new LockTimeoutError(this.key, monotonicNow() - startedAt, { ...details, sawHolder });
    let sent = false;
    /**
     * Whether a grant that arrives after the caller gave up (and a queue entry left at a timeout)
     * is withdrawn. Always for the library's own owners. For a caller-chosen owner (the sidecar)
     * the same owner may be acquiring again already, and on the engine its new grant is the same
     * row, key or node as the stale one (a repeated attempt by the holder keeps its token): a late
     * withdrawal would delete the grant it was just told it holds. So it withdraws only on engines
     * whose grants live in this locker's session (etcd, ZooKeeper: there they would never run out
     * by themselves, and no other process shares the entry), and only while no later acquire of
     * the same key and owner has started in this locker. Elsewhere the grant runs out by its TTL,
     * or its owner releases or re-acquires it by name.
     */
    const ownerRun =
      fixedOwner === undefined ? undefined : startOwnerRun(backend, this.key, fixedOwner);
    const mayWithdraw = () =>
      ownerRun === undefined || (backend.capabilities.sessions && ownerRun.isLatest());
    // Where it may not withdraw, it still leaves the engine's line (never touching a grant), so
    // that a given-up waiter does not hold up the others until its entry expires; unless a newer
    // acquire of the same key and owner has started, whose place in line that entry now is.
    const withdrawLate = (): Promise<void> =>
      mayWithdraw()
        ? backend.abandon(request)
        : ownerRun?.isLatest() === true && backend.capabilities.queue && backend.leaveQueue
          ? backend.leaveQueue(request)
          : Promise.resolve();
    /**
     * For an answer still in flight: withdraw when it lands (the run stays known until then),
     * whatever it says — an error may be a grant whose reply was lost after the withdrawal made
     * at the deadline had found nothing.
     */
    const withdrawWhenAnswered = (pending: Promise<unknown>): Promise<void> => {
      ownerRun?.keep();
      return pending
        .then(withdrawLate, withdrawLate)
        .catch(() => undefined)
        .finally(() => ownerRun?.end());
    };
    /** A `wait` start was published; its end is published when the call settles. */
    let waiting = false;
    const waitEvent = (phase: 'start' | 'end') =>
      publish('wait', () => ({
        backend: backend.name,
        store: this.#ctx.store,
        key: this.key,
        owner: request.owner,
        phase,
      }));
    /** The error of the last undecided answer (`reason: 'no-quorum'`) since a decided one. */
    let lastQuorumError: Error | undefined;
    const event = (outcome: 'granted' | 'busy' | 'timeout' | 'error', extra = {}) =>
      publish('acquire', () => ({
        backend: backend.name,
        store: this.#ctx.store,
        key: this.key,
        owner: request.owner,
        outcome,
        waitMs: monotonicNow() - startedAt,
        attempts,
        ...extra,
      }));
    try {
      for (;;) {
        this.#throwIfAborted(aborted(), startedAt);
        const attemptStartedAt = monotonicNow();
        // No attempt starts past the deadline (after a wait that ran to it): nothing would bound
        // it but the engine's command timeout. A tryAcquire's one attempt starts at its deadline.
        if (attempts > 0 && attemptStartedAt >= deadline) throw lastQuorumError ?? timeoutError();
        sent = true;
        const result: AttemptResult | undefined = await this.#untilDeadline(
          backend.attempt(request),
          deadline,
          ownSignal,
          withdrawWhenAnswered,
        );
        attempts += 1;
        if (result === undefined) {
          this.#throwIfAborted(aborted(), startedAt);
          // Out of time while the votes kept failing: the nodes' outcomes say more than a timeout.
          if (lastQuorumError) throw lastQuorumError;
          throw timeoutError(
            answered === 0
              ? { reason: 'got no answer from the engine', engineAnswered: false }
              : undefined,
          );
        }
        if (!result.granted && result.reason === 'no-quorum') {
          // A vote without a majority (Redlock) is one attempt's failure, not the engine's: the
          // backend has withdrawn it everywhere; try again with jitter while the caller waits.
          const error = result.error ?? new BackendError(backend.name, 'attempt', 'no quorum');
          const left = deadline - monotonicNow();
          if (left <= 0) throw error;
          lastQuorumError = error;
          await sleep(Math.min(left, backoffDelayMs(attempts - 1, options.retry)), waitSignal());
          continue;
        }
        answered += 1;
        lastQuorumError = undefined;
        if (result.granted) {
          const validUntil =
            attemptStartedAt + result.ttlMs - driftMs(result.ttlMs, this.#ctx.driftFactor);
          if (aborted() || monotonicNow() >= validUntil) {
            // Granted after the caller gave up or the locker closed, or too late to be of use
            // (slow engine): withdraw, then give up or try again.
            this.#throwIfAborted(aborted(), startedAt);
            await withdrawLate();
            if (once || monotonicNow() >= deadline) {
              throw timeoutError({ reason: 'granted with no validity left' });
            }
            continue;
          }
          if (fixedOwner !== undefined) {
            event('granted', { fencingToken: result.token, ttlMs: result.ttlMs });
            return {
              key: this.key,
              owner: fixedOwner,
              fencingToken: result.token,
              ttlMs: result.ttlMs,
            };
          }
          const lease = new Lease(
            { ...this.#ctx, backend },
            {
              key: this.key,
              owner: request.owner,
              fencingToken: result.token,
              ttlMs: result.ttlMs,
              renewTtlMs: ttlMs,
              attemptStartedAt,
              autoRenew: options.autoRenew,
              maxHoldMs: options.maxHoldMs,
              lost: result.lost,
              validUntil: result.validUntil,
              atRisk: result.atRisk,
            },
          );
          this.#lease = lease;
          this.#ctx.onGrant(lease);
          event('granted', { fencingToken: result.token, ttlMs: result.ttlMs });
          return lease;
        }
        if (once) {
          if (result.queued) await withdrawLate();
          event('busy');
          return null;
        }
        sawHolder = true;
        const left = deadline - monotonicNow();
        if (left <= 0) throw timeoutError();
        const backoff = backoffDelayMs(attempts - 1, options.retry);
        // The holder's key cannot outlive its TTL; a little jitter keeps waiters apart then.
        const holderBound =
          result.holderTtlMs === undefined
            ? Number.POSITIVE_INFINITY
            : result.holderTtlMs + Math.random() * options.retry.initialDelayMs;
        if (!waiting) {
          waiting = true;
          waitEvent('start');
        }
        if (result.waitForChange) {
          // Event-driven: the notification usually comes first; the poll covers lost messages.
          const recheckMs = result.recheckAfterMs ?? backoff + options.retry.maxDelayMs * 4;
          const pollMs = Math.min(holderBound, left, recheckMs);
          await result.waitForChange(waitSignal(), pollMs);
        } else {
          await sleep(Math.min(holderBound, left, backoff), waitSignal());
        }
      }
    } catch (error) {
      const timedOut = error instanceof LockTimeoutError;
      event(timedOut ? 'timeout' : 'error', { error });
      // Withdraw in the background: the caller gets its answer at the deadline even when the
      // engine does not answer; the locker's close() waits for these clean-ups.
      if (sent) this.#ctx.track(withdrawLate());
      if (error instanceof FencelockError) throw error;
      throw new BackendError(backend.name, `acquire of "${this.key}"`, error);
    } finally {
      if (waiting) waitEvent('end');
      ownerRun?.end();
    }
  }

  #throwIfAborted(aborted: boolean, startedAt: number): void {
    if (!aborted) return;
    const waitedMs = monotonicNow() - startedAt;
    if (this.#ctx.closing.aborted) {
      throw new LockTimeoutError(this.key, waitedMs, {
        reason: 'was cancelled: the locker was closed',
      });
    }
    const { session } = this.options;
    if (session !== undefined && !session.isOpen) {
      throw new LockTimeoutError(this.key, waitedMs, {
        reason: `was cancelled: its session ${session.id} ended`,
        cause: session.signal.reason,
      });
    }
    throw new LockTimeoutError(this.key, waitedMs, {
      reason: 'was aborted',
      cause: this.options.signal?.reason,
    });
  }

  /**
   * Await an engine call, but give up at the caller's deadline; the late answer is then handed
   * to `withdraw`.
   */
  #untilDeadline<T>(
    pending: Promise<T>,
    deadline: number,
    signal: AbortSignal | undefined,
    withdraw: (pending: Promise<T>) => Promise<void>,
  ): Promise<T | undefined> {
    const left = deadline - monotonicNow();
    // Ends at the deadline (a tryAcquire, whose deadline is its start, still waits for its one
    // answer; an infinite wait never times out), when the caller's signal aborts, or when the
    // locker closes (through `onClosing`, which costs no listener on a shared signal). No timer
    // is made for an infinite wait, and no AbortSignal when the caller gave none.
    return new Promise<T | undefined>((resolve, reject) => {
      let settled = false;
      let timer: NodeJS.Timeout | undefined;
      const cleanup = () => {
        settled = true;
        if (timer !== undefined) clearTimeout(timer);
        signal?.removeEventListener('abort', stop);
        unregister();
      };
      const stop = () => {
        if (settled) return;
        cleanup();
        // Whatever the engine does with the abandoned attempt, withdraw it once it answers.
        this.#ctx.track(withdraw(pending));
        resolve(undefined);
      };
      const unregister = this.#ctx.onClosing(stop);
      if (left > 0 && Number.isFinite(left)) timer = setTimeout(stop, left);
      signal?.addEventListener('abort', stop, { once: true });
      pending.then(
        (value) => {
          if (settled) return;
          cleanup();
          resolve(value);
        },
        (error: unknown) => {
          if (settled) return;
          cleanup();
          reject(error);
        },
      );
    });
  }
}

/** Owner-addressed acquires in progress per backend: `owner`, `key` → latest number, live count. */
const ownerRuns = new WeakMap<Backend, Map<string, { latest: number; live: number }>>();

/**
 * Register an owner-addressed acquire of `key` by `owner`: `isLatest()` stays true until another
 * one of the same key and owner starts on the same backend. The entry lives while any run (or a
 * withdrawal a run left behind, `keep()` … `end()`) does.
 */
function startOwnerRun(backend: Backend, key: string, owner: string) {
  let runs = ownerRuns.get(backend);
  if (runs === undefined) {
    runs = new Map();
    ownerRuns.set(backend, runs);
  }
  const id = `${owner}\u0000${key}`;
  const entry = runs.get(id) ?? { latest: 0, live: 0 };
  runs.set(id, entry);
  entry.latest += 1;
  entry.live += 1;
  const number = entry.latest;
  return {
    isLatest: () => entry.latest === number,
    keep: () => {
      entry.live += 1;
    },
    end: () => {
      entry.live -= 1;
      if (entry.live === 0 && runs.get(id) === entry) runs.delete(id);
    },
  };
}
