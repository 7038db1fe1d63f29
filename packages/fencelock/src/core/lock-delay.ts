/**
 * Lock-delay (Chubby's, Consul's session `LockDelay`): which grants carry it, and the check
 * that the store honours it, both before any network call.
 */
import { InvalidArgumentError } from '../errors.js';
import type { ResolvedLockOptions } from '../options.js';
import type { Backend } from './backend.js';

/**
 * The lock-delay an attempt carries, ms, or undefined for none: `options.lockDelayMs` for an
 * exclusive grant (write mode, not a semaphore's permit), nothing for a read grant or a permit
 * (a locker's default lock-delay does not apply to them).
 */
export function lockDelayOf(
  options: ResolvedLockOptions,
  permits: number | undefined,
): number | undefined {
  if (options.lockDelayMs === 0 || options.mode !== 'write' || permits !== undefined)
    return undefined;
  return options.lockDelayMs;
}

/**
 * Check that `backend` honours lock-delays.
 * @throws InvalidArgumentError naming `lockDelayMs`.
 */
export function assertLockDelayGranted(backend: Backend): void {
  if (!backend.capabilities.lockDelay) {
    throw new InvalidArgumentError(
      'lockDelayMs',
      `0 on a store without lock-delay (the ${backend.name} store has none)`,
      backend.name,
    );
  }
}
