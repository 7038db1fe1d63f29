/**
 * A counting semaphore whose permits are leases: at most `permits` holders of one key at once,
 * each with its own owner, fencing token, watchdog, loss signal and release, so that a crashed
 * holder's permit comes back by its TTL (or its session's end). The shape of Redisson's
 * `RPermitExpirableSemaphore` and Curator's `InterProcessSemaphoreV2`, where each acquired permit
 * is a lease; unlike theirs, every permit carries a fencing token from the key's one strictly
 * increasing sequence. Waiters are granted in arrival order, woken by the engine's release
 * notification where it has one. Permits are not reentrant: each acquire takes one more.
 */

import { heldLease, holdWhile } from '../core/hold.js';
import type { Lease } from '../core/lease.js';
import type { Lock } from '../core/lock.js';
import { validatePermits } from '../core/permits.js';
import { InvalidArgumentError } from '../errors.js';
import {
  isOptionsObject,
  type LockOptions,
  type ResolvedLockOptions,
  resolveLockOptions,
} from '../options.js';

/** Options of one permit acquire: a lock's, without reentrancy, read mode or a session. */
export type PermitOptions = Omit<LockOptions, 'reentrant' | 'mode' | 'session'>;

/** Options of `locker.semaphore(key, options)`: the permit count and per-permit defaults. */
export interface SemaphoreOptions extends PermitOptions {
  /**
   * How many holders the key may have at once: an integer from 1 to 10,000 (`MAX_PERMITS`).
   * Every user of one key must pass the same count; an acquire that meets holders or waiters
   * using another count rejects with `PermitsMismatchError`.
   */
  readonly permits: number;
}

/** The option names a permit acquire takes. */
export const PERMIT_OPTION_NAMES: ReadonlySet<string> = new Set([
  'ttlMs',
  'waitMs',
  'autoRenew',
  'maxHoldMs',
  'signal',
  'retry',
]);

/** What a semaphore needs from its locker: a permit handle for resolved options. */
export type PermitHandleFactory = (options: ResolvedLockOptions) => Lock;

/**
 * Split and check `locker.semaphore`'s options (no network call).
 * @returns the permit count and the remaining options, resolved over `base`.
 * @throws InvalidArgumentError for a missing or bad `permits`, an unknown option or a bad value.
 */
export function resolveSemaphoreOptions(
  base: ResolvedLockOptions,
  options: unknown,
): { permits: number; defaults: ResolvedLockOptions } {
  if (!isOptionsObject(options)) {
    throw new InvalidArgumentError('options', 'an options object with permits', options);
  }
  const { permits, ...rest } = options as SemaphoreOptions;
  return {
    permits: validatePermits(permits),
    defaults: resolveLockOptions(base, rest, PERMIT_OPTION_NAMES),
  };
}

/**
 * A counting semaphore on one key. Create with `locker.semaphore(key, { permits })`; it holds no
 * state of its own and makes no network call until an acquire.
 */
export class Semaphore {
  /** The semaphore's key (a different object on the engine from a lock of the same key). */
  readonly key: string;
  /** How many holders the key may have at once. */
  readonly permits: number;
  readonly #defaults: ResolvedLockOptions;
  readonly #handle: PermitHandleFactory;

  /** @internal use `locker.semaphore()`. */
  constructor(
    key: string,
    permits: number,
    defaults: ResolvedLockOptions,
    handle: PermitHandleFactory,
  ) {
    this.key = key;
    this.permits = permits;
    this.#defaults = defaults;
    this.#handle = handle;
  }

  /**
   * Wait for a permit and return it as a lease (`await using permit = await sem.acquire()`).
   * @param options per-call options over the semaphore's (`ttlMs`, `waitMs`, `autoRenew`,
   *   `maxHoldMs`, `signal`, `retry`).
   * @returns a `Lease` with its own owner and fencing token, strictly greater than every earlier
   *   permit's of this key.
   * @throws InvalidArgumentError for a bad option, or on a store without semaphores, before any
   *   network call.
   * @throws PermitsMismatchError when the key's holders or waiters use another permit count.
   * @throws LockTimeoutError when `waitMs` passes or `signal` aborts first.
   * @throws BackendError (QuorumError on Redlock) when the engine cannot answer.
   */
  acquire(options?: PermitOptions): Promise<Lease> {
    try {
      return this.#lock(options).acquire();
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * One attempt: a permit, or null when all permits are held (or others wait first).
   * @throws as `acquire`, except LockTimeoutError.
   */
  tryAcquire(options?: PermitOptions): Promise<Lease | null> {
    try {
      return this.#lock(options).tryAcquire();
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Run `fn(permit)` while holding a permit, then release it (always, also when `fn` throws).
   * @returns what `fn` returns.
   * @throws `fn`'s own error, rethrown after release.
   * @throws LockLostError as soon as the permit is lost (`permit.signal` aborts with it), or when
   *   `fn` finished but the permit ran out meanwhile.
   * @throws as `acquire`.
   */
  async withPermit<T>(fn: (permit: Lease) => Promise<T> | T, options?: PermitOptions): Promise<T> {
    if (typeof fn !== 'function') throw new InvalidArgumentError('fn', 'a function', fn);
    const permit = await this.#lock(options).acquire();
    return holdWhile(heldLease(permit), () => fn(permit));
  }

  #lock(options: PermitOptions | undefined): Lock {
    return this.#handle(resolveLockOptions(this.#defaults, options, PERMIT_OPTION_NAMES));
  }
}
