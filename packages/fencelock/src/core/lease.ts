/**
 * A granted lock: fencing token, validity on the monotonic clock, watchdog renewal, the
 * lease-loss `AbortSignal`, hold count and release.
 *
 * Validity follows the Redlock spec's rule, applied to every engine: a lease granted by an
 * attempt that started at `t0` is believed valid only until `t0 + ttlMs − drift`, with
 * `drift = ttlMs × driftFactor + 2 ms`, all on `performance.now()`. Renewals move that bound
 * the same way from the start of the renewal. A grant handed over on a release (Redis, see
 * `Granted.handedAt`) counts from the receipt of its message with its short first TTL, and is
 * renewed to the requested TTL at once (the confirmation), with or without the watchdog. Loss
 * is reported through `signal`, never by a throw from a timer (node-redlock's `using()` idea,
 * with `AbortSignal.reason` as the error).
 */
import { LockLostError, type LockLostReason, NotLockOwnerError } from '../errors.js';
import { validateTtl } from '../options.js';
import type { Backend, LeaseRef, ReleaseOutcome } from './backend.js';
import { driftMs, monotonicNow } from './clock.js';
import { isObserved, publish } from './events.js';
import type { Watchdog, WatchdogTask } from './watchdog.js';

/** Shortest wait before a renewal or its retry, ms. */
const MIN_RENEW_GAP_MS = 10;

/** What a lease needs from its locker. */
export interface LeaseContext {
  readonly backend: Backend;
  /** The store's name in events (see `LockerOptions.name`). */
  readonly store: string;
  readonly watchdog: Watchdog;
  readonly driftFactor: number;
  /** Called once when the lease stops being held (released or lost). */
  readonly onEnd: (lease: Lease) => void;
}

/** Grant details the locker hands to a new lease. */
export interface LeaseGrant {
  readonly key: string;
  readonly owner: string;
  readonly fencingToken: bigint;
  /** Lease length the engine applied, ms. */
  readonly ttlMs: number;
  /** Requested lease length the watchdog renews to, ms. */
  readonly renewTtlMs: number;
  /** Monotonic time the winning attempt started. */
  readonly attemptStartedAt: number;
  readonly autoRenew: boolean;
  /** Hard cap on holding, ms from `attemptStartedAt`; undefined for none. */
  readonly maxHoldMs: number | undefined;
  /** The backend's signal that the engine ended this grant (session loss), if it has one. */
  readonly lost: AbortSignal | undefined;
  /** The session's validity bound (monotonic ms), if the backend gives one. */
  readonly validUntil: number | undefined;
  /** Whether the engine connection is down (the grant may be lost), if the backend can tell. */
  readonly atRisk: (() => boolean) | undefined;
  /**
   * The grant was handed over on a release (`Granted.handedAt`): `ttlMs` is a short first TTL
   * and `attemptStartedAt` the receipt of the message; the lease renews to `renewTtlMs` at once.
   */
  readonly handedOver: boolean;
  /** A semaphore's permit count, for a permit; undefined for a lock. */
  readonly permits: number | undefined;
  /** Set for a leadership: the grant is of the key's election object. */
  readonly election?: boolean;
  /**
   * The grant carries a lock-delay (`LockOptions.lockDelayMs` above 0): when the library ends
   * the lease itself, it leaves the grant to run out on an engine without sessions (a release
   * would clear the delay while the holder's work may still be in flight).
   */
  readonly lockDelay?: boolean;
}

/**
 * A granted lock. Use `signal` to stop work when the lease is lost, pass `fencingToken` to the
 * resource with every write, and `release()` (or `await using`) when done.
 */
export class Lease implements LeaseRef, AsyncDisposable {
  /** Locked key. */
  readonly key: string;
  /** Owner id of this lease (128 random bits, hex). */
  readonly owner: string;
  /** Fencing token: a `bigint` strictly increasing over all grants of `key`. */
  readonly fencingToken: bigint;
  /** For a semaphore's permit, the semaphore's permit count; undefined for a lock. */
  readonly permits: number | undefined;
  /** True for a leadership (`locker.election`): the lease is of the key's election object. */
  readonly election: boolean | undefined;
  readonly #ctx: LeaseContext;
  /** Made on first use of `signal` (most leases are released without anyone reading it). */
  #abort: AbortController | undefined;
  /** The loss, kept for a `signal` first read after the lease was lost. */
  #lostError: LockLostError | undefined;
  readonly #grantedAt: number;
  readonly #maxHoldUntil: number;
  readonly #autoRenew: boolean;
  readonly #atRisk: (() => boolean) | undefined;
  /** Withdraw the grant on a loss (see `LeaseGrant.lockDelay`). */
  readonly #withdrawOnLoss: boolean;
  #ttlMs: number;
  #renewTtlMs: number;
  /** Set by `#setValidity` (first in the constructor). */
  #expiresAt = 0;
  /** `#expiresAt` is the engine's bound (a session's validity), sooner than the lease's own. */
  #sessionBound = false;
  #holdCount = 1;
  /** The engine call of the last release failed (unknown outcome): the next release asks again. */
  #releaseInDoubt = false;
  #state: 'held' | 'lost' | 'released' = 'held';
  #renewing: Promise<unknown> | undefined;
  #lastRenewError: unknown;
  #unlinkSession: (() => void) | undefined;
  /** The engine TTL was cut to end at the maxHoldMs cap: no renewal goes past it. */
  #capped: boolean;
  readonly #task: WatchdogTask = { run: () => this.#onWatchdog() };

  /** @internal created by the locker when an attempt is granted. */
  constructor(ctx: LeaseContext, grant: LeaseGrant) {
    this.#ctx = ctx;
    this.key = grant.key;
    this.owner = grant.owner;
    this.fencingToken = grant.fencingToken;
    this.permits = grant.permits;
    this.election = grant.election;
    this.#grantedAt = grant.attemptStartedAt;
    this.#maxHoldUntil =
      grant.maxHoldMs === undefined
        ? Number.POSITIVE_INFINITY
        : grant.attemptStartedAt + grant.maxHoldMs;
    this.#autoRenew = grant.autoRenew;
    this.#atRisk = grant.atRisk;
    this.#withdrawOnLoss = grant.lockDelay !== true || ctx.backend.capabilities.sessions;
    this.#ttlMs = grant.ttlMs;
    this.#renewTtlMs = grant.renewTtlMs;
    // A handed grant's short first TTL is no cap: its confirmation says whether one applies.
    this.#capped = !grant.handedOver && grant.ttlMs < grant.renewTtlMs;
    this.#setValidity(grant.attemptStartedAt, grant.ttlMs, grant.validUntil);
    if (grant.handedOver) void this.#renew('confirm');
    else this.#scheduleNext();
    const { lost } = grant;
    if (lost) {
      const onLost = () => this.lose('session-lost', lost.reason, 'session');
      if (lost.aborted) onLost();
      else {
        lost.addEventListener('abort', onLost, { once: true });
        this.#unlinkSession = () => lost.removeEventListener('abort', onLost);
      }
    }
  }

  /** Aborted with a `LockLostError` as `reason` when the lease is lost. */
  get signal(): AbortSignal {
    if (this.#abort === undefined) {
      this.#abort = new AbortController();
      if (this.#lostError !== undefined) this.#abort.abort(this.#lostError);
    }
    return this.#abort.signal;
  }

  /**
   * True while the lease is held but the engine connection is down, so the engine may already
   * have ended it (ZooKeeper's SUSPENDED under `suspended=wait`; Curator's "at risk"). Work that
   * must not run twice should pause until this is false again. Always false on engines whose
   * grants do not live in a connection.
   */
  get atRisk(): boolean {
    return this.#state === 'held' && (this.#atRisk?.() ?? false);
  }

  /** Lease length last applied by the engine, ms. */
  get ttlMs(): number {
    return this.#ttlMs;
  }

  /**
   * End of believed validity on the monotonic clock (`performance.now()` ms): start of the last
   * successful grant or renewal + ttlMs − drift.
   */
  get expiresAt(): number {
    return this.#expiresAt;
  }

  /** Milliseconds of believed validity left (0 when expired, lost or released). */
  get remainingMs(): number {
    return this.#state === 'held' ? Math.max(0, this.#expiresAt - monotonicNow()) : 0;
  }

  /**
   * Holds not yet released: 1 after a grant, +1 per reentrant acquire, −1 per `release()`. A lost
   * lease keeps its count until released, so its `release()` still asks the engine.
   */
  get holdCount(): number {
    return this.#holdCount;
  }

  /** True while the lease is neither released nor lost and its validity has not run out. */
  get isHeld(): boolean {
    return this.#state === 'held' && monotonicNow() < this.#expiresAt;
  }

  /** @internal reentrant acquire: one more hold of the same lease (same token). */
  reenter(): boolean {
    if (!this.isHeld) return false;
    this.#holdCount += 1;
    return true;
  }

  /**
   * Extend the lease to `ttlMs` from now (capped by `maxHoldMs`); the watchdog, if on, renews to
   * this length from then on.
   * @throws InvalidArgumentError for a bad `ttlMs` (before any network call).
   * @throws LockLostError when the engine no longer has this owner's lease (the signal aborts).
   * @throws NotLockOwnerError after `release()`.
   * @throws BackendError when the engine cannot answer.
   */
  async extend(ttlMs: number): Promise<void> {
    const ttl = validateTtl(ttlMs, 'ttlMs', this.#ctx.backend.maxTtlMs);
    if (this.#state === 'released') {
      throw new NotLockOwnerError(this.key, 'extend', 'the lease was already released');
    }
    if (this.#state === 'lost') throw this.signal.reason as LockLostError;
    this.#renewTtlMs = ttl;
    await this.#renew('extend');
    if (this.signal.aborted) throw this.signal.reason as LockLostError;
  }

  /**
   * Release one hold. When the hold count reaches 0 the watchdog stops (after any renewal in
   * flight settles) and the engine deletes the lease by compare-and-delete of owner and token.
   * Over-release returns `not-held` without an engine call, unless the engine call of the last
   * release failed: then the engine is asked again. The count never goes negative.
   * @returns `released`, `not-held` or `not-owner` (the engine's answer; never deletes another
   * owner's lease).
   * @throws BackendError when the engine cannot answer (the lease then expires by its TTL, unless
   * the backend deletes it once the engine answers again); a later `release()` asks again.
   */
  async release(): Promise<ReleaseOutcome> {
    if (this.#holdCount === 0 && !this.#releaseInDoubt) return 'not-held';
    this.#holdCount = Math.max(0, this.#holdCount - 1);
    if (this.#holdCount > 0) return 'released';
    if (this.#state === 'held' && monotonicNow() >= this.#expiresAt) {
      // Validity ran out before the watchdog could say so (a blocked event loop): say it now.
      this.lose(this.#capped ? 'max-hold' : 'expired', this.#lastRenewError);
    }
    const wasHeld = this.#state === 'held';
    if (wasHeld) this.#end('released');
    this.#ctx.watchdog.cancel(this.#task);
    // Let a renewal in flight land first so it cannot extend a key after its release; a lost
    // lease has nothing to protect, so its release does not wait on a stuck engine call.
    if (wasHeld && this.#renewing !== undefined) await this.#renewing;
    const releasedAt = monotonicNow();
    try {
      const outcome = await this.#ctx.backend.release(this);
      this.#releaseInDoubt = false;
      // Checked first: a payload closure would be made on every release, observed or not.
      if (isObserved('release')) this.#releaseEvent(outcome, releasedAt);
      return outcome;
    } catch (error) {
      this.#releaseInDoubt = true;
      this.#releaseEvent('error', releasedAt, error);
      throw error;
    }
  }

  /** Publish the `release` event; `releasedAt` is when the engine call started. */
  #releaseEvent(outcome: ReleaseOutcome | 'error', releasedAt: number, error?: unknown): void {
    const holdMs = releasedAt - this.#grantedAt;
    publish('release', () => ({
      ...this.#eventBase(),
      outcome,
      holdMs,
      ...(outcome === 'error' ? { error } : {}),
    }));
  }

  /** `await using lease = await lock.acquire()` releases one hold at scope exit. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }

  /** @internal declare the lease lost (engine says so, session ended). Idempotent. */
  lose(reason: LockLostReason, cause?: unknown, operation = 'watchdog'): void {
    if (this.#state !== 'held') return;
    const error = new LockLostError(this.key, this.fencingToken, reason, { cause, operation });
    this.#end('lost');
    this.#ctx.watchdog.cancel(this.#task);
    publish('lost', () => ({ ...this.#eventBase(), reason, error }));
    this.#lostError = error;
    this.#abort?.abort(error);
    // Withdraw the key on the engine too (compare-and-delete by owner and token, so never
    // another owner's): a session engine would otherwise keep a key this client gave up on
    // alive (after the maxHoldMs cap, or when validity ran out while the session lived on).
    // A grant with a lock-delay on an engine without sessions is left to run out by its own
    // TTL instead, so that its delay follows: the caller's work may still be writing.
    if (this.#withdrawOnLoss) this.#ctx.backend.release(this).catch(() => undefined);
  }

  #end(state: 'lost' | 'released'): void {
    this.#state = state;
    this.#unlinkSession?.();
    this.#ctx.onEnd(this);
  }

  #eventBase() {
    return {
      backend: this.#ctx.backend.name,
      store: this.#ctx.store,
      key: this.key,
      owner: this.owner,
      fencingToken: this.fencingToken,
    };
  }

  #setValidity(startedAt: number, ttlMs: number, engineBound = Number.POSITIVE_INFINITY): void {
    const own = Math.min(
      startedAt + ttlMs - driftMs(ttlMs, this.#ctx.driftFactor),
      this.#maxHoldUntil,
    );
    this.#sessionBound = engineBound < own;
    this.#expiresAt = Math.min(own, engineBound);
  }

  /** Next watchdog wake-up: a renewal at ttl/3, or the validity end if no renewal will happen. */
  #scheduleNext(): void {
    if (this.#state !== 'held') return;
    const now = monotonicNow();
    const renewable = this.#autoRenew && !this.#capped;
    // A session's bound (its keepalive ran late) can come before ttl/3: renew halfway to it, so
    // that a session kept alive meanwhile carries the lease on instead of losing it at the bound.
    const renewInMs = this.#sessionBound
      ? Math.min(this.#ttlMs / 3, Math.max(MIN_RENEW_GAP_MS, (this.#expiresAt - now) / 2))
      : this.#ttlMs / 3;
    const renewAt = renewable ? now + renewInMs : Number.POSITIVE_INFINITY;
    // Where the backend batches renewals, one may go up to ttl/12 early with others due then.
    const slackMs =
      this.#ctx.backend.capabilities.batchRenew && renewAt <= this.#expiresAt
        ? this.#ttlMs / 12
        : 0;
    this.#ctx.watchdog.schedule(this.#task, Math.min(renewAt, this.#expiresAt), slackMs);
  }

  #onWatchdog(): void {
    if (this.#state !== 'held') return;
    const now = monotonicNow();
    if (now >= this.#expiresAt) {
      this.lose(this.#capped ? 'max-hold' : 'expired', this.#lastRenewError);
      return;
    }
    if (this.#renewing !== undefined) {
      // A renewal is in flight and has not answered; check again when validity runs out.
      this.#ctx.watchdog.schedule(this.#task, this.#expiresAt);
      return;
    }
    void this.#renew('watchdog');
  }

  /**
   * Renew once; never rejects for the watchdog or a handed grant's confirmation (a failed one is
   * retried as the watchdog's are), rethrows engine errors for `extend`.
   */
  async #renew(operation: 'watchdog' | 'extend' | 'confirm'): Promise<void> {
    const startedAt = monotonicNow();
    const untilCap = Math.ceil(this.#maxHoldUntil - startedAt);
    const ttlMs = Math.max(1, Math.min(this.#renewTtlMs, untilCap));
    const pending = this.#ctx.backend.renew(this, ttlMs);
    this.#renewing = pending.catch(() => undefined);
    if (operation !== 'extend') {
      // Wake up at the validity end even if the engine never answers.
      this.#ctx.watchdog.schedule(this.#task, this.#expiresAt);
    }
    try {
      const result = await pending;
      // An answer that lands after the lease was declared lost (or released) reports nothing:
      // `lost` (or the release) was the lease's last event and its watchdog has stopped.
      if (this.#state !== 'held') return;
      publish('renew', () => ({
        ...this.#eventBase(),
        ok: result.ok,
        ...(result.ok ? { ttlMs: result.ttlMs } : {}),
      }));
      if (!result.ok) {
        this.lose(result.reason, undefined, operation);
        return;
      }
      if (monotonicNow() >= this.#expiresAt) {
        // The answer came too late to prove anything: validity already ran out.
        this.lose('expired');
        return;
      }
      this.#lastRenewError = undefined;
      this.#capped = ttlMs >= untilCap;
      this.#ttlMs = result.ttlMs;
      this.#setValidity(startedAt, result.ttlMs, result.validUntil);
      this.#scheduleNext();
    } catch (error) {
      // Lost (or released) meanwhile: `extend()` then throws the LockLostError from the signal
      // instead (or resolves, the lease being released).
      if (this.#state !== 'held') return;
      publish('renew', () => ({ ...this.#eventBase(), ok: false, error }));
      this.#lastRenewError = error;
      if (operation === 'extend') throw error;
      this.#retryAfterFailure(error);
    } finally {
      this.#renewing = undefined;
    }
  }

  #retryAfterFailure(error: unknown): void {
    if (this.#state !== 'held') return;
    const now = monotonicNow();
    if (now >= this.#expiresAt) {
      this.lose('expired', error);
      return;
    }
    const retryAt = Math.min(now + Math.max(MIN_RENEW_GAP_MS, this.#ttlMs / 10), this.#expiresAt);
    this.#ctx.watchdog.schedule(this.#task, retryAt);
  }
}
