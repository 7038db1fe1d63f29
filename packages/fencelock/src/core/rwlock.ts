/**
 * The two rules of read-write locks that involve the caller's own locks (Curator's
 * `InterProcessReadWriteLock`): a read lock inside the caller's write lock of the same key is a
 * downgrade, granted past that writer; a write lock inside the caller's read lock would wait for
 * itself (an upgrade), so it is refused at once. Both errors are `InvalidArgumentError` on the
 * `mode` argument.
 */
import { InvalidArgumentError } from '../errors.js';

/** A write lock asked for inside the caller's read lock of `key`. */
export function upgradeRefused(key: string): InvalidArgumentError {
  return new InvalidArgumentError(
    'mode',
    `not 'write' inside a read lock of "${key}" (a read-to-write upgrade would wait for itself; release the read lock first)`,
    'write',
  );
}

/**
 * A downgrade that finds another writer queued behind the caller's write lock: that writer waits
 * for the write lock, which is released only after this read, so waiting would never end; and
 * granting past it would let it in beside the reader once the write lock goes. Backends throw
 * this after withdrawing the read attempt.
 */
export function downgradeBlocked(key: string): InvalidArgumentError {
  return new InvalidArgumentError(
    'mode',
    `'read' inside the write lock of "${key}" only while no other writer waits for it (release the write lock first)`,
    'read',
  );
}
