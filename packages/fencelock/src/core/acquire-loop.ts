/**
 * The wait loop the core owns for every backend: attempt, then wait on what the backend offers (a
 * release notification or the predecessor's deletion) bounded by a full-jitter backoff, the
 * holder's remaining TTL and the caller's deadline; withdraw on timeout, abort or error. A wait
 * may end with a grant the engine handed over on the release (`Granted.handedAt`): it is the
 * acquire's grant, with no further attempt. The loop shape is Curator's
 * `LockInternals.internalLockLoop`. It sees only the contract's answers (`Granted`, `NotGranted`
 * with its `reason`), never an engine's errors.
 */

import { BackendError, FencelockError, LockTimeoutError } from '../errors.js';
import type { RetryOptions } from '../options.js';
import type { AttemptRequest, Backend, Granted, NotGranted } from './backend.js';
import type { AcquireCancellation } from './cancellation.js';
import { driftMs, monotonicNow } from './clock.js';
import { isObserved, publish } from './events.js';
import { backoffDelayMs, sleep } from './retry.js';
import { startWait } from './wait.js';

/** How many attempts an acquire makes: one (`tryAcquire`), or until its deadline (`acquire`). */
export type AttemptCount = 'one' | 'until-deadline';

/**
 * How an acquire withdraws what the engine may hold for it after it gave up: a grant that came
 * too late, a queue entry left by a single attempt, an answer still in flight.
 */
export interface Withdrawal {
  /** Withdraw now; rejects with the engine's error when it cannot answer. */
  now(): Promise<void>;
  /** Withdraw once `pending` (an attempt given up on) settles, whatever it says; never rejects. */
  whenAnswered(pending: Promise<unknown>): Promise<void>;
  /** The acquire settled (called once). */
  end(): void;
}

/** Everything one run of the loop needs. */
export interface AcquirePlan<T> {
  readonly backend: Backend;
  /** The store's name in events. */
  readonly store: string;
  readonly request: AttemptRequest;
  readonly attempts: AttemptCount;
  /** Monotonic time the acquire started, ms. */
  readonly startedAt: number;
  /** How long to wait, ms (`Infinity`: no deadline). Ignored for a single attempt. */
  readonly waitMs: number;
  readonly retry: Required<RetryOptions>;
  readonly driftFactor: number;
  readonly cancellation: AcquireCancellation;
  readonly withdrawal: Withdrawal;
  /** Keep a background clean-up for the locker's `close()` to wait on. */
  readonly track: (cleanup: Promise<unknown>) => void;
  /** Call `stop` when the locker closes; returns the function that unregisters it. */
  readonly onClosing: (stop: () => void) => () => void;
  /** Turn a grant still valid into the acquire's answer (a `Lease`, an `OwnerGrant`). */
  readonly grant: (result: Granted, attemptStartedAt: number) => T;
  /**
   * Whether `grant` takes a handed grant (`Granted.handedAt`, short first TTL) as it comes and
   * confirms it itself (a `Lease` renews it at once); false: the loop confirms it with `renew` to
   * the requested TTL before answering (an owner-addressed grant has no watchdog).
   */
  readonly grantConfirmsHandoff: boolean;
}

/** The loop goes on with another attempt. */
const AGAIN = Symbol('again');

function noop(): void {}

/**
 * One acquire: `run()` answers with the plan's grant, or null when a single attempt found the key
 * held. The run's counters (attempts, answers, a holder seen, the last undecided vote) are its
 * state. Publishes `acquire` (granted, busy, timeout, error) and `wait` (start, end) events.
 * @throws LockTimeoutError when the deadline passes or a stop source fires first.
 * @throws the last not-granted `error` of `reason: 'no-quorum'` answers (Redlock's
 *   `QuorumError`) when the deadline passes with no decided answer since; at once for one attempt.
 * @throws BackendError (or the engine's `FencelockError`) when the engine cannot answer.
 */
export class AcquireLoop<T> {
  readonly #plan: AcquirePlan<T>;
  readonly #deadline: number;
  #attempts = 0;
  /** Attempts the engine answered with a decision (granted or held) before the deadline. */
  #answered = 0;
  /** Whether an attempt found the key held by another owner. */
  #sawHolder = false;
  #sent = false;
  /** A `wait` start was published; its end is published when the run settles. */
  #waiting = false;
  /** The error of the last undecided answer (`reason: 'no-quorum'`) since a decided one. */
  #undecided: Error | undefined;

  constructor(plan: AcquirePlan<T>) {
    this.#plan = plan;
    this.#deadline = plan.attempts === 'one' ? plan.startedAt : plan.startedAt + plan.waitMs;
  }

  async run(): Promise<T | null> {
    const { cancellation, request, backend } = this.#plan;
    try {
      for (;;) {
        cancellation.throwIfStopped(this.#sawHolder);
        const attemptStartedAt = monotonicNow();
        // No attempt starts past the deadline (after a wait that ran to it): nothing would bound
        // it but the engine's command timeout. A tryAcquire's one attempt starts at its deadline.
        if (this.#attempts > 0 && attemptStartedAt >= this.#deadline) {
          throw this.#undecided ?? this.#timeout();
        }
        this.#sent = true;
        let result: Granted | NotGranted | undefined;
        try {
          result = await this.#answerBeforeDeadline(backend.attempt(request));
        } finally {
          // An attempt the engine failed counts too (the `acquire` event's `attempts`).
          this.#attempts += 1;
        }
        if (result === undefined) throw this.#noAnswer();
        if (result.granted) {
          this.#decided();
          // The usual answer: taken with no further await (no promise, no turn).
          if (this.#isUsable(result, attemptStartedAt)) {
            return this.#grant(result, attemptStartedAt);
          }
          await this.#withdrawUnusable();
        } else {
          const next = await this.#notGranted(result);
          if (next !== AGAIN) return next;
        }
      }
    } catch (error) {
      this.#event(error instanceof LockTimeoutError ? 'timeout' : 'error', { error });
      // Withdraw in the background: the caller gets its answer at the deadline even when the
      // engine does not answer; the locker's close() waits for these clean-ups.
      if (this.#sent) this.#plan.track(this.#plan.withdrawal.now());
      if (error instanceof FencelockError) throw error;
      throw new BackendError(backend.name, `acquire of "${request.key}"`, error);
    } finally {
      if (this.#waiting) this.#waitEvent('end');
      this.#plan.withdrawal.end();
    }
  }

  /**
   * A grant is of use unless the caller gave up or the locker closed meanwhile, or it came too
   * late to be believed valid (a slow engine).
   */
  #isUsable(result: Granted, attemptStartedAt: number): boolean {
    const { cancellation, driftFactor } = this.#plan;
    const validUntil = attemptStartedAt + result.ttlMs - driftMs(result.ttlMs, driftFactor);
    return !cancellation.isStopped() && monotonicNow() < validUntil;
  }

  /** The acquire's answer for a usable grant. */
  #grant(result: Granted, attemptStartedAt: number): T {
    const answer = this.#plan.grant(result, attemptStartedAt);
    if (isObserved('acquire')) {
      this.#event('granted', { fencingToken: result.token, ttlMs: result.ttlMs });
    }
    return answer;
  }

  /**
   * Withdraw a grant that is of no use, then give up (throws) or let the loop try again.
   * @throws LockTimeoutError when a stop source fired, or for one attempt or past the deadline.
   */
  async #withdrawUnusable(): Promise<void> {
    this.#plan.cancellation.throwIfStopped(this.#sawHolder);
    await this.#plan.withdrawal.now();
    if (this.#plan.attempts === 'one' || monotonicNow() >= this.#deadline) {
      throw this.#timeout({ reason: 'granted with no validity left' });
    }
  }

  async #notGranted(result: NotGranted): Promise<T | null | typeof AGAIN> {
    const { retry, cancellation } = this.#plan;
    if (result.reason === 'no-quorum') {
      // Undecided (no majority of nodes either way): one attempt's failure, not the engine's;
      // the backend has withdrawn it everywhere. Try again with jitter while the caller waits.
      const error =
        result.error ?? new BackendError(this.#plan.backend.name, 'attempt', 'no quorum');
      const left = this.#deadline - monotonicNow();
      if (left <= 0) throw error;
      this.#undecided = error;
      const backoff = backoffDelayMs(this.#attempts - 1, retry);
      await sleep(Math.min(left, backoff), cancellation.signal());
      return AGAIN;
    }
    this.#decided();
    if (this.#plan.attempts === 'one') {
      if (result.queued) await this.#plan.withdrawal.now();
      this.#event('busy');
      return null;
    }
    this.#sawHolder = true;
    const left = this.#deadline - monotonicNow();
    if (left <= 0) throw this.#timeout();
    const backoff = backoffDelayMs(this.#attempts - 1, retry);
    // The holder's key cannot outlive its TTL; a little jitter keeps waiters apart then.
    const holderBound =
      result.holderTtlMs === undefined
        ? Number.POSITIVE_INFINITY
        : result.holderTtlMs + Math.random() * retry.initialDelayMs;
    if (!this.#waiting) {
      this.#waiting = true;
      this.#waitEvent('start');
    }
    if (result.waitForChange) {
      // Event-driven: the notification usually comes first; the poll covers lost messages.
      const recheckMs = result.recheckAfterMs ?? backoff + retry.maxDelayMs * 4;
      const handed = await result.waitForChange(
        cancellation.signal(),
        Math.min(holderBound, left, recheckMs),
      );
      if (handed) return this.#handed(handed);
    } else {
      await sleep(Math.min(holderBound, left, backoff), cancellation.signal());
    }
    return AGAIN;
  }

  /**
   * A grant handed over with the wait's notification: the acquire's answer, its validity counted
   * from the notification's receipt with the short first TTL. Where `grant` does not confirm it
   * (see `grantConfirmsHandoff`), it is renewed to the requested TTL first; a handed key already
   * gone by then (its first TTL ran out) sends the loop to attempt again.
   */
  async #handed(handed: Granted): Promise<T | typeof AGAIN> {
    const { backend, request } = this.#plan;
    let result = handed;
    let startedAt = handed.handedAt ?? monotonicNow();
    if (!this.#plan.grantConfirmsHandoff && this.#isUsable(handed, startedAt)) {
      startedAt = monotonicNow();
      const lease = {
        key: request.key,
        owner: request.owner,
        fencingToken: handed.token,
        permits: request.permits,
        election: request.election !== undefined,
      };
      const renewed = await this.#answerBeforeDeadline(backend.renew(lease, request.ttlMs));
      if (renewed === undefined) throw this.#noAnswer();
      if (!renewed.ok) return AGAIN;
      const { handedAt: _, ...confirmed } = handed;
      result = { ...confirmed, ttlMs: renewed.ttlMs };
    }
    if (this.#isUsable(result, startedAt)) return this.#grant(result, startedAt);
    await this.#withdrawUnusable();
    return AGAIN;
  }

  /**
   * Await the engine's answer, but give up at the deadline, when a stop source fires, or when the
   * locker closes (through `onClosing`, which costs no listener on a shared signal): undefined
   * then, and the late answer is withdrawn when it lands. A tryAcquire (deadline = start) still
   * waits for its one answer; no timer is made for an infinite wait, and no AbortSignal when the
   * caller gave none.
   */
  #answerBeforeDeadline<R>(pending: Promise<R>): Promise<R | undefined> {
    const { cancellation, onClosing, track, withdrawal } = this.#plan;
    // An infinite wait reads no clock here: it makes no timer whatever the time.
    const left = Number.isFinite(this.#deadline) ? this.#deadline - monotonicNow() : Infinity;
    return new Promise<R | undefined>((resolve, reject) => {
      let answered = false;
      let unregister = noop;
      const wait = startWait(cancellation.madeSignal, left > 0 ? left : Infinity, () => {
        unregister();
        if (answered) return;
        // Whatever the engine does with the abandoned attempt, withdraw it once it answers.
        track(withdrawal.whenAnswered(pending));
        resolve(undefined);
      });
      if (!wait.isDone()) unregister = onClosing(wait.wake);
      pending.then(
        (value) => {
          if (wait.isDone()) return;
          answered = true;
          wait.wake();
          resolve(value);
        },
        (error: unknown) => {
          if (wait.isDone()) return;
          answered = true;
          wait.wake();
          reject(error);
        },
      );
    });
  }

  /** An answer that decides (granted, held) ends a streak of undecided ones. */
  #decided(): void {
    this.#answered += 1;
    this.#undecided = undefined;
  }

  /** The answer did not come before the deadline or a stop. */
  #noAnswer(): Error {
    this.#plan.cancellation.throwIfStopped(this.#sawHolder);
    // Out of time while the votes kept failing: the nodes' outcomes say more than a timeout.
    if (this.#undecided) return this.#undecided;
    return this.#timeout(
      this.#answered === 0
        ? { reason: 'got no answer from the engine', engineAnswered: false }
        : undefined,
    );
  }

  #timeout(details?: { reason?: string; engineAnswered?: boolean }): LockTimeoutError {
    const waitedMs = monotonicNow() - this.#plan.startedAt;
    return new LockTimeoutError(this.#plan.request.key, waitedMs, {
      ...details,
      sawHolder: this.#sawHolder,
    });
  }

  #event(outcome: 'granted' | 'busy' | 'timeout' | 'error', extra = {}): void {
    const { backend, store, request, startedAt } = this.#plan;
    publish('acquire', () => ({
      backend: backend.name,
      store,
      key: request.key,
      owner: request.owner,
      outcome,
      waitMs: monotonicNow() - startedAt,
      attempts: this.#attempts,
      ...extra,
    }));
  }

  #waitEvent(phase: 'start' | 'end'): void {
    const { backend, store, request } = this.#plan;
    publish('wait', () => ({
      backend: backend.name,
      store,
      key: request.key,
      owner: request.owner,
      phase,
    }));
  }
}
