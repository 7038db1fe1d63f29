/**
 * Running a callback while a lease is held (`withLock`, `withPermit`): the callback races the
 * lease's loss, and the lease is released after it, whatever happens.
 */
import { LockLostError } from '../errors.js';
import type { Lease } from './lease.js';

/**
 * Run `work` while `lease` is held, then release it (also when `work` throws).
 * @returns what `work` returns.
 * @throws `work`'s own error, rethrown after release.
 * @throws LockLostError as soon as the lease is lost (`lease.signal` aborts with the same
 *   error; `work` should watch it and stop), and also when `work` finished but the lease ran out
 *   meanwhile or the engine no longer had it at release.
 */
export async function holdWhile<T>(lease: Lease, work: () => Promise<T> | T): Promise<T> {
  const running = Promise.resolve().then(work);
  // If the lease is lost first, `running` may still settle later: never leave it unhandled.
  running.catch(() => undefined);
  let onAbort: (() => void) | undefined;
  const lost = new Promise<never>((_, reject) => {
    onAbort = () => reject(lease.signal.reason as LockLostError);
    if (lease.signal.aborted) onAbort();
    else lease.signal.addEventListener('abort', onAbort, { once: true });
  });
  lost.catch(() => undefined);
  let result: T;
  try {
    result = await Promise.race([running, lost]);
  } catch (error) {
    if (lease.signal.aborted) {
      // Lost: report it now. The best-effort release must not hold the caller until an
      // engine that may be gone answers (up to the command timeout, after a renewal's).
      void lease.release().catch(() => undefined);
    } else {
      await lease.release().catch(() => undefined);
    }
    throw error;
  } finally {
    if (onAbort) lease.signal.removeEventListener('abort', onAbort);
  }
  // A lease that ran out while `work` ran (a long event-loop block, a paused process) is
  // declared lost by release(); an engine that no longer had the key says so. Either way the
  // work was not protected to its end, and the caller must hear it.
  const outcome = await lease.release();
  if (lease.signal.aborted) throw lease.signal.reason as LockLostError;
  if (outcome !== 'released') {
    throw new LockLostError(lease.key, lease.fencingToken, outcome, { operation: 'release' });
  }
  return result;
}
