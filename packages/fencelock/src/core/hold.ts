/**
 * Running a callback while something is held (`withLock`, `withPermit`, `withLocks`): the
 * callback races the loss of what is held, and it is released after the callback, whatever
 * happens.
 */
import { LockLostError } from '../errors.js';
import type { Lease } from './lease.js';

/** What `holdWhile` holds: one lease, or several held together (a `MultiLease`). */
export interface Held {
  /** Aborted with a `LockLostError` as `reason` when what is held is lost. */
  readonly signal: AbortSignal;
  /**
   * Release it all; resolves with the `LockLostError` to report when it was not held to the end
   * (ran out meanwhile, or the engine no longer had it at release), else undefined.
   * @throws BackendError when the engine cannot answer.
   */
  releaseChecked(): Promise<LockLostError | undefined>;
  /** Release it all, best effort (after a loss or a failed callback); never rejects. */
  releaseQuietly(): Promise<void>;
}

/** A lease as `Held`. */
export function heldLease(lease: Lease): Held {
  return {
    get signal() {
      return lease.signal;
    },
    async releaseChecked() {
      const outcome = await lease.release();
      // A lease that ran out while the callback ran is declared lost by release().
      if (lease.signal.aborted) return lease.signal.reason as LockLostError;
      if (outcome === 'released') return undefined;
      return new LockLostError(lease.key, lease.fencingToken, outcome, { operation: 'release' });
    },
    releaseQuietly: () => lease.release().then(noop, noop),
  };
}

/**
 * Run `work` while `held` is held, then release it (also when `work` throws).
 * @returns what `work` returns.
 * @throws `work`'s own error, rethrown after release.
 * @throws LockLostError as soon as it is lost (`held.signal` aborts with the same error; `work`
 *   should watch it and stop), and also when `work` finished but it ran out meanwhile or the
 *   engine no longer had it at release.
 */
export async function holdWhile<T>(held: Held, work: () => Promise<T> | T): Promise<T> {
  const running = Promise.resolve().then(work);
  // If it is lost first, `running` may still settle later: never leave it unhandled.
  running.catch(noop);
  const { signal } = held;
  let onAbort: (() => void) | undefined;
  const lost = new Promise<never>((_, reject) => {
    onAbort = () => reject(signal.reason as LockLostError);
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
  });
  lost.catch(noop);
  let result: T;
  try {
    result = await Promise.race([running, lost]);
  } catch (error) {
    // Lost: report it now. The best-effort release must not hold the caller until an engine
    // that may be gone answers (up to the command timeout, after a renewal's).
    if (signal.aborted) void held.releaseQuietly();
    else await held.releaseQuietly();
    throw error;
  } finally {
    if (onAbort) signal.removeEventListener('abort', onAbort);
  }
  // Either way a hold that did not last to the release did not protect the work to its end,
  // and the caller must hear it.
  const loss = await held.releaseChecked();
  if (loss !== undefined) throw loss;
  return result;
}

function noop(): void {}
