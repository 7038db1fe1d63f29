/**
 * The rules of read-write locks that the core checks before any engine call (Curator's
 * `InterProcessReadWriteLock`): the mode must be one the backend grants; a read lock inside the
 * caller's write lock of the same key is a downgrade, granted past that writer; a write lock
 * inside the caller's read lock would wait for itself (an upgrade), so it is refused at once. The
 * errors are `InvalidArgumentError` on the `mode` argument.
 */
import { InvalidArgumentError } from '../errors.js';
import type { Backend, LockMode } from './backend.js';
import { heldInContext, inHoldingScope, scopeKeyOf } from './reentry.js';

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

/**
 * Check that `backend` grants `mode` (its `capabilities.modes`).
 * @throws InvalidArgumentError naming the modes it has.
 */
export function assertModeGranted(backend: Backend, mode: LockMode): void {
  const { modes } = backend.capabilities;
  if (!modes.includes(mode)) {
    throw new InvalidArgumentError(
      'mode',
      `one of ${modes.join(', ')} (the ${backend.name} store has no ${mode} locks)`,
      mode,
    );
  }
}

/**
 * The caller's own lock of the other mode on `key`, in the current async context of this locker
 * (`scopePrefix`), decides a lease acquire of `mode`:
 * - `read` inside a held write lock (a downgrade): answers that write lock's owner, whose entry
 *   must not block this reader (`AttemptRequest.heldWriter`);
 * - `write` inside a held read lock (an upgrade): refused;
 * - otherwise: undefined.
 * @throws InvalidArgumentError (`upgradeRefused`) for an upgrade.
 */
export function heldWriterFor(
  scopePrefix: string,
  key: string,
  mode: LockMode,
): string | undefined {
  // Outside any withLock callback the caller holds nothing (and no scope key is built).
  if (!inHoldingScope()) return undefined;
  const other = heldInContext(scopeKeyOf(scopePrefix, mode === 'read' ? 'write' : 'read', key));
  if (!other?.isHeld) return undefined;
  if (mode === 'write') throw upgradeRefused(key);
  return other.owner;
}
