/**
 * The checks of a semaphore acquire that need no engine: the permit count, and a store that
 * grants permits (`capabilities.permits`).
 */
import { InvalidArgumentError } from '../errors.js';
import type { Backend } from './backend.js';

/** Largest permit count of a semaphore. */
export const MAX_PERMITS = 10_000;

/**
 * Check a semaphore's permit count: an integer from 1 to `MAX_PERMITS`.
 * @throws InvalidArgumentError naming `permits` and that range.
 */
export function validatePermits(value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > MAX_PERMITS) {
    throw new InvalidArgumentError('permits', `an integer from 1 to ${MAX_PERMITS}`, value);
  }
  return value;
}

/**
 * Check that `backend` grants semaphore permits.
 * @throws InvalidArgumentError naming the store.
 */
export function assertPermitsGranted(backend: Backend): void {
  if (!backend.capabilities.permits) {
    throw new InvalidArgumentError(
      'store',
      `a store with semaphores (the ${backend.name} store has none)`,
      backend.name,
    );
  }
}
